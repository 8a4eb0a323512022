// sim_bridge end to end in one process: SimServer threads and RemoteVectorEnv.
#include "sim_bridge/remote_vector_env.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "sim_bridge/sim_server.h"
#include "zmq_addon.hpp"

namespace rlforge::sim {
namespace {

// A SimServer on its own thread for the duration of a test.
class ServerThread {
 public:
  ServerThread(zmq::context_t& ctx, std::unique_ptr<LocalVectorEnv> envs,
               const std::string& address = "tcp://127.0.0.1:0") {
    server_ = SimServer::Bind(ctx, std::move(envs), address).value();
    thread_ = std::thread([this] { server_->Serve(&stop_); });
  }
  ~ServerThread() {
    stop_ = 1;
    thread_.join();
  }
  std::string endpoint() const { return server_->endpoint(); }

 private:
  std::unique_ptr<SimServer> server_;
  std::atomic<int> stop_{0};
  std::thread thread_;
};

std::vector<int64_t> Seeds(int n) {
  std::vector<int64_t> s;
  for (int i = 0; i < n; ++i) s.push_back(100 + i);
  return s;
}

// Where a test's servers listen: ZeroMQ over tcp, or shared memory.
std::string ServerAddress(const std::string& transport, int k) {
  if (transport == "shm") {
    return "shm://rlforge-rvtest-" + std::to_string(getpid()) + "-" + std::to_string(k);
  }
  return "tcp://127.0.0.1:0";
}

class TransportTest : public ::testing::TestWithParam<std::string> {};

// Steps `remote` either with Step or group by group (BeginStep/EndStep, in
// the interleaved order a pipelined rollout worker uses); must equal `local`.
void ExpectSameAsLocal(VectorEnv& remote, VectorEnv& local, bool grouped) {
  const int n = local.num_envs();
  std::vector<float> ro, lo;
  ASSERT_TRUE(remote.Reset(Seeds(n), &ro).ok());
  ASSERT_TRUE(local.Reset(Seeds(n), &lo).ok());
  EXPECT_EQ(ro, lo);
  StepOutput rs, ls, part;
  int episodes = 0;
  std::vector<int64_t> act(n);
  for (int t = 0; t < 300; ++t) {
    for (int i = 0; i < n; ++i) act[i] = (t * 7 + i * 3) % 5 < 2 ? 1 : 0;
    if (grouped) {
      rs.Resize(n, local.spec().observation.flat_size());
      for (int g = 0; g < remote.num_groups(); ++g) {
        ASSERT_TRUE(remote.BeginStep(g, act.data() + remote.group_offset(g)).ok());
      }
      for (int g = 0; g < remote.num_groups(); ++g) {
        ASSERT_TRUE(remote.EndStep(g, &part).ok());
        const int off = remote.group_offset(g), m = remote.group_size(g);
        ASSERT_EQ(static_cast<int>(part.reward.size()), m);
        int64_t os = local.spec().observation.flat_size();
        std::copy(part.obs.begin(), part.obs.end(), rs.obs.begin() + off * os);
        for (int i = 0; i < m; ++i) {
          rs.reward[off + i] = part.reward[i];
          rs.terminated[off + i] = part.terminated[i];
          rs.truncated[off + i] = part.truncated[i];
          rs.reset[off + i] = part.reset[i];
        }
        rs.episodes.insert(rs.episodes.end(), part.episodes.begin(), part.episodes.end());
      }
    } else {
      ASSERT_TRUE(remote.Step(act.data(), &rs).ok());
    }
    ASSERT_TRUE(local.Step(act.data(), &ls).ok());
    ASSERT_EQ(rs.obs, ls.obs) << "step " << t;
    ASSERT_EQ(rs.reward, ls.reward);
    ASSERT_EQ(rs.terminated, ls.terminated);
    ASSERT_EQ(rs.truncated, ls.truncated);
    ASSERT_EQ(rs.reset, ls.reset) << "step " << t;
    ASSERT_EQ(rs.episodes.size(), ls.episodes.size());
    for (size_t e = 0; e < rs.episodes.size(); ++e) {
      EXPECT_EQ(rs.episodes[e].env_index, ls.episodes[e].env_index);
      EXPECT_EQ(rs.episodes[e].episode_return, ls.episodes[e].episode_return);
    }
    episodes += static_cast<int>(rs.episodes.size());
  }
  EXPECT_GT(episodes, 10);
}

TEST_P(TransportTest, TwoServersEqualOneLocalBatchBitForBit) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("CartPole-v1", 3).value(),
                 ServerAddress(GetParam(), 0));
  ServerThread b(ctx, LocalVectorEnv::Create("CartPole-v1", 3).value(),
                 ServerAddress(GetParam(), 1));
  auto remote =
      RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}, {"sim-1", b.endpoint()}}, {});
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->num_envs(), 6);
  EXPECT_EQ((*remote)->num_groups(), 2);
  EXPECT_EQ((*remote)->spec().id, "CartPole-v1");
  auto local = LocalVectorEnv::Create("CartPole-v1", 6).value();
  ExpectSameAsLocal(**remote, *local, /*grouped=*/false);
}

