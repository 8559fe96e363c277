#include "status.h"


namespace phasekv {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kInvalidFile: return "invalid file";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kBudgetExceeded: return "memory budget exceeded";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kCancelled: return "cancelled";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status make_error(StatusCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string msg;
  if (n > 0) {
    msg.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(&msg[0], msg.size(), fmt, ap2);
    msg.resize(static_cast<size_t>(n));
  }
  va_end(ap2);
  return Status(code, std::move(msg));
}

}  // namespace phasekv
