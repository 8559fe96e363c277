// Status: the error channel of the PhaseKV core. No exceptions cross library boundaries;
// functions that can fail on user input return a Status whose message names the field
// and the value at fault. Broken internal invariants use PKV_ASSERT instead.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace phasekv {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a caller-supplied value is out of range or malformed
  kInvalidFile = 2,      // a model / GGUF / data file is corrupt or inconsistent
  kUnsupported = 3,      // well-formed input that this build does not handle
  kIoError = 4,          // open / read / write / mmap failed
  kOutOfMemory = 5,      // an allocation or a planned arena could not be had
  kBudgetExceeded = 6,   // the memory plan exceeds the configured budget
  kInternal = 7,         // a bug in PhaseKV
  kCancelled = 8,        // the caller asked a long operation to stop (a progress callback)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "ok".
  std::string to_string() const;

  // Prefix the message with context ("reading model.pkv: ...").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// printf-style constructor for error statuses.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
Status make_error(StatusCode code, const char* fmt, ...);

}  // namespace phasekv

#define PKV_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::phasekv::Status pkv_status_ = (expr);    \
    if (!pkv_status_.ok()) return pkv_status_; \
  } while (0)

// Internal invariants: a failure is a PhaseKV bug, reported with file and line.
#define PKV_ASSERT(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "phasekv: internal assertion failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                                       \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