TEST_P(TransportTest, SteppingGroupByGroupEqualsOneStep) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("CartPole-v1", 2).value(),
                 ServerAddress(GetParam(), 2));
  ServerThread b(ctx, LocalVectorEnv::Create("CartPole-v1", 3).value(),
                 ServerAddress(GetParam(), 3));
  auto remote =
      RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}, {"sim-1", b.endpoint()}}, {});
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->group_offset(1), 2);
  EXPECT_EQ((*remote)->group_size(1), 3);
  auto local = LocalVectorEnv::Create("CartPole-v1", 5).value();
  ExpectSameAsLocal(**remote, *local, /*grouped=*/true);
  // Out-of-order use is refused, not a hang.
  EXPECT_FALSE((*remote)->EndStep(0, nullptr).ok());
  int64_t acts[3] = {0, 0, 0};
  ASSERT_TRUE((*remote)->BeginStep(1, acts).ok());
  EXPECT_FALSE((*remote)->BeginStep(1, acts).ok());
  EXPECT_FALSE((*remote)->Step(acts, nullptr).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

TEST(VectorEnvTest, LocalEnvsAreOneGroup) {
  auto local = LocalVectorEnv::Create("CartPole-v1", 4).value();
  auto again = LocalVectorEnv::Create("CartPole-v1", 4).value();
  EXPECT_EQ(local->num_groups(), 1);
  ExpectSameAsLocal(*local, *again, /*grouped=*/true);
}

TEST(RemoteVectorEnvTest, ContinuousActionsTravel) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("Pendulum-v1", 2).value());
  auto remote = RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}}, {}).value();
  auto local = LocalVectorEnv::Create("Pendulum-v1", 2).value();
  std::vector<float> ro, lo;
  ASSERT_TRUE(remote->Reset(Seeds(2), &ro).ok());
  ASSERT_TRUE(local->Reset(Seeds(2), &lo).ok());
  StepOutput rs, ls;
  std::vector<float> act = {0.7f, -1.9f};
  for (int t = 0; t < 210; ++t) {
    ASSERT_TRUE(remote->Step(act.data(), &rs).ok());
    ASSERT_TRUE(local->Step(act.data(), &ls).ok());
    ASSERT_EQ(rs.obs, ls.obs);
    ASSERT_EQ(rs.reward, ls.reward);
    ASSERT_EQ(rs.truncated, ls.truncated);
  }
}

TEST(RemoteVectorEnvTest, HungServerTimesOutNamingIt) {
  zmq::context_t ctx;
  zmq::socket_t silent(ctx, zmq::socket_type::router);
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  std::string ep = silent.get(zmq::sockopt::last_endpoint);
  RemoteVectorEnv::Options o;
  o.connect_timeout_ms = 300;
  auto remote = RemoteVectorEnv::Connect(ctx, {{"sim-7", ep}}, o);
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(remote.status().message().find("sim server sim-7 (" + ep + ") did not answer"),
            std::string::npos)
      << remote.status();
}

