// Status helpers used across module boundaries.
//
// Library code returns absl::Status / absl::StatusOr<T>; these macros keep the
// happy path readable. Error messages name the thing, the value and the place.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define RLFORGE_CONCAT_INNER(a, b) a##b
#define RLFORGE_CONCAT(a, b) RLFORGE_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status rlforge_status_ = (expr);           \
    if (!rlforge_status_.ok()) return rlforge_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F())` assigns the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(RLFORGE_CONCAT(rlforge_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

namespace rlforge {

// Prefixes a non-OK status message with context ("while loading X: ...").
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

// Whether `s` says that the input is wrong: a config value, a file it names, a plugin that
// refuses its arguments (InvalidArgument, NotFound, FailedPrecondition, OutOfRange,
// PermissionDenied, Unimplemented, DataLoss). The same input fails the same way again, so such a
// failure is final; any other code (Unavailable, DeadlineExceeded, ResourceExhausted, Internal:
// a libtorch exception, ...) may pass on a retry and counts as a fault.
inline bool IsInputError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

// The message as a std::string (Debian's absl::string_view is not std::string_view,
// so fmt/spdlog cannot print it directly).
inline std::string Msg(const absl::Status& s) { return std::string(s.message()); }

}  // namespace rlforge
