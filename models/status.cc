#include "models/status.h"

#include <sstream>

namespace hetsim {

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  std::istringstream in(message_);
  std::string line, out;
  while (std::getline(in, line)) {
    if (!out.empty()) out += '\n';
    out += prefix + line;
  }
  return Status(code_, out);
}

void ErrorList::Add(const Status& s) {
  if (s.ok()) return;
  std::istringstream in(s.message());
  std::string line;
  while (std::getline(in, line)) errors_.push_back(line);
}

Status ErrorList::ToStatus(Status::Code code) const {
  if (errors_.empty()) return Status::Ok();
  std::string msg;
  for (const auto& e : errors_) {
    if (!msg.empty()) msg += '\n';
    msg += e;
  }
  switch (code) {
    case Status::Code::kNotFound: return Status::NotFound(msg);
    case Status::Code::kInfeasible: return Status::Infeasible(msg);
    case Status::Code::kIoError: return Status::IoError(msg);
    default: return Status::Invalid(msg);
  }
}

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal error: check `%s` failed: %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace hetsim
