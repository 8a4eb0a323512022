#include "common/host_address.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(HostAddressTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "*", "10.0.0.1", "128.0.0.1", "127.0.0", "127.0.0.256",
                        "::", "node1", "", "127.0.0.1.5", "127.evil.example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

}  // namespace
}  // namespace rlforge
