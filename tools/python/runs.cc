// Sweeps for the Python package: an experiment manifest (`hetsim run`, sim/runner) and an advise config
// (`hetsim advise`, sim/advise), each writing its results folder as the CLI does; hetsim/__init__.py reads
// the folder's tables into DataFrames.
#include <sstream>
#include <streambuf>

#include "models/spec_io.h"
#include "sim/advise/advise.h"
#include "sim/advise/config.h"
#include "sim/runner/runner.h"
#include "tools/python/bindings.h"

namespace hetsim::python {
namespace {

// A stream buffer that hands each line (ended by '\n' or a progress bar's '\r') to a Python callable and
// keeps the text; with None it only keeps it.
class LineBuf : public std::streambuf {
 public:
  explicit LineBuf(const py::object* callback) : callback_(callback) {}
  std::string text() const { return all_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    const char ch = static_cast<char>(c);
    all_ += ch;
    if (ch != '\n' && ch != '\r') {
      line_ += ch;
    } else if (!line_.empty()) {
      CallQuietly(*callback_, line_);
      line_.clear();
    }
    return c;
  }

 private:
  const py::object* callback_;
  std::string line_, all_;
};

struct RunArgs {
  std::string out_dir;
  bool resume = false;
  int jobs = 1;
  bool figures = false;
  bool prune = true;          // advise
  double time_limit_s = 600;  // advise
  py::object progress = py::none();
};

void CheckJobs(int jobs) {
  if (jobs < 1 || jobs > 256) throw SpecError("jobs: expected 1..256, found " + std::to_string(jobs));
}

// Python planners run in this process, where the interpreter is: one worker only.
template <typename Choices>
void CheckPythonPlannersJobs(const Choices& planners, int jobs, const std::string& file) {
  for (const auto& p : planners) {
    if (jobs > 1 && p.name.rfind("python:", 0) == 0) {
      throw SpecError(file + ": planner '" + p.label + "' is written in Python and runs in this process; use jobs=1");
    }
  }
}

py::dict Run(const Source& manifest, const RunArgs& a) {
  CheckJobs(a.jobs);
  const runner::Manifest m = manifest.text.empty()
                                 ? Unwrap(runner::LoadManifest(manifest.ref))
                                 : Unwrap(runner::LoadManifest(models::SpecText{manifest.label, manifest.text}));
  CheckPythonPlannersJobs(m.planners, a.jobs, m.file);
  runner::RunOptions opt;
  opt.out_dir = a.out_dir.empty() ? "out/" + m.spec.name() : a.out_dir;
  opt.resume = a.resume;
  opt.jobs = a.jobs;
  opt.figures = a.figures;
  opt.progress = !a.progress.is_none();
  LineBuf progress(&a.progress);
  std::ostream err(&progress);
  std::ostringstream out;
  Status st;
  {
    py::gil_scoped_release release;
    st = runner::RunExperiment(m, opt, out, err);
  }
  Check(st);
  py::dict d;
  d["out_dir"] = opt.out_dir;
  d["summary"] = out.str();
  d["messages"] = progress.text();
  d["points"] = m.points.size();
  return d;
}

py::dict Advise(const std::string& config, const RunArgs& a) {
  CheckJobs(a.jobs);
  const advise::Config c = Unwrap(advise::LoadConfig(config));
  CheckPythonPlannersJobs(c.planners, a.jobs, config);
  advise::AdviseOptions opt;
  opt.out_dir = a.out_dir;
  opt.resume = a.resume;
  opt.jobs = a.jobs;
  opt.prune = a.prune;
  opt.figures = a.figures;
  opt.progress = !a.progress.is_none();
  opt.time_limit_s = a.time_limit_s;
  LineBuf progress(&a.progress);
  std::ostream err(&progress);
  std::ostringstream out;
  Status st;
  {
    py::gil_scoped_release release;
    st = advise::RunAdvise(c, opt, out, err);
  }
  Check(st);
  py::dict d;
  d["out_dir"] = opt.out_dir.empty() ? "out/" + c.spec.name() : opt.out_dir;
  d["summary"] = out.str();
  d["messages"] = progress.text();
  return d;
}

}  // namespace

void BindRuns(py::module_& m) {
  py::class_<RunArgs>(m, "RunArgs", "How a sweep runs (the CLI's run and advise flags)")
      .def(py::init<>())
      .def_readwrite("out_dir", &RunArgs::out_dir)
      .def_readwrite("resume", &RunArgs::resume)
      .def_readwrite("jobs", &RunArgs::jobs)
      .def_readwrite("figures", &RunArgs::figures)
      .def_readwrite("prune", &RunArgs::prune)
      .def_readwrite("time_limit_s", &RunArgs::time_limit_s)
      .def_readwrite("progress", &RunArgs::progress);
  m.def("run", &Run, py::arg("manifest"), py::arg("args"));
  m.def("advise", &Advise, py::arg("config"), py::arg("args"));
}

}  // namespace hetsim::python
