// The NCCL communicator on real GPUs, against values computed on the CPU. Every rank is a
// forked process (dist/forked_ranks.h, whose own test runs on the CPU). Without a CUDA
// libtorch, or with too few GPUs, each GPU test skips saying why; launch/gpu-check runs them
// (NcclTwoGpuTest only where 2 GPUs are).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "dist/communicator.h"
#include "dist/forked_ranks.h"
#include "dist/nccl_communicator.h"

namespace rlforge::dist {
namespace {

#define SKIP_UNLESS_GPUS(n)                \
  do {                                     \
    const std::string why = WhyNoGpus(n);  \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

GroupOptions Options(const std::string& address, const std::string& name, int rank, int size,
                     double timeout_s = 30) {
  GroupOptions o;
  o.store_address = address;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.timeout_s = timeout_s;
  o.device = "cuda:" + std::to_string(rank);
  return o;
}

// Rank r's input for element i: distinct per rank and element, exact in bf16.
torch::Tensor Input(int rank, int64_t n, torch::ScalarType dtype) {
  return (torch::arange(n, torch::kFloat).remainder(17) + 32 * rank).to(dtype);
}

// Each collective on `c` against the same sums formed on the CPU, at an odd size.
void ExpectCollectivesMatchTheCpu(Communicator& c, torch::ScalarType dtype) {
  const int n = c.size(), r = c.rank();
  const torch::Device dev = c.device();
  const int64_t k = 13;
  torch::Tensor want_gather = torch::cat([&] {
    std::vector<torch::Tensor> parts;
    for (int q = 0; q < n; ++q) parts.push_back(Input(q, k, dtype));
    return parts;
  }());
  torch::Tensor sum = torch::zeros({n * k}, torch::kFloat);
  for (int q = 0; q < n; ++q) sum += Input(q, n * k, dtype).to(torch::kFloat);

  torch::Tensor out = torch::full({n * k}, -1, torch::TensorOptions(dtype).device(dev));
  ASSERT_TRUE(c.AllGather(Input(r, k, dtype).to(dev), out)->Wait().ok());
  EXPECT_TRUE(out.cpu().equal(want_gather)) << "all_gather " << dtype;

  torch::Tensor part = torch::full({k}, -1, torch::TensorOptions(dtype).device(dev));
  ASSERT_TRUE(c.ReduceScatter(Input(r, n * k, dtype).to(dev), part)->Wait().ok());
  EXPECT_TRUE(part.cpu().to(torch::kFloat).equal(sum.narrow(0, r * k, k))) << "reduce_scatter";

  torch::Tensor t = Input(r, n * k, dtype).to(dev);
  ASSERT_TRUE(c.AllReduceSum(t)->Wait().ok());
  EXPECT_TRUE(t.cpu().to(torch::kFloat).equal(sum)) << "all_reduce " << dtype;

  torch::Tensor b = Input(r, k, dtype).to(dev);
  ASSERT_TRUE(c.Broadcast(b, n - 1)->Wait().ok());
  EXPECT_TRUE(b.cpu().equal(Input(n - 1, k, dtype))) << "broadcast " << dtype;
}

// The harness itself, on the CPU: every way a rank can end is reported as such.
TEST(ForkedRanksTest, ReportsEachRanksEndAndKillsOneThatHangs) {
  const std::vector<int> codes = RunForked(
      4,
      [](int rank) {
        if (rank == 1) ADD_FAILURE() << "rank 1 fails on purpose (this test expects it)";
        if (rank == 2) throw std::runtime_error("rank 2 throws on purpose");
        if (rank == 3) pause();  // hangs until killed at the deadline
      },
      /*deadline_s=*/1);
  EXPECT_EQ(codes, (std::vector<int>{0, 1, 2, -SIGKILL}));
}

TEST(NcclGpuTest, AGroupOfOneComputesEachCollectiveOnItsGpu) {
  SKIP_UNLESS_GPUS(1);
  const std::vector<int> codes = RunForked(1, [](int) {
    auto comm = ConnectNcclGroup(Options("", "solo", 0, 1), 0, {});
    ASSERT_TRUE(comm.ok()) << comm.status();
    for (auto dtype : {torch::kFloat, torch::kBFloat16})
      ExpectCollectivesMatchTheCpu(**comm, dtype);
    EXPECT_EQ((*comm)->stats().total(), 0) << "a group of one moves no bytes";
    absl::Status s = (*comm)->AllReduceSum(torch::ones({3}))->Wait();
    EXPECT_NE(s.message().find("is on cpu; this group's tensors must be on cuda:0"),
              std::string::npos)
        << s;
  });
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(NcclGpuTest, APeerThatNeverJoinsFailsConnectWithinTheDeadline) {
  SKIP_UNLESS_GPUS(1);
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::vector<int> codes = RunForked(1, [&](int) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        ConnectGroup(Options(address, "lonely", 0, 2, /*timeout_s=*/3));
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("group lonely, rank 0 of 2 (cuda:0)"), std::string::npos)
        << comm.status();
  });
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(NcclGpuTest, APeerThatNeverInitialisesNcclFailsInitWithinTheDeadline) {
  SKIP_UNLESS_GPUS(1);
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  const std::vector<int> codes = RunForked(1, [&](int) {
    // Rank 1 says where its GPU is, then never calls NCCL: rank 0 gets as far as init.
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(port);
    so.isServer = false;
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        "stuck", c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so));
    const std::string elsewhere = "another-host 0000:00:00.0";
    store->set(NcclGpuKey(1), std::vector<uint8_t>(elsewhere.begin(), elsewhere.end()));
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        ConnectGroup(Options(address, "stuck", 0, 2, /*timeout_s=*/3));
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("group stuck, rank 0 of 2 (cuda:0): initialising NCCL"),
              std::string::npos)
        << comm.status();
  });
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(NcclGpuTest, TwoRanksOnOneGpuAreRefusedNamingBoth) {
  SKIP_UNLESS_GPUS(1);
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::vector<int> codes = RunForked(2, [&](int rank) {
    GroupOptions o = Options(address, "shared", rank, 2, /*timeout_s=*/20);
    o.device = "cuda:0";
    absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectGroup(o);
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("ranks 0 and 1 are both on GPU"), std::string::npos)
        << comm.status();
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(NcclTwoGpuTest, CollectivesMatchTheCpuInFp32AndBf16) {
  SKIP_UNLESS_GPUS(2);
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::vector<int> codes = RunForked(2, [&](int rank) {
    auto comm = ConnectGroup(Options(address, "pair", rank, 2));
    ASSERT_TRUE(comm.ok()) << comm.status();
    for (auto dtype : {torch::kFloat, torch::kBFloat16})
      ExpectCollectivesMatchTheCpu(**comm, dtype);
    // Counted as gloo counts them: what this rank put on the wire.
    const int64_t fp32 = 13 * 4, bf16 = 13 * 2;
    EXPECT_EQ((*comm)->stats().all_gather_bytes, fp32 + bf16);
    EXPECT_EQ((*comm)->stats().reduce_scatter_bytes, fp32 + bf16);
    EXPECT_EQ((*comm)->stats().all_reduce_bytes, 2 * (fp32 + bf16));
    EXPECT_EQ((*comm)->stats().broadcast_bytes, rank == 1 ? fp32 + bf16 : 0);
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(NcclTwoGpuTest, AKilledRankMakesItsPeersWaitFailWithinTheDeadlineAndLaterCallsAtOnce) {
  SKIP_UNLESS_GPUS(2);
  auto server = StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::vector<int> codes = RunForked(2, [&](int rank) {
    auto comm = ConnectGroup(Options(address, "doomed", rank, 2, /*timeout_s=*/3));
    ASSERT_TRUE(comm.ok()) << comm.status();
    torch::Tensor t = torch::ones({1000}, torch::Device(torch::kCUDA, rank));
    ASSERT_TRUE((*comm)->AllReduceSum(t)->Wait().ok());
    if (rank == 1) raise(SIGKILL);
    absl::Status s = (*comm)->AllReduceSum(t)->Wait();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("group doomed, rank 0 of 2 (cuda:0): all_reduce failed"),
              std::string::npos)
        << s;
    absl::Status later = (*comm)->Broadcast(t, 0)->Wait();
    EXPECT_NE(later.message().find("aborted earlier"), std::string::npos) << later;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, -SIGKILL}));
}

}  // namespace
}  // namespace rlforge::dist
