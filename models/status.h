// Status and Result<T>: how hetsim's libraries report errors a user can cause.
//
// Policy (CONVENTIONS.md "Errors"): user input never crashes and never trips an assert; it travels as a
// Status whose message names the file, the key path or line, what was expected, what was found and, for
// misspellings, the nearest valid name. Asserts (HETSIM_CHECK) are for programmer mistakes only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hetsim {

class Status {
 public:
  enum class Code { kOk, kInvalidArgument, kNotFound, kIoError, kInfeasible, kInternal, kAborted };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status Invalid(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Infeasible(std::string msg) { return Status(Code::kInfeasible, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  // Stopped from outside (a child process killed by a signal, e.g. the out-of-memory killer): not a verdict
  // on the input; the same work may succeed when retried.
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // One or more lines, each a complete error message.
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }

  // Returns a copy whose every line is prefixed with `prefix` (e.g. a file name).
  Status WithPrefix(const std::string& prefix) const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Collects many errors (validation reports everything wrong, not just the first problem).
class ErrorList {
 public:
  void Add(std::string msg) { errors_.push_back(std::move(msg)); }
  void Add(const Status& s);
  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<std::string>& errors() const { return errors_; }
  // Ok when empty, else an InvalidArgument status with one error per line.
  Status ToStatus(Status::Code code = Status::Code::kInvalidArgument) const;

 private:
  std::vector<std::string> errors_;
};

// A value or the Status saying why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace hetsim

#define HETSIM_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::hetsim::Status _st = (expr);          \
    if (!_st.ok()) return _st;              \
  } while (0)

#define HETSIM_CONCAT_INNER(a, b) a##b
#define HETSIM_CONCAT(a, b) HETSIM_CONCAT_INNER(a, b)
#define HETSIM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
// `HETSIM_ASSIGN_OR_RETURN(auto x, LoadThing());` — returns the error status when the Result is not ok.
#define HETSIM_ASSIGN_OR_RETURN(lhs, expr) \
  HETSIM_ASSIGN_OR_RETURN_IMPL(HETSIM_CONCAT(_res_, __LINE__), lhs, expr)

// Programmer-mistake assertion; never use on user input.
#define HETSIM_CHECK(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) ::hetsim::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
