// `hetsim trace generate|convert|describe`: Llama-3-style failure traces, published spot traces as hetsim
// traces, and a trace's summary (traces/, docs/traces.md).
#include <ostream>

#include "models/spec_io.h"
#include "models/yaml_proto.h"
#include "tools/hetsim/cli.h"
#include "traces/llama3.h"
#include "traces/spot.h"
#include "traces/trace.h"

namespace hetsim::cli {
namespace {

int Write(const proto::Trace& t, const models::Cluster& cluster, const po::variables_map& vm, std::ostream& out,
          std::ostream& err) {
  if (Status s = traces::CheckTrace(t, cluster, t.name()); !s.ok()) {
    err << s.message() << "\n";
    return 1;
  }
  out << traces::DescribeTrace(t, cluster);
  if (vm.count("output")) {
    if (Status s = traces::SaveTrace(t, FlagString(vm, "output")); !s.ok()) {
      err << s.message() << "\n";
      return 1;
    }
    out << "trace: " << FlagString(vm, "output") << "\n";
  }
  return 0;
}

int RunTrace(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  const std::string action = FlagString(vm, "action");
  if (action == "describe") {
    if (!vm.count("trace")) {
      err << "hetsim trace describe: give --trace FILE\n";
      return 2;
    }
    auto t = traces::LoadTrace(FlagString(vm, "trace"));
    if (!t.ok()) {
      err << t.status().message() << "\n";
      return 1;
    }
    const std::string cref = vm.count("cluster") ? FlagString(vm, "cluster") : models::ResolveRelative(t->cluster(), FlagString(vm, "trace"));
    if (cref.empty()) {
      err << FlagString(vm, "trace") << ": cluster: the trace names no cluster; add `cluster:` or pass --cluster\n";
      return 1;
    }
    auto cluster = models::LoadCluster(cref);
    if (!cluster.ok()) {
      err << cluster.status().message() << "\n";
      return 1;
    }
    if (Status s = traces::CheckTrace(*t, *cluster, FlagString(vm, "trace")); !s.ok()) {
      err << s.message() << "\n";
      return 1;
    }
    out << traces::DescribeTrace(*t, *cluster);
    return 0;
  }
  if (action != "generate" && action != "convert") {
    err << "hetsim trace: unknown action '" << action << "' (generate, convert, describe)\n";
    return 2;
  }
  if (!vm.count("cluster")) {
    err << "hetsim trace " << action << ": give --cluster (the cluster the trace's GPUs and nodes belong to)\n";
    return 2;
  }
  const std::string cref = FlagString(vm, "cluster");
  auto cluster = models::LoadCluster(cref);
  if (!cluster.ok()) {
    err << cluster.status().message() << "\n";
    return 1;
  }
  if (action == "generate") {
    traces::FailureTraceOptions o;
    o.days = vm["days"].as<double>();
    o.seed = vm["seed"].as<uint64_t>();
    o.rate_scale = vm["rate-scale"].as<double>();
    if (Status s = traces::CheckFailureTraceOptions(*cluster, o, "hetsim trace generate --days", "--rate-scale");
        !s.ok()) {
      err << s.message() << "\n";
      return 2;
    }
    return Write(traces::GenerateLlama3Failures(*cluster, cref, o), *cluster, vm, out, err);
  }
  if (!vm.count("input") || !vm.count("format")) {
    err << "hetsim trace convert: give --input FILE and --format (one of";
    for (const auto& f : traces::SpotFormats()) err << " " << f;
    err << ")\n";
    return 2;
  }
  traces::SpotOptions so;
  so.format = FlagString(vm, "format");
  so.notice_s = vm["notice-s"].as<double>();
  auto t = traces::ConvertSpotTrace(FlagString(vm, "input"), *cluster, cref, so);
  if (!t.ok()) {
    err << t.status().message() << "\n";
    return 1;
  }
  return Write(*t, *cluster, vm, out, err);
}

}  // namespace

std::vector<Command> TraceCommands() {
  return {{"trace",
           "availability and failure traces: draw Llama-3-style failures, convert published spot traces, describe one",
           "hetsim trace generate --cluster C [--days 54] [--seed 1] [-o T.yaml]\n"
           "       hetsim trace convert --cluster C --format bamboo|parcae|hours-count|dated-count|skypilot --input F [-o T.yaml]\n"
           "       hetsim trace describe --trace T.yaml [--cluster C]",
           [](po::options_description& d, po::positional_options_description& pos) {
             d.add_options()("action", po::value<std::string>()->default_value("describe"), "generate | convert | describe")
                 ("cluster,c", po::value<std::string>(), "cluster (bundled name or file)")
                 ("trace", po::value<std::string>(), "describe: the trace file")
                 ("days", po::value<double>()->default_value(54), "generate: length of the trace")
                 ("seed", po::value<uint64_t>()->default_value(1), "generate: random seed")
                 ("rate-scale", po::value<double>()->default_value(1), "generate: multiplies every failure rate")
                 ("input,i", po::value<std::string>(), "convert: the published trace file")
                 ("format", po::value<std::string>(), "convert: its format (docs/traces.md)")
                 ("notice-s", po::value<double>()->default_value(120), "convert: preemption notice (AWS 120 s, GCP 30 s)")
                 ("output,o", po::value<std::string>(), "write the trace (YAML; binary protobuf when the name ends in .pb)");
             pos.add("action", 1);
           },
           RunTrace}};
}

Result<std::string> ValidateTraceFile(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(proto::Trace t, traces::LoadTrace(path));
  if (t.cluster().empty()) return Status::Invalid(path + ": cluster: the trace names no cluster; add `cluster:`");
  auto c = models::LoadCluster(models::ResolveRelative(t.cluster(), path));
  if (!c.ok()) return Status::Invalid(path + ": cluster: " + c.status().message());
  HETSIM_RETURN_IF_ERROR(traces::CheckTrace(t, *c, path));
  return "trace of " + std::to_string(t.events_size()) + " events on " + c->spec().name();
}

}  // namespace hetsim::cli
