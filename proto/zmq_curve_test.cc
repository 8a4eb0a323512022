// CURVE on the control-plane sockets: who gets in, who is refused, and what each side says.
#include "proto/zmq_curve.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "common/clock.h"
#include "common/logging.h"
#include "proto/zmq_transport.h"
#include "spdlog/sinks/ostream_sink.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;

// A fresh job's keys: {controller.key, actor.key}.
std::pair<CurveKeys, CurveKeys> JobKeys(const std::string& name) {
  std::string run = ::testing::TempDir() + "/zmq_curve_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(run);
  fs::create_directories(run);
  EXPECT_TRUE(WriteJobKeys(run).ok());
  return {LoadControllerKeys(JobKeyPath(run, kControllerKeyFile)).value(),
          LoadActorKeys(JobKeyPath(run, kActorKeyFile)).value()};
}

// Captures the default logger's lines for the test's life.
class LogCapture {
 public:
  LogCapture() : old_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(old_); }
  std::string Text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> old_;
  std::ostringstream out_;
};

ZmqOptions Keyed(const CurveKeys& k) {
  ZmqOptions o;
  o.curve = k;
  o.watch_handshake = true;
  return o;
}

Message Hello() {
  Message m;
  m.envelope.set_sender("a");
  m.envelope.mutable_heartbeat()->set_state(proto::Heartbeat::IDLE);
  return m;
}

// Waits (at most 10 s) until the client's handshake is refused; returns the error.
absl::Status AwaitRefusal(ZmqClientTransport& client) {
  const int64_t deadline = RealClock::Get()->NowMicros() + 10'000'000;
  while (RealClock::Get()->NowMicros() < deadline) {
    absl::Status s = client.HandshakeError();
    if (!s.ok()) return s;
    client.Receive(20);
  }
  return absl::OkStatus();
}

