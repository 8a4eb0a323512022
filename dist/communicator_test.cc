#include "dist/communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "config/build_info.h"

namespace rlforge::dist {
namespace {

// Runs fn(communicator) on `size` ranks, one thread each, joined through one store.
void RunRanks(int size, const std::function<void(Communicator&)>& fn, double timeout_s = 20) {
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  static int group = 0;
  const std::string name = "test" + std::to_string(group++);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions o;
      o.store_address = (*server)->address();
      o.name = name;
      o.rank = r;
      o.size = size;
      o.timeout_s = timeout_s;
      auto comm = ConnectGroup(o);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

class CommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorTest, AllGatherPlacesEachRanksBlock) {
  const int n = GetParam();
  RunRanks(n, [n](Communicator& c) {
    torch::Tensor in = torch::arange(5, torch::kFloat) + 100 * c.rank();
    torch::Tensor out = torch::full({5 * n}, -1.0f);
    ASSERT_TRUE(c.AllGather(in, out)->Wait().ok());
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(out.narrow(0, 5 * r, 5).equal(torch::arange(5, torch::kFloat) + 100 * r));
    }
    EXPECT_EQ(c.stats().all_gather_bytes, 5 * 4 * (n - 1));
  });
}

TEST_P(CommunicatorTest, AllGatherMovesBf16Bytes) {
  const int n = GetParam();
  RunRanks(n, [n](Communicator& c) {
    torch::Tensor in = (torch::arange(3, torch::kFloat) + 0.5 + c.rank()).to(torch::kBFloat16);
    torch::Tensor out = torch::zeros({3 * n}, torch::kBFloat16);
    ASSERT_TRUE(c.AllGather(in, out)->Wait().ok());
    EXPECT_EQ(out[3 * (n - 1)].item<float>(), 0.5f + static_cast<float>(n - 1));
  });
}

TEST_P(CommunicatorTest, ReduceScatterSumsBlockOfThisRank) {
  const int n = GetParam();
  RunRanks(n, [n](Communicator& c) {
    // rank r contributes (r + 1) * [0, 1, ..., 4n-1]; block b of the sum is
    // sum_r (r + 1) * [4b, ..., 4b + 3].
    torch::Tensor in = torch::arange(4 * n, torch::kFloat) * (c.rank() + 1);
    torch::Tensor out = torch::zeros({4});
    ASSERT_TRUE(c.ReduceScatter(in, out)->Wait().ok());
    const float scale = n * (n + 1) / 2.0f;
    EXPECT_TRUE(out.allclose(torch::arange(4, torch::kFloat).add(4 * c.rank()) * scale)) << out;
    EXPECT_EQ(c.stats().reduce_scatter_bytes, 4 * 4 * (n - 1));
  });
}

TEST_P(CommunicatorTest, AllReduceAndBroadcast) {
  const int n = GetParam();
  RunRanks(n, [n](Communicator& c) {
    torch::Tensor t = torch::full({3}, static_cast<float>(c.rank() + 1));
    ASSERT_TRUE(c.AllReduceSum(t)->Wait().ok());
    EXPECT_TRUE(t.equal(torch::full({3}, n * (n + 1) / 2.0f)));
    torch::Tensor b = torch::full({2}, static_cast<float>(c.rank()));
    ASSERT_TRUE(c.Broadcast(b, n - 1)->Wait().ok());
    EXPECT_TRUE(b.equal(torch::full({2}, static_cast<float>(n - 1))));
  });
}

TEST_P(CommunicatorTest, SeveralCollectivesInFlight) {
  const int n = GetParam();
  RunRanks(n, [n](Communicator& c) {
    torch::Tensor a = torch::full({2}, 1.0f + c.rank()), ga = torch::zeros({2 * n});
    torch::Tensor b = torch::ones({2 * n}), rb = torch::zeros({2});
    auto p1 = c.AllGather(a, ga);
    auto p2 = c.ReduceScatter(b, rb);
    ASSERT_TRUE(p2->Wait().ok());
    ASSERT_TRUE(p1->Wait().ok());
    EXPECT_EQ(ga[2 * n - 1].item<float>(), static_cast<float>(n));
    EXPECT_TRUE(rb.equal(torch::full({2}, static_cast<float>(n))));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorTest, ::testing::Values(1, 2, 3));

TEST(CommunicatorFailureTest, APeerThatNeverJoinsFailsTheCollectiveWithinTheDeadline) {
  RunRanks(
      2,
      [](Communicator& c) {
        if (c.rank() == 1) return;  // rank 1 never takes part
        const Stopwatch t;
        torch::Tensor in = torch::ones({4}), out = torch::zeros({8});
        absl::Status s = c.AllGather(in, out)->Wait();
        EXPECT_FALSE(s.ok());
        EXPECT_NE(s.message().find("group"), absl::string_view::npos) << s;
        EXPECT_NE(s.message().find("rank 0 of 2"), absl::string_view::npos) << s;
        EXPECT_LT(t.Seconds(), 10.0);
      },
      /*timeout_s=*/1.5);
}

TEST(CommunicatorFailureTest, JoiningAGroupWhoseRanksNeverComeTimesOut) {
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok());
  GroupOptions o;
  o.store_address = (*server)->address();
  o.rank = 0;
  o.size = 2;
  o.timeout_s = 1;
  const Stopwatch t;
  auto comm = ConnectGroup(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("rank 0 of 2"), absl::string_view::npos) << comm.status();
  EXPECT_LT(t.Seconds(), 10.0);
}

TEST(CommunicatorFailureTest, BadAddressAndRankAreNamed) {
  GroupOptions o;
  o.store_address = "nohost";
  o.size = 2;
  EXPECT_NE(ConnectGroup(o).status().message().find("'nohost' is not host:port"),
            absl::string_view::npos);
  o.rank = 2;
  EXPECT_NE(ConnectGroup(o).status().message().find("rank 2 is not in a group of 2"),
            absl::string_view::npos);
}

TEST(CommunicatorDeviceTest, ACudaGroupInABuildWithoutNcclIsRefusedSayingWhy) {
  if (RLFORGE_NCCL) GTEST_SKIP() << "this build links NCCL: nccl_communicator_gpu_test covers it";
  GroupOptions o;
  o.store_address = "127.0.0.1:1";  // never reached: refused before any connection
  o.rank = 1;
  o.size = 2;
  o.device = "cuda:1";
  absl::Status s = ConnectGroup(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("group trainer, rank 1 of 2: device cuda:1: "), std::string::npos)
      << s;
  EXPECT_NE(s.message().find(RLFORGE_TORCH_CUDA ? "this rlforge was built without NCCL"
                                                : "this rlforge is built against a CPU-only "
                                                  "libtorch (Debian's), which has no CUDA tensors "
                                                  "and links no NCCL"),
            std::string::npos)
      << s;
}

TEST(CommunicatorDeviceTest, ADeviceThatIsNotCpuOrCudaNIsNamed) {
  for (const char* bad : {"gpu", "cuda", "cuda:x", "cuda:-1"}) {
    GroupOptions o;
    o.device = bad;
    EXPECT_NE(ConnectGroup(o).status().message().find(
                  absl::StrCat("group trainer, rank 0: device '", bad, "' is not cpu or cuda:N")),
              std::string::npos)
        << bad;
  }
}

TEST(CommunicatorDeviceTest, AGroupOfOneRefusesTensorsOffItsDevice) {
  GroupOptions o;
  auto comm = ConnectGroup(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->device(), torch::Device(torch::kCPU));
  torch::Tensor elsewhere = torch::empty({4}, torch::kMeta);  // any device but the group's
  absl::Status s = (*comm)->AllReduceSum(elsewhere)->Wait();
  EXPECT_NE(s.message().find("group of one: all_reduce: a tensor on meta; this group's are on cpu"),
            std::string::npos)
      << s;
  EXPECT_FALSE((*comm)->AllGather(elsewhere, torch::zeros({4}))->Wait().ok());
  EXPECT_TRUE((*comm)->AllGather(torch::ones({4}), torch::zeros({4}))->Wait().ok());
}

TEST(GlooDeviceTest, GlooSocketIfnameNamesTheInterface) {
  auto d = ChooseGlooDevice("10.11.12.13", 29500, "eth7");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->interface, "eth7");
  EXPECT_EQ(d->address, "");
}

TEST(GlooDeviceTest, WithoutItTheDeviceTakesTheAddressThatRoutesToTheStore) {
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    auto d = ChooseGlooDevice("127.0.0.1", 29500, unset);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->interface, "");
    EXPECT_EQ(d->address, "127.0.0.1");
  }
}

