#include "actors/actor_runtime.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "actors/echo_role.h"
#include "proto/zmq_transport.h"

namespace rlforge {
namespace {

absl::StatusOr<std::unique_ptr<Role>> MakeEcho(const std::string&, const JobConfig&,
                                               const proto::Assignment&, const SetupProgress&) {
  return std::unique_ptr<Role>(std::make_unique<EchoRole>());
}

// The first message from the actor's work channel that `wanted` accepts (heartbeats and other
// messages are skipped), within 10 s.
std::optional<Received> Await(ServerTransport& server,
                              const std::function<bool(const proto::Envelope&)>& wanted) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    auto got = server.Receive(100);
    if (got && got->message.ok() && wanted(got->message->envelope)) return got;
  }
  return std::nullopt;
}

// SIGTERM lands after the actor sent Register and before the controller's Assignment reached
// it: the controller already counts the actor, so it must still take the answer and leave the
// job properly (Leave, exit 0), not vanish as "stopped before registration" (which the
// controller can only take for a lost worker).
TEST(ActorRuntimeTest, SigtermWhileRegisteringStillLeavesTheJob) {
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<int> stop{0};
  ActorOptions o;
  o.connect = (*server)->endpoint();
  o.role = "echo";
  o.register_timeout_s = 20;
  o.stop = &stop;
  o.create_role = MakeEcho;
  std::atomic<int> code{-1};
  std::thread actor([&] { code = RunActor(o); });

  auto reg = Await(**server, [](const proto::Envelope& e) { return e.has_register_(); });
  ASSERT_TRUE(reg.has_value()) << "no Register";
  stop = SIGTERM;
  // Longer than the actor's receive poll: it has seen the stop before the answer comes.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  Message answer;
  answer.envelope.set_job_id("job-1");
  proto::Assignment* a = answer.envelope.mutable_assignment();
  a->set_actor_id("echo-0");
  a->set_role("echo");
  a->set_world_size(1);
  a->set_may_leave(true);
  a->set_config_yaml("job: {algorithm: echo}\n");
  ASSERT_TRUE((*server)->Send(reg->peer, std::move(answer)).ok());

  auto leave = Await(**server, [](const proto::Envelope& e) { return e.has_leave(); });
  EXPECT_TRUE(leave.has_value()) << "the actor vanished instead of leaving";
  if (leave.has_value()) {
    EXPECT_EQ(leave->message->envelope.sender(), "echo-0");
    Message bye;
    bye.envelope.mutable_shutdown()->set_reason("left");
    ASSERT_TRUE((*server)->Send(leave->peer, std::move(bye)).ok());
  }
  actor.join();
  EXPECT_EQ(code.load(), leave.has_value() ? 0 : 1);
}

// Registers one actor whose role factory fails with `failure` and answers like a controller:
// the Assignment, then a Shutdown to whatever SetupFailed comes. Returns the exit code and the
// SetupFailed's error ("" when none came).
std::pair<int, std::string> FailingSetUp(absl::Status failure) {
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  EXPECT_TRUE(server.ok()) << server.status();
  static absl::Status failing;
  failing = failure;
  ActorOptions o;
  o.connect = (*server)->endpoint();
  o.role = "reward";
  o.register_timeout_s = 20;
  o.create_role = [](const std::string&, const JobConfig&, const proto::Assignment&,
                     const SetupProgress&) -> absl::StatusOr<std::unique_ptr<Role>> {
    return failing;
  };
  std::atomic<int> code{-1};
  std::thread actor([&] { code = RunActor(o); });
  std::string reported;
  auto reg = Await(**server, [](const proto::Envelope& e) { return e.has_register_(); });
  if (reg.has_value()) {
    Message answer;
    answer.envelope.set_job_id("job-1");
    proto::Assignment* a = answer.envelope.mutable_assignment();
    a->set_actor_id("reward-0");
    a->set_role("reward");
    a->set_world_size(1);
    a->set_config_yaml("job: {algorithm: echo}\n");
    EXPECT_TRUE((*server)->Send(reg->peer, std::move(answer)).ok());
    // A fault sends nothing and the actor exits; a config error is reported, and the actor
    // waits for the answer before it exits.
    std::optional<Received> failed;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!failed && code.load() == -1 && std::chrono::steady_clock::now() < until) {
      auto got = (*server)->Receive(100);
      if (got && got->message.ok() && got->message->envelope.has_setup_failed()) {
        failed = std::move(got);
      }
    }
    if (failed.has_value()) {
      EXPECT_EQ(failed->message->envelope.sender(), "reward-0");
      EXPECT_EQ(failed->message->envelope.job_id(), "job-1");
      reported = failed->message->envelope.setup_failed().error();
      Message bye;
      bye.envelope.mutable_shutdown()->set_reason("the job stops");
      EXPECT_TRUE((*server)->Send(failed->peer, std::move(bye)).ok());
    }
  }
  actor.join();
  return {code.load(), reported};
}

// issue 42: a worker that failed its set-up on the config exited 1 like a crash, and was
// relaunched; now it tells the controller why and exits with the config-error code.
TEST(ActorRuntimeTest, SetUpThatFailsOnTheConfigIsReportedAndExitsWithTheConfigCode) {
  auto [code, reported] = FailingSetUp(absl::InvalidArgumentError(
      "reward.rewards[0] (fmt): params.pattern: regex '(ab' does not compile"));
  EXPECT_EQ(code, kConfigErrorExit);
  EXPECT_EQ(reported,
            "cannot set up role reward: reward.rewards[0] (fmt): params.pattern: regex '(ab' does "
            "not compile");
}

TEST(ActorRuntimeTest, SetUpThatFailsOtherwiseIsAFaultToRetry) {
  auto [code, reported] = FailingSetUp(absl::UnavailableError("the store did not answer"));
  EXPECT_EQ(code, 1);
  EXPECT_EQ(reported, "");
}

}  // namespace
}  // namespace rlforge