bool AwaitRefusedCount(const ZmqServerTransport& server, uint64_t n) {
  const int64_t deadline = RealClock::Get()->NowMicros() + 10'000'000;
  while (server.refused_handshakes() < n) {
    if (RealClock::Get()->NowMicros() > deadline) return false;
    usleep(10'000);
  }
  return true;
}

TEST(ZmqCurveTest, ClientWithTheJobsKeyIsServed) {
  auto [controller, actor] = JobKeys("ok");
  zmq::context_t server_ctx, client_ctx;
  auto server = ZmqServerTransport::Bind(server_ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ZmqClientTransport::Connect(client_ctx, (*server)->endpoint(), Keyed(actor));
  ASSERT_TRUE(client.ok()) << client.status();
  Message m = Hello();
  m.tensors.push_back(TensorFrame::FromVector<float>("x", {1, 2, 3}));
  ASSERT_TRUE((*client)->Send(std::move(m)).ok());
  auto got = (*server)->Receive(10'000);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->message.ok());
  EXPECT_EQ(got->message->tensors[0].ToVector<float>(), (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE((*server)->Send(got->peer, Hello()).ok());
  auto back = (*client)->Receive(10'000);
  ASSERT_TRUE(back.has_value() && back->ok());
  EXPECT_TRUE((*client)->HandshakeError().ok());
  EXPECT_EQ((*server)->refused_handshakes(), 0u);
}

TEST(ZmqCurveTest, ClientWithoutKeysIsRefusedAndToldToPassThem) {
  auto [controller, actor] = JobKeys("nokey");
  LogCapture log;
  zmq::context_t server_ctx, client_ctx;
  auto server = ZmqServerTransport::Bind(server_ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_TRUE(server.ok()) << server.status();
  ZmqOptions plain;
  plain.watch_handshake = true;
  auto client = ZmqClientTransport::Connect(client_ctx, (*server)->endpoint(), plain);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Send(Hello()).ok());
  absl::Status refused = AwaitRefusal(**client);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("the controller at " + (*server)->endpoint() +
                                   " refused the handshake: the job requires its CURVE keys "
                                   "(pass --keys runs/NAME/keys/actor.key or set RLFORGE_KEYS)"),
            absl::string_view::npos)
      << refused;
  ASSERT_TRUE(AwaitRefusedCount(**server, 1));
  EXPECT_FALSE((*server)->Receive(100).has_value()) << "no plaintext message gets through";
  // The peer's address comes from the accept (it may be gone by then: "an unknown address");
  // ZAP's refusals below always carry it.
  EXPECT_NE(log.Text().find("controller socket: refused a connection from "), std::string::npos)
      << log.Text();
  EXPECT_NE(log.Text().find("without the job's CURVE keys?"), std::string::npos) << log.Text();
}

TEST(ZmqCurveTest, ClientWithAnotherActorKeyIsRefusedByZapAndLoggedWithItsAddress) {
  auto [controller, actor] = JobKeys("wrong");
  auto [other_controller, other_actor] = JobKeys("wrong_other");
  CurveKeys wrong = other_actor;
  wrong.controller_public = actor.controller_public;  // reaches our server, with a foreign pair
  LogCapture log;
  zmq::context_t server_ctx, client_ctx;
  auto server = ZmqServerTransport::Bind(server_ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ZmqClientTransport::Connect(client_ctx, (*server)->endpoint(), Keyed(wrong));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Send(Hello()).ok());
  absl::Status refused = AwaitRefusal(**client);
  EXPECT_NE(refused.message().find("the controller at " + (*server)->endpoint() +
                                   " refused our CURVE key (from " + wrong.path),
            absl::string_view::npos)
      << refused;
  ASSERT_TRUE(AwaitRefusedCount(**server, 1));
  EXPECT_FALSE((*server)->Receive(100).has_value());
  EXPECT_NE(log.Text().find("refused a connection from 127.0.0.1: CURVE key " +
                            wrong.actor_public.substr(0, 8) + "... is not this job's"),
            std::string::npos)
      << log.Text();
}

TEST(ZmqCurveTest, ClientWithAnotherJobsKeysIsToldSo) {
  auto [controller, actor] = JobKeys("otherjob");
  auto [other_controller, other_actor] = JobKeys("otherjob_other");
  zmq::context_t server_ctx, client_ctx;
  auto server = ZmqServerTransport::Bind(server_ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ZmqClientTransport::Connect(client_ctx, (*server)->endpoint(), Keyed(other_actor));
  ASSERT_TRUE(client.ok());
  absl::Status refused = AwaitRefusal(**client);
  EXPECT_NE(refused.message().find("closed the connection during the CURVE handshake: the "
                                   "controller key in " +
                                   other_actor.path + " is not this controller's"),
            absl::string_view::npos)
      << refused;
  EXPECT_TRUE(AwaitRefusedCount(**server, 1));
}

TEST(ZmqCurveTest, KeyedClientOfAPlaintextServerIsToldSo) {
  auto [controller, actor] = JobKeys("plainserver");
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  ASSERT_TRUE(server.ok());
  auto client = ZmqClientTransport::Connect(ctx, (*server)->endpoint(), Keyed(actor));
  ASSERT_TRUE(client.ok());
  absl::Status refused = AwaitRefusal(**client);
  EXPECT_NE(refused.message().find("does not use CURVE, but this actor was given keys"),
            absl::string_view::npos)
      << refused;
}

TEST(ZmqCurveTest, OneCurveServerPerContextIsAClearError) {
  auto [controller, actor] = JobKeys("twice");
  zmq::context_t ctx;
  auto first = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_TRUE(first.ok());
  auto second = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", Keyed(controller));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("one CURVE server per ZeroMQ context"),
            absl::string_view::npos)
      << second.status();
}

TEST(LogRateLimiterTest, BurstThenCountsWhatItHeldBack) {
  LogRateLimiter limit(2, 1'000'000);
  uint64_t held = 99;
  EXPECT_TRUE(limit.Allow(0, &held));
  EXPECT_EQ(held, 0u);
  EXPECT_TRUE(limit.Allow(10, &held));
  EXPECT_FALSE(limit.Allow(20, &held));
  EXPECT_FALSE(limit.Allow(999'999, &held));
  EXPECT_TRUE(limit.Allow(1'000'000, &held)) << "a new window";
  EXPECT_EQ(held, 2u) << "the next line reports the two held back";
  EXPECT_TRUE(limit.Allow(1'000'001, &held));
  EXPECT_EQ(held, 0u);
}

}  // namespace
}  // namespace rlforge
