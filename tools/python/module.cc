// `hetsim._hetsim`: the extension module of the Python package (docs/python.md). Registers the exceptions and
// each binding file's functions; holds the helpers they share (tools/python/bindings.h).
#include <google/protobuf/util/json_util.h>

#include "models/yaml_proto.h"
#include "tools/python/bindings.h"

namespace hetsim::python {

[[noreturn]] void ThrowStatus(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
      throw SpecError(status.message());
    case Status::Code::kInfeasible:
      throw InfeasibleError(status.message());
    case Status::Code::kIoError:
      throw IoError(status.message());
    default:
      throw SimulationError(status.message());
  }
}

void ParseText(const std::string& text, const std::string& label, google::protobuf::Message* msg) {
  Check(models::ParseYaml(text, label, msg));
}

std::string ToJson(const google::protobuf::Message& msg) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = true;
  const auto st = google::protobuf::util::MessageToJsonString(msg, &json, opt);
  if (!st.ok()) throw SimulationError("cannot write a " + msg.GetTypeName() + " as JSON: " + st.ToString());
  return json;
}

void CallQuietly(const py::object& callback, const std::string& line) {
  if (callback.is_none()) return;
  py::gil_scoped_acquire gil;
  try {
    callback(line);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("hetsim progress callback");
  }
}

}  // namespace hetsim::python

namespace py = pybind11;

PYBIND11_MODULE(_hetsim, m) {
  namespace hp = hetsim::python;
  m.doc() = "hetsim's C++ libraries for the Python package `hetsim` (use the package, not this module)";
  static py::exception<hp::SpecError> spec_error(m, "SpecError", PyExc_ValueError);
  static py::exception<hp::InfeasibleError> infeasible(m, "InfeasibleError", spec_error.ptr());
  static py::exception<hp::SimulationError> simulation_error(m, "SimulationError", PyExc_RuntimeError);
  static py::exception<hp::IoError> io_error(m, "IoError", PyExc_OSError);
  // pybind11 maps each C++ exception type to the Python one registered for it.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hp::InfeasibleError& e) {
      PyErr_SetString(infeasible.ptr(), e.what());
    } catch (const hp::SpecError& e) {
      PyErr_SetString(spec_error.ptr(), e.what());
    } catch (const hp::SimulationError& e) {
      PyErr_SetString(simulation_error.ptr(), e.what());
    } catch (const hp::IoError& e) {
      PyErr_SetString(io_error.ptr(), e.what());
    }
  });
  hp::BindSpecs(m);
  hp::BindSimulate(m);
  hp::BindPlanners(m);
  hp::BindRuns(m);
}
