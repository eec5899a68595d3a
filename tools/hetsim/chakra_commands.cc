// `hetsim export-chakra`: a plan's lowering as Chakra execution traces, one file per rank; `hetsim
// import-chakra`: Chakra traces decoded, summarised and simulated on a cluster (sim/chakra.h, docs/chakra.md).
#include <filesystem>
#include <ostream>
#include <sstream>

#include "models/chakra.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "sim/chakra.h"
#include "sim/simulator.h"
#include "tools/hetsim/cli.h"

namespace hetsim::cli {
namespace {

namespace fs = std::filesystem;

// The calibration as `simulate` picks it: --calibration when given, else the plan's own, else `default`.
Result<std::string> PlanCalibration(const po::variables_map& vm, const Specs& specs) {
  const bool from_plan = vm["calibration"].defaulted() && !specs.plan->calibration().empty();
  const std::string calibration =
      from_plan ? models::ResolveRelative(specs.plan->calibration(), specs.plan_file) : FlagString(vm, "calibration");
  HETSIM_RETURN_IF_ERROR(from_plan ? models::CheckKernelCalibration(calibration, specs.plan_file + ": calibration")
                                   : models::CheckKernelCalibration(calibration));
  return calibration;
}

ChakraProtoMsg::AttributeProto StringAttr(const std::string& name, const std::string& value) {
  ChakraProtoMsg::AttributeProto a;
  a.set_name(name);
  a.set_string_val(value);
  return a;
}

// The traces of the plan the flags name, with the simulator's prices at --fidelity.
Result<std::vector<models::ChakraTrace>> ExportFromFlags(const po::variables_map& vm, const Specs& specs,
                                                         const models::ProfileDb& profiles) {
  const models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  HETSIM_RETURN_IF_ERROR(models::ValidatePlanStructure(*specs.plan, ctx, specs.plan_file));
  const std::string fid_name = FlagString(vm, "fidelity");
  HETSIM_ASSIGN_OR_RETURN(const sim::Fidelity fid, sim::ParseFidelity(fid_name));
  sim::ChakraExportRequest request;
  request.fidelity = fid;
  HETSIM_ASSIGN_OR_RETURN(request.compute.calibration, PlanCalibration(vm, specs));
  request.profiles = &profiles;
  request.metadata = {StringAttr("hetsim_fidelity", fid_name), StringAttr("hetsim_plan", specs.plan_file),
                      StringAttr("hetsim_cluster", specs.cluster->name()),
                      StringAttr("hetsim_model", specs.model->name())};
  return sim::ExportPlanChakra(*specs.plan, ctx, request);
}

int RunExportChakra(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  auto specs = LoadSpecs(vm, true, true);
  if (!specs.ok()) return Fail(err, specs.status());
  if (!specs->plan) {
    err << "hetsim export-chakra: give --plan FILE\n";
    return 2;
  }
  std::vector<std::string> profile_refs;
  if (vm.count("profile")) profile_refs = vm["profile"].as<std::vector<std::string>>();
  auto profiles = models::ProfileDb::Load(profile_refs);
  if (!profiles.ok()) return Fail(err, profiles.status());
  auto traces = ExportFromFlags(vm, *specs, *profiles);
  if (!traces.ok()) return Fail(err, traces.status());
  const std::string dir = FlagString(vm, "out-dir");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    err << "hetsim export-chakra: --out-dir " << dir << ": not a folder (create it first)\n";
    return 1;
  }
  std::string prefix = FlagString(vm, "prefix");
  if (prefix.empty()) prefix = specs->plan->name().empty() ? "hetsim" : specs->plan->name();
  size_t nodes = 0;
  for (const auto& t : *traces) {
    const std::string path = (fs::path(dir) / models::ChakraFileName(prefix, t.rank)).string();
    if (Status st = models::WriteChakraTrace(path, t); !st.ok()) return Fail(err, st);
    nodes += t.nodes.size();
  }
  out << "exported " << specs->plan_file << " as " << traces->size() << " Chakra ET files (" << nodes << " nodes, "
      << "fidelity " << FlagString(vm, "fidelity") << "): "
      << (fs::path(dir) / models::ChakraFileName(prefix, 0)).string()
      << (traces->size() > 1 ? " ... ." + std::to_string(traces->size() - 1) + ".et" : "") << "\n";
  return 0;
}

// --devices 0,8,16-23: rank r on the r-th device listed.
Result<std::vector<uint32_t>> DeviceList(const std::string& spec) {
  std::vector<uint32_t> ids;
  std::stringstream ss(spec);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    unsigned a = 0, b = 0;
    char dash = 0;
    std::istringstream t(tok);
    if (!(t >> a)) return Status::Invalid("--devices: '" + tok + "' is not a device id or range (e.g. 0,8,16-23)");
    b = a;
    if (t >> dash && (dash != '-' || !(t >> b) || b < a)) {
      return Status::Invalid("--devices: '" + tok + "' is not a device id or range (e.g. 0,8,16-23)");
    }
    for (unsigned d = a; d <= b; ++d) ids.push_back(d);
  }
  return ids;
}

// A setting the export recorded in the files' metadata, or "".
std::string Recorded(const models::ChakraTrace& t, const char* name) {
  const auto* a = models::FindAttr(t.metadata, name);
  return a == nullptr ? "" : a->string_val();
}

Result<std::vector<models::ChakraTrace>> ReadTraces(const po::variables_map& vm) {
  if (!vm.count("files")) return Status::Invalid("hetsim import-chakra: name Chakra ET files or a folder of them");
  HETSIM_ASSIGN_OR_RETURN(const auto files, models::ChakraFiles(vm["files"].as<std::vector<std::string>>()));
  std::vector<models::ChakraTrace> traces;
  for (const auto& f : files) {
    HETSIM_ASSIGN_OR_RETURN(models::ChakraTrace t, models::ReadChakraTrace(f));
    traces.push_back(std::move(t));
  }
  return traces;
}