TEST(GlooDeviceTest, AStoreHostWithNoAddressIsNamed) {
  auto d = ChooseGlooDevice("store.invalid", 29500, nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("store.invalid:29500"), absl::string_view::npos)
      << d.status();
  EXPECT_NE(d.status().message().find("GLOO_SOCKET_IFNAME"), absl::string_view::npos) << d.status();
}

// A port nothing listens on now (the OS's pick, released).
int FreePort() {
  auto probe = StoreServer::Start("127.0.0.1");
  EXPECT_TRUE(probe.ok()) << probe.status();
  const std::string a = (*probe)->address();
  return std::stoi(a.substr(a.rfind(':') + 1));
}

TEST(StoreServerTest, AFixedPortIsAdvertisedUnderTheGivenNameAndServesRanks) {
  const int port = FreePort();
  auto server = StoreServer::Start("127.0.0.1", port, "store.example");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address(), "store.example:" + std::to_string(port));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([port, r] {
      GroupOptions o;
      o.store_address = "127.0.0.1:" + std::to_string(port);  // this host's way to the store
      o.name = "fixed";
      o.rank = r;
      o.size = 2;
      o.timeout_s = 20;
      auto comm = ConnectGroup(o);
      ASSERT_TRUE(comm.ok()) << comm.status();
      torch::Tensor t = torch::full({2}, 1.0f + r);
      ASSERT_TRUE((*comm)->AllReduceSum(t)->Wait().ok());
      EXPECT_TRUE(t.equal(torch::full({2}, 3.0f)));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(StoreServer::Start("127.0.0.1", 70000).ok());
}

TEST(StoreServerTest, RanksBindTheInterfaceGlooSocketIfnameNames) {
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  RunRanks(2, [](Communicator& c) {
    torch::Tensor t = torch::full({1}, static_cast<float>(c.rank()));
    ASSERT_TRUE(c.Broadcast(t, 1)->Wait().ok());
    EXPECT_EQ(t.item<float>(), 1.0f);
  });
  unsetenv("GLOO_SOCKET_IFNAME");
}

}  // namespace
}  // namespace rlforge::dist
