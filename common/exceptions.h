// Where exceptions stop. libtorch reports errors by throwing (c10::Error derives from
// std::exception); rlforge lets no exception cross a module boundary, so code that calls
// libtorch runs through CallCatching at its edge and hands on an absl::Status.
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rlforge {

// Runs `fn` (returning absl::Status or absl::StatusOr<T>) and returns what it returns; a
// std::exception it throws becomes InternalError(prefix + what()). Other throws pass through.
// A lambda whose returns differ in type (a StatusOr and an error) names its return type:
//   return CallCatching([&]() -> absl::StatusOr<WorkReply> { ... });
template <typename Fn>
std::invoke_result_t<Fn&> CallCatching(Fn&& fn, const char* prefix = "libtorch: ") {
  static_assert(std::is_constructible_v<std::invoke_result_t<Fn&>, absl::Status>,
                "CallCatching's callable returns absl::Status or absl::StatusOr<T>");
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(prefix, e.what()));
  }
}

}  // namespace rlforge