TEST(RemoteVectorEnvTest, GarbageReplyIsAnErrorNamingTheServer) {
  zmq::context_t ctx;
  zmq::socket_t liar(ctx, zmq::socket_type::router);
  liar.set(zmq::sockopt::linger, 0);
  liar.bind("tcp://127.0.0.1:*");
  std::string ep = liar.get(zmq::sockopt::last_endpoint);
  std::thread t([&] {
    std::vector<zmq::message_t> req;
    (void)zmq::recv_multipart(liar, std::back_inserter(req));
    std::vector<zmq::message_t> rep;
    rep.push_back(std::move(req[0]));
    rep.emplace_back(std::string("\xff\xff not a reply"));
    zmq::send_multipart(liar, rep);
  });
  auto remote = RemoteVectorEnv::Connect(ctx, {{"sim-2", ep}}, {});
  t.join();
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("sim server sim-2"), std::string::npos);
  EXPECT_NE(remote.status().message().find("bad reply"), std::string::npos) << remote.status();
}

TEST(RemoteVectorEnvTest, MismatchedServersAreRefused) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("CartPole-v1", 2).value());
  ServerThread b(ctx, LocalVectorEnv::Create("Acrobot-v1", 2).value());
  auto remote =
      RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}, {"sim-1", b.endpoint()}}, {});
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("sim-1"), std::string::npos) << remote.status();
}

// Issue 42: a job with env.id CartPole-v1 trained on whatever its server served, and its
// resolved config and logs still said CartPole-v1.
TEST(RemoteVectorEnvTest, EnvIdWasSilentlyReplacedByTheServedEnv) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("Acrobot-v1", 2).value());
  RemoteVectorEnv::Options o;
  o.env_id = "CartPole-v1";
  auto remote = RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}}, o);
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(remote.status().message(),
            "sim server sim-0 (" + a.endpoint() +
                ") serves env 'Acrobot-v1', but the job's env.id is 'CartPole-v1': set env.id: "
                "Acrobot-v1 to train on what it serves, or point the job at a server of "
                "CartPole-v1");
  o.env_id = "Acrobot-v1";
  auto same = RemoteVectorEnv::Connect(ctx, {{"sim-0", a.endpoint()}}, o);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->spec().id, "Acrobot-v1");
}

TEST(SimServerTest, BadActionsGetASimErrorAndTheServerKeepsServing) {
  zmq::context_t ctx;
  ServerThread a(ctx, LocalVectorEnv::Create("CartPole-v1", 2).value());
  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.connect(a.endpoint());
  auto call = [&](SimRequestMessage m) {
    zmq::send_multipart(client, EncodeRequest(std::move(m)));
    std::vector<zmq::message_t> rep;
    (void)zmq::recv_multipart(client, std::back_inserter(rep));
    return DecodeReply(std::move(rep), WireLimits{}).value();
  };
  SimRequestMessage reset;
  reset.header.mutable_reset();
  EXPECT_TRUE(call(std::move(reset)).header.has_reset());
  SimRequestMessage bad;
  bad.header.mutable_step();
  bad.tensors.push_back(TensorFrame::FromVector<float>("actions", {1.f, 0.f}));
  SimReplyMessage r = call(std::move(bad));
  ASSERT_TRUE(r.header.has_error());
  EXPECT_NE(r.header.error().message().find("actions must be i64 with 2 elements"),
            std::string::npos)
      << r.header.error().message();
  SimRequestMessage out_of_range;
  out_of_range.header.mutable_step();
  out_of_range.tensors.push_back(TensorFrame::FromVector<int64_t>("actions", {0, 5}));
  r = call(std::move(out_of_range));
  ASSERT_TRUE(r.header.has_error());
  EXPECT_EQ(r.header.error().env_index(), 1);
  SimRequestMessage good;
  good.header.mutable_step();
  good.tensors.push_back(TensorFrame::FromVector<int64_t>("actions", {0, 1}));
  EXPECT_TRUE(call(std::move(good)).header.has_step());
}

}  // namespace
}  // namespace rlforge::sim