void PrintSummaries(const std::vector<models::ChakraTrace>& traces, size_t issuable, std::ostream& out) {
  const size_t shown = std::min<size_t>(traces.size(), 4);
  for (size_t i = 0; i < shown; ++i) out << models::DescribeChakraTrace(traces[i], issuable);
  if (traces.size() > shown) out << "… and " << traces.size() - shown << " more ranks' files\n";
}

Result<sim::ChakraSimResult> SimulateFromFlags(const po::variables_map& vm, std::vector<models::ChakraTrace>&& traces,
                                               std::ostream& out) {
  HETSIM_ASSIGN_OR_RETURN(const models::Cluster cluster, models::LoadCluster(FlagString(vm, "cluster")));
  models::ChakraImportOptions io;
  io.durations = vm.count("durations") > 0;
  if (vm.count("devices")) {
    HETSIM_ASSIGN_OR_RETURN(io.devices, DeviceList(FlagString(vm, "devices")));
  }
  if (vm.count("replicate")) io.replicate = vm["replicate"].as<uint32_t>();
  sim::ChakraSimOptions so;
  so.calibration = vm.count("calibration") ? FlagString(vm, "calibration") : Recorded(traces[0], "hetsim_calibration");
  HETSIM_RETURN_IF_ERROR(models::CheckKernelCalibration(so.calibration));
  io.calibration = so.calibration;
  std::string fid_name = vm.count("fidelity") ? FlagString(vm, "fidelity") : Recorded(traces[0], "hetsim_fidelity");
  if (fid_name.empty()) fid_name = "balanced";
  HETSIM_ASSIGN_OR_RETURN(so.fidelity, sim::ParseFidelity(fid_name));
  HETSIM_ASSIGN_OR_RETURN(models::ImportedChakra imported, models::ImportChakra(traces, cluster, io));
  for (const auto& n : imported.notes) out << "note: " << n << "\n";
  HETSIM_ASSIGN_OR_RETURN(sim::ChakraSimResult res, sim::SimulateChakra(std::move(imported), cluster, so));
  out << "simulated " << res.ranks << " ranks on " << cluster.name() << " (fidelity " << fid_name << ", "
      << res.operations << " operations, compute from " << (io.durations ? "recorded durations" : "FLOPs and bytes")
      << ")\n  iteration time  " << Fmt("%.6f", res.engine.iteration_s) << " s\n";
  return res;
}

int RunImportChakra(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  auto traces = ReadTraces(vm);
  if (!traces.ok()) return Fail(err, traces.status());
  PrintSummaries(*traces, vm["issuable"].as<uint32_t>(), out);
  if (!vm.count("cluster")) {
    if (vm.count("decode-only")) return 0;
    err << "hetsim import-chakra: give --cluster C to simulate the traces (or --decode-only)\n";
    return 2;
  }
  auto res = SimulateFromFlags(vm, std::move(*traces), out);
  if (!res.ok()) return Fail(err, res.status());
  return 0;
}

}  // namespace

std::vector<Command> ChakraCommands() {
  return {{"export-chakra", "write a plan's lowering as Chakra execution traces, one file per rank (docs/chakra.md)",
           "hetsim export-chakra --plan P [--cluster C --model M --training T] [-o DIR] [--prefix NAME]",
           [](po::options_description& d, po::positional_options_description&) {
             AddSpecFlags(d, true);
             d.add_options()("out-dir,o", po::value<std::string>()->default_value("."), "folder for the files")
                 ("prefix", po::value<std::string>(), "file names <prefix>.<rank>.et (default: the plan's name)")
                 ("fidelity", po::value<std::string>()->default_value("balanced"),
                  "fast | balanced | full: the lowering (per pass or per layer) and prices `simulate` uses")
                 ("calibration", po::value<std::string>()->default_value("default"),
                  "kernel-model calibration for the compute durations (default: the plan's own, else default)")
                 ("profile", po::value<std::vector<std::string>>()->composing(),
                  "measured layer profile (bundled name or path); repeatable");
           },
           RunExportChakra},
          {"import-chakra", "decode Chakra execution traces, print a summary and simulate them on a cluster",
           "hetsim import-chakra FILES|DIR --cluster C [--durations] [--replicate N] [--devices 0,8,16-23]",
           [](po::options_description& d, po::positional_options_description& p) {
             d.add_options()("files", po::value<std::vector<std::string>>(), "Chakra ET files or folders of *.et")
                 ("cluster,c", po::value<std::string>(), "cluster to simulate on (bundled name or path)")
                 ("durations", "compute nodes take their recorded duration_micros (hetsim's exact hetsim_seconds) "
                               "instead of a price from their FLOPs and tensor bytes on the device")
                 ("replicate", po::value<uint32_t>(), "play a one-rank trace on N ranks (its collectives span them)")
                 ("devices", po::value<std::string>(), "rank r runs on the r-th device listed (default: as "
                                                       "exported, else device r)")
                 ("fidelity", po::value<std::string>(), "fast | balanced | full (default: as exported, else balanced)")
                 ("calibration", po::value<std::string>(), "kernel-model calibration (default: as exported, else "
                                                           "default)")
                 ("issuable", po::value<uint32_t>()->default_value(2), "first issuable nodes to print per file")
                 ("decode-only", "print the summary only (no --cluster needed)");
             p.add("files", -1);
           },
           RunImportChakra}};
}

}  // namespace hetsim::cli
