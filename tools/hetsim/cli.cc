#include "tools/hetsim/cli.h"

#include <ostream>

#include "models/spec_io.h"
#include "models/suggest.h"

namespace hetsim::cli {
namespace {

void PrintTopHelp(std::ostream& out) {
  out << "hetsim — a digital twin of heterogeneous GPU clusters for large-model training\n\n"
         "usage: hetsim COMMAND [FLAGS]\n\ncommands:\n";
  for (const auto& c : Commands()) {
    out << "  " << c.name << std::string(c.name.size() < 10 ? 10 - c.name.size() : 1, ' ') << c.summary << "\n";
  }
  out << "\n`hetsim COMMAND --help` describes a command's flags.\n";
}

}  // namespace

int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc < 2) {
    PrintTopHelp(err);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintTopHelp(out);
    return 0;
  }
  if (name == "--version") {
    out << "hetsim 0.1.0\n";
    return 0;
  }
  std::vector<std::string> names;
  const Command* cmd = nullptr;
  for (const auto& c : Commands()) {
    names.push_back(c.name);
    if (c.name == name) cmd = &c;
  }
  if (cmd == nullptr) {
    err << "hetsim: unknown command '" << name << "'" << DidYouMean(name, names)
        << " (`hetsim --help` lists the commands)\n";
    return 2;
  }
  po::options_description desc(cmd->usage + "\n\n" + cmd->summary + "\n\nflags");
  desc.add_options()("help,h", "print this help");
  po::positional_options_description pos;
  cmd->flags(desc, pos);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      out << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> flags;
    for (const auto& o : desc.options()) flags.push_back("--" + o->long_name());
    const std::string bad = e.get_option_name();
    err << "hetsim " << name << ": unknown flag '" << bad << "'" << DidYouMean(bad, flags) << " (`hetsim " << name
        << " --help` lists the flags)\n";
    return 2;
  } catch (const po::error& e) {
    err << "hetsim " << name << ": " << e.what() << " (`hetsim " << name << " --help` lists the flags)\n";
    return 2;
  }
  // Files a command writes at its end are checked before it starts: a long run never ends in "cannot write".
  for (const char* flag : {"report-out", "timeline-out", "output", "figure", "ops-out", "profile-out"}) {
    if (!vm.count(flag)) continue;
    const auto* value = boost::any_cast<std::string>(&vm[flag].value());
    if (value == nullptr || value->empty()) continue;
    if (Status st = models::CheckWritable(*value, std::string("--") + flag); !st.ok()) {
      err << "hetsim " << name << ": " << st.message() << "\n";
      return 1;
    }
  }
  try {
    return cmd->run(vm, out, err);
  } catch (const std::bad_alloc&) {
    // Out of memory anywhere in the command: a clear error and a non-zero exit, never an abort. What was
    // written before (a manifest's finished points, a replay's streamed lines) stays.
    err << "hetsim " << name << ": out of memory; the inputs need more than this machine gives (lower the trace's "
           "events, the sweep's points, the cluster's GPUs or the global batch, or run where more memory is "
           "free)\n";
    return 1;
  }
}

}  // namespace hetsim::cli
