#include "common/net_address.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(NetAddressTest, WildcardHosts) {
  for (const char* h : {"0.0.0.0", "*", "::", ""}) EXPECT_TRUE(IsWildcardHost(h)) << h;
  for (const char* h : {"127.0.0.1", "10.0.0.1", "node-3"}) EXPECT_FALSE(IsWildcardHost(h)) << h;
}

TEST(NetAddressTest, AdvertisedHostPrefersTheSetAddressThenTheBoundOneThenTheHostName) {
  EXPECT_EQ(AdvertisedHost("10.1.0.2", "", "box"), "10.1.0.2");
  EXPECT_EQ(AdvertisedHost("0.0.0.0", "", "box"), "box");
  EXPECT_EQ(AdvertisedHost("0.0.0.0", "ctl.job.svc", "box"), "ctl.job.svc");
  EXPECT_EQ(AdvertisedHost("10.1.0.2", "10.9.9.9", "box"), "10.9.9.9");
}

TEST(NetAddressTest, TheRouteToLoopbackLeavesFromLoopback) {
  auto a = LocalAddressToward("127.0.0.1", 9);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  auto b = LocalAddressToward("127.0.0.7", 9);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rfind("127.", 0), 0u) << *b;
}

TEST(NetAddressTest, AnUnresolvableHostIsNamedInTheError) {
  auto a = LocalAddressToward("no-such-host.invalid", 9);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("no-such-host.invalid"), std::string::npos) << a.status();
}

}  // namespace
}  // namespace rlforge
