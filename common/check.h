// RF_CHECK: internal invariants that no input can break. On failure it prints
// the condition, the place and an optional streamed message, then aborts.
// (Named RF_ to stay clear of glog's CHECK, which libtorch's headers bring in.)
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace rlforge::internal {

class CheckFailure {
 public:
  CheckFailure(const char* cond, const char* file, int line) {
    stream_ << file << ":" << line << ": internal check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace rlforge::internal

#define RF_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::rlforge::internal::CheckFailure(#cond, __FILE__, __LINE__).stream()
#define RF_CHECK_EQ(a, b) RF_CHECK((a) == (b))
#define RF_CHECK_GE(a, b) RF_CHECK((a) >= (b))
#define RF_CHECK_GT(a, b) RF_CHECK((a) > (b))
#define RF_CHECK_LT(a, b) RF_CHECK((a) < (b))
