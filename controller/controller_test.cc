// Controller logic over an in-memory transport, a fake clock and a fake
// launcher: registration, liveness, dispatch and bad input, with no sockets
// and no sleeps.
#include "controller/controller.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "proto/memory_transport.h"

namespace rlforge {
namespace {

class FakeLauncher final : public ProcessLauncher {
 public:
  absl::StatusOr<int> Start(const ProcessSpec& spec) override {
    int pid = 1000 + static_cast<int>(specs.size());
    specs.push_back(spec);
    running.push_back(pid);
    return pid;
  }
  std::vector<ProcessExit> Reap() override { return std::exchange(exits, {}); }
  void Signal(int pid, int signal) override {
    signals.emplace_back(pid, signal);
    Exit(pid, true, signal);
  }
  std::vector<int> Running() const override { return running; }
  void Exit(int pid, bool signaled, int code) {
    auto it = std::find(running.begin(), running.end(), pid);
    if (it == running.end()) return;
    running.erase(it);
    exits.push_back(ProcessExit{pid, "", signaled, code});
  }
  std::vector<ProcessSpec> specs;
  std::vector<int> running;
  std::vector<ProcessExit> exits;
  std::vector<std::pair<int, int>> signals;
};

class ControllerTest : public ::testing::Test {
 protected:
  // Built on first use, so a test may change options_ first.
  Controller& controller() {
    if (!controller_) {
      controller_ =
          std::make_unique<Controller>(options_, &transport_, &clock_, &launcher_, &stop_);
    }
    return *controller_;
  }

  static Controller::Options MakeOptions() {
    Controller::Options o;
    o.job_id = "job-1";
    o.config_yaml = "job: {algorithm: echo}\n";
    o.heartbeat_interval_ms = 1000;
    o.heartbeat_misses = 3;
    o.register_timeout_s = 10;
    o.request_timeout_s = 30;
    o.shutdown_grace_s = 1;
    return o;
  }

  Message Envelope(const std::string& sender, const std::string& job = "job-1") {
    Message m;
    m.envelope.set_sender(sender);
    m.envelope.set_job_id(job);
    return m;
  }

  void SendRegister(const std::string& peer, const std::string& role, int rank,
                    const std::string& instance, const std::string& token = "") {
    Message m = Envelope(instance, "");
    auto* r = m.envelope.mutable_register_();
    r->set_role(role);
    r->set_requested_rank(rank);
    r->set_instance_id(instance);
    r->set_host("h");
    r->set_pid(42);
    r->set_launch_token(token);
    transport_.Inject(peer, std::move(m));
  }

  void SendHeartbeat(const std::string& peer, const std::string& actor) {
    Message m = Envelope(actor);
    m.envelope.mutable_heartbeat()->set_state(proto::Heartbeat::IDLE);
    transport_.Inject(peer, std::move(m));
  }

  void SendSetUpBeat(const std::string& peer, const std::string& actor, const std::string& phase) {
    Message m = Envelope(actor);
    m.envelope.mutable_heartbeat()->set_state(proto::Heartbeat::SETTING_UP);
    m.envelope.mutable_heartbeat()->set_phase(phase);
    transport_.Inject(peer, std::move(m));
  }

  void SendResult(const std::string& peer, const std::string& actor, uint64_t work_id, bool ok,
                  const std::string& error = "") {
    Message m = Envelope(actor);
    auto* r = m.envelope.mutable_work_result();
    r->set_work_id(work_id);
    r->set_ok(ok);
    r->set_error(error);
    m.tensors.push_back(TensorFrame::FromVector<int32_t>("y", {7, 8}));
    transport_.Inject(peer, std::move(m));
  }

  // Two external echo actors, registered.
  void RegisterTwo() {
    controller().ExpectRole("echo", 2, /*external=*/true);
    SendRegister("p0", "echo", -1, "i0");
    SendRegister("p1", "echo", -1, "i1");
    ASSERT_TRUE(controller().WaitForActors().ok());
    transport_.TakeSent();
  }

  MemoryServerTransport transport_;
  FakeClock clock_;
  FakeLauncher launcher_;
  std::atomic<int> stop_{0};
  Controller::Options options_ = MakeOptions();
  std::unique_ptr<Controller> controller_;
};

TEST_F(ControllerTest, RegistrationAssignsRanksAndSendsConfig) {
  controller().ExpectRole("echo", 2, true);
  SendRegister("p0", "echo", -1, "i0");
  SendRegister("p1", "echo", -1, "i1");
  ASSERT_TRUE(controller().WaitForActors().ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].first, "p0");
  const proto::Assignment& a = sent[0].second.envelope.assignment();
  EXPECT_EQ(a.actor_id(), "echo-0");
  EXPECT_EQ(a.world_size(), 2);
  EXPECT_FALSE(a.may_leave()) << "a role is not elastic unless AllowJoins says so";
  EXPECT_EQ(a.config_yaml(), "job: {algorithm: echo}\n");
  EXPECT_EQ(sent[0].second.envelope.job_id(), "job-1");
  EXPECT_EQ(sent[1].second.envelope.assignment().actor_id(), "echo-1");
}

TEST_F(ControllerTest, ShardedTrainerRanksGetTheStoreAndTheCollectiveDeadline) {
  options_.trainer_store_address = "127.0.0.1:29517";
  options_.collective_timeout_s = 12.5;
  controller().ExpectRole("trainer", 2, true);
  controller().ExpectRole("rollout", 1, true);
  SendRegister("p1", "trainer", 1, "i1");
  SendRegister("p0", "trainer", 0, "i0");
  SendRegister("p2", "rollout", -1, "i2");
  ASSERT_TRUE(controller().WaitForActors().ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    const proto::Assignment& a = sent[i].second.envelope.assignment();
    EXPECT_EQ(a.actor_id(), i == 0 ? "trainer-1" : "trainer-0");
    EXPECT_EQ(a.rank(), 1 - i);
    EXPECT_EQ(a.world_size(), 2);
    EXPECT_EQ(a.store_address(), "127.0.0.1:29517");
    EXPECT_EQ(a.collective_timeout_s(), 12.5);
  }
  const proto::Assignment& rollout = sent[2].second.envelope.assignment();
  EXPECT_EQ(rollout.actor_id(), "rollout-0");
  EXPECT_EQ(rollout.store_address(), "127.0.0.1:29517")
      << "engines meet trainer rank 0 there for the weight plane's broadcast group";
}

TEST_F(ControllerTest, OneRankTrainerGetsTheJobsStoreForTheWeightGroup) {
  options_.trainer_store_address = "127.0.0.1:29517";
  controller().ExpectRole("trainer", 1, true);
  SendRegister("p0", "trainer", -1, "i0");
  ASSERT_TRUE(controller().WaitForActors().ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  const proto::Assignment& a = sent[0].second.envelope.assignment();
  EXPECT_EQ(a.world_size(), 1);
  EXPECT_EQ(a.store_address(), "127.0.0.1:29517");
  EXPECT_EQ(a.collective_timeout_s(), 60);
}

TEST_F(ControllerTest, ShardedTrainerWithoutAStoreIsRefusedBeforeAnyoneRegisters) {
  controller().ExpectRole("trainer", 3, true);
  absl::Status s = controller().WaitForActors();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(),
            "the 3 trainer ranks have no rendezvous store to meet at "
            "(Controller::Options::trainer_store_address is empty)");
}

TEST_F(ControllerTest, RetriedRegisterGetsTheSameAssignment) {
  controller().ExpectRole("echo", 2, true);
  SendRegister("p0", "echo", -1, "i0");
  SendRegister("p0", "echo", -1, "i0");
  ASSERT_TRUE(controller().Pump(0).ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].second.envelope.assignment().actor_id(), "echo-0");
  EXPECT_EQ(controller().actors().Pending().size(), 1u);
}

TEST_F(ControllerTest, UnknownRoleAndTakenRankAreRejected) {
  controller().ExpectRole("echo", 1, true);
  SendRegister("p0", "trainer", -1, "i0");
  SendRegister("p1", "echo", 0, "i1");
  SendRegister("p2", "echo", 0, "i2");
  ASSERT_TRUE(controller().Pump(0).ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_NE(sent[0].second.envelope.reject().reason().find("role 'trainer' is not part"),
            std::string::npos);
  EXPECT_TRUE(sent[1].second.envelope.has_assignment());
  EXPECT_NE(sent[2].second.envelope.reject().reason().find("echo-0 is already registered"),
            std::string::npos);
}

TEST_F(ControllerTest, LaunchedSlotNeedsItsLaunchToken) {
  controller().ExpectRole("echo", 1, false);
  ASSERT_TRUE(controller()
                  .LaunchAll([](const ActorInfo& a) {
                    return ProcessSpec{a.id, {"/bin/true"}, "/tmp/x.log", {}, {}};
                  })
                  .ok());
  ASSERT_EQ(launcher_.specs.size(), 1u);
  std::string token = launcher_.specs[0].env.at("RLFORGE_LAUNCH_TOKEN");
  SendRegister("intruder", "echo", 0, "i9", "wrong");
  SendRegister("p0", "echo", 0, "i0", token);
  ASSERT_TRUE(controller().WaitForActors().ok());
  auto sent = transport_.TakeSent();
  EXPECT_TRUE(sent[0].second.envelope.has_reject());
  EXPECT_EQ(sent[1].first, "p0");
  EXPECT_TRUE(sent[1].second.envelope.has_assignment());
}

TEST_F(ControllerTest, WaitForActorsTimesOutNamingTheMissingOne) {
  options_.heartbeat_misses = 1000;
  controller().ExpectRole("echo", 2, true);
  SendRegister("p0", "echo", -1, "i0");
  clock_.set_auto_advance_micros(1000);
  absl::Status s = controller().WaitForActors();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("echo-1"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("echo-0 "), std::string::npos) << s;
}

// launch.backend kubernetes: every slot, trainer ranks included, waits for an actor to join.
TEST_F(ControllerTest, EveryRoleJoiningByAddressIsToldWhoIsStillMissingAndHowToStartThem) {
  options_.heartbeat_misses = 1000;
  options_.trainer_store_address = "10.0.0.1:29400";
  options_.join_address = "tcp://ctl.example:5555";
  controller().ExpectRole("trainer", 2, true);
  controller().ExpectRole("rollout", 1, true);
  controller().ExpectRole("reward", 1, true, /*recoverable=*/true);
  SendRegister("p1", "trainer", 1, "i1");
  SendRegister("p3", "reward", 0, "i3");
  clock_.set_auto_advance_micros(1000);
  absl::Status s = controller().WaitForActors();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("still missing 2 of 4:\n"
                             "  trainer-0 (external: start it with `rlforge actor --role trainer "
                             "--rank 0 --connect tcp://ctl.example:5555`)\n"
                             "  rollout-0 (external: start it with `rlforge actor --role rollout "
                             "--rank 0 --connect tcp://ctl.example:5555`)"),
            std::string::npos)
      << s;
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].second.envelope.assignment().actor_id(), "trainer-1");
  EXPECT_EQ(sent[0].second.envelope.assignment().store_address(), "10.0.0.1:29400");
}

// Actors that join by address may come before rlforge-store reports where it listens.
TEST_F(ControllerTest, RanksAndEnginesJoiningBeforeTheStoreListensGetItsAddressOnARetry) {
  controller().ExpectRole("trainer", 1, true);
  controller().ExpectRole("rollout", 1, true);
  controller().ExpectRole("reward", 1, true, /*recoverable=*/true);
  controller().set_awaiting_trainer_store();
  SendRegister("p0", "trainer", 0, "i0");
  SendRegister("p1", "rollout", 0, "i1");
  SendRegister("p2", "reward", 0, "i2");
  ASSERT_TRUE(controller().Pump(0).ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 1u) << "only the reward worker, which needs no store, is answered";
  EXPECT_EQ(sent[0].second.envelope.assignment().actor_id(), "reward-0");
  controller().set_trainer_store_address("10.0.0.1:29400");
  SendRegister("p0", "trainer", 0, "i0");  // the actors' once-a-second retries
  SendRegister("p1", "rollout", 0, "i1");
  ASSERT_TRUE(controller().WaitForActors().ok());
  sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& [peer, m] : sent) {
    EXPECT_EQ(m.envelope.assignment().store_address(), "10.0.0.1:29400") << peer;
  }
}

TEST_F(ControllerTest, HeartbeatsKeepActorsAliveAndSilenceKillsTheJob) {
  RegisterTwo();
  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    SendHeartbeat("h1", "echo-1");
    ASSERT_TRUE(controller().Pump(0).ok());
  }
  auto sent = transport_.TakeSent();
  EXPECT_EQ(sent.size(), 10u) << "every heartbeat is acknowledged";
  EXPECT_TRUE(sent[0].second.envelope.has_heartbeat_ack());
  clock_.AdvanceMillis(2500);
  SendHeartbeat("h0", "echo-0");
  ASSERT_TRUE(controller().Pump(0).ok());
  clock_.AdvanceMillis(1000);
  SendHeartbeat("h0", "echo-0");
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("actor echo-1 (pid 42 on h) missed 3 heartbeats"), std::string::npos)
      << s;
}

// A set-up (a checkpoint load) far longer than heartbeat silence is fine while it heartbeats;
// its own deadline, controller.setup_timeout_s, then names the actor and its phase.
TEST_F(ControllerTest, SetUpHasItsOwnDeadlineApartFromHeartbeatSilence) {
  options_.setup_timeout_s = 100;
  RegisterTwo();
  for (int i = 1; i <= 90; ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    SendSetUpBeat("h1", "echo-1", absl::StrCat("loading model ", i, "%"));
    ASSERT_TRUE(controller().Pump(0).ok()) << "second " << i;
  }
  for (int i = 0; i < 20; ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    SendSetUpBeat("h1", "echo-1", "loading model 90%");
    absl::Status s = controller().Pump(0);
    if (s.ok()) continue;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("actor echo-1 (pid 42 on h) did not finish its set-up within 100 s "
                               "(controller.setup_timeout_s); last phase: loading model 90%"),
              std::string::npos)
        << s;
    EXPECT_GE(i, 10) << "lost before its set-up deadline";
    return;
  }
  ADD_FAILURE() << "a set-up past controller.setup_timeout_s was not stopped";
}

TEST_F(ControllerTest, AnActorThatFinishedSettingUpIsNoLongerUnderTheSetUpDeadline) {
  options_.setup_timeout_s = 5;
  RegisterTwo();
  clock_.AdvanceMillis(1000);
  SendSetUpBeat("h0", "echo-0", "loading model 50%");
  SendSetUpBeat("h1", "echo-1", "loading model 50%");
  ASSERT_TRUE(controller().Pump(0).ok());
  clock_.AdvanceMillis(1000);
  SendHeartbeat("h0", "echo-0");  // set up
  auto id = controller().Submit("echo-1", proto::WorkRequest());
  ASSERT_TRUE(id.ok());
  SendResult("p1", "echo-1", *id, true);  // a result says so too
  ASSERT_TRUE(controller().Pump(0).ok());
  for (int i = 0; i < 20; ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    SendHeartbeat("h1", "echo-1");
    ASSERT_TRUE(controller().Pump(0).ok()) << "second " << i;
  }
}

TEST_F(ControllerTest, SilenceWhileSettingUpNamesThePhase) {
  RegisterTwo();
  clock_.AdvanceMillis(500);
  SendHeartbeat("h0", "echo-0");
  SendSetUpBeat("h1", "echo-1", "loading model 12%");
  ASSERT_TRUE(controller().Pump(0).ok());
  absl::Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    s = controller().Pump(0);
  }
  EXPECT_NE(s.message().find("echo-1 (pid 42 on h) missed 3 heartbeats (silent for "),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("while setting up: loading model 12%"), std::string::npos) << s;
}

TEST_F(ControllerTest, QueuedHeartbeatsCountBeforeTheLivenessCheck) {
  RegisterTwo();
  // The caller was busy for 10 s, but both actors kept sending: no false alarm.
  clock_.AdvanceMillis(10'000);
  SendHeartbeat("h0", "echo-0");
  SendHeartbeat("h1", "echo-1");
  EXPECT_TRUE(controller().Pump(0).ok());
}

TEST_F(ControllerTest, SubmitAndAwaitReturnResultsInOrder) {
  RegisterTwo();
  proto::WorkRequest req;
  req.mutable_echo();
  auto a = controller().Submit("echo-0", req, {});
  auto b = controller().Submit("echo-1", req, {});
  ASSERT_TRUE(a.ok() && b.ok());
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].first, "p0");
  EXPECT_EQ(sent[0].second.envelope.work_request().work_id(), *a);
  SendResult("p1", "echo-1", *b, true);
  SendResult("p0", "echo-0", *a, true);
  SendResult("p0", "echo-0", *a, true);  // duplicate: ignored
  clock_.AdvanceMillis(5);
  auto out = controller().AwaitAll({*a, *b});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].actor_id, "echo-0");
  EXPECT_EQ((*out)[1].actor_id, "echo-1");
  EXPECT_EQ((*out)[0].tensors[0].ToVector<int32_t>(), (std::vector<int32_t>{7, 8}));
  EXPECT_NEAR((*out)[0].seconds, 0.005, 1e-9);
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().drops().duplicate_results, 1u);
}

TEST_F(ControllerTest, FailedWorkStopsWithTheActorsMessage) {
  RegisterTwo();
  auto id = controller().Submit("echo-0", proto::WorkRequest{}, {});
  ASSERT_TRUE(id.ok());
  SendResult("p0", "echo-0", *id, false, "env 3 returned NaN");
  auto out = controller().Await(*id);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("failed on echo-0: env 3 returned NaN"), std::string::npos);
}

TEST_F(ControllerTest, OneFailedWorkFailsAwaitAllWithoutWaitingForTheRest) {
  RegisterTwo();
  auto a = controller().Submit("echo-0", proto::WorkRequest{}, {});
  auto b = controller().Submit("echo-1", proto::WorkRequest{}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  SendResult("p1", "echo-1", *b, false, "gloo: connection reset by rank 0");
  // Time moves with every read, so waiting on echo-0 (which never answers) would end at its
  // request deadline, naming echo-0, rather than hang.
  clock_.set_auto_advance_micros(1000);
  const int64_t before = clock_.NowMicros();
  auto out = controller().AwaitAll({*a, *b});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(out.status().message().find("failed on echo-1: gloo: connection reset by rank 0"),
            std::string::npos)
      << out.status();
  // Only the second it serves to find a likelier cause, not echo-0's request deadline.
  EXPECT_LT(clock_.NowMicros() - before, 1'100'000) << "no waiting on echo-0";
  clock_.set_auto_advance_micros(0);
  // The call gave up on both: echo-0's late result is a stray, and nothing is left to expire.
  SendResult("p0", "echo-0", *a, true);
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().drops().duplicate_results, 1u);
  clock_.AdvanceMillis(31'000);
  SendHeartbeat("h0", "echo-0");
  SendHeartbeat("h1", "echo-1");
  EXPECT_TRUE(controller().Pump(0).ok());
}

// Regression: when a rank was killed, its peer's collective failed at once and the job named
// the peer ("connection reset") instead of the rank that died.
TEST_F(ControllerTest, APeersFailureWaitsBrieflyToNameTheActorThatDied) {
  controller().ExpectRole("echo", 2, false);
  ASSERT_TRUE(
      controller()
          .LaunchAll([](const ActorInfo& a) {
            return ProcessSpec{a.id, {"/bin/true"}, "/nonexistent/" + a.id + ".log", {}, {}};
          })
          .ok());
  SendRegister("p0", "echo", 0, "i0", launcher_.specs[0].env.at("RLFORGE_LAUNCH_TOKEN"));
  SendRegister("p1", "echo", 1, "i1", launcher_.specs[1].env.at("RLFORGE_LAUNCH_TOKEN"));
  ASSERT_TRUE(controller().WaitForActors().ok());
  auto a = controller().Submit("echo-0", proto::WorkRequest{}, {});
  auto b = controller().Submit("echo-1", proto::WorkRequest{}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  // echo-1's collective fails first (connection reset); echo-0's exit is reaped after.
  SendResult("p1", "echo-1", *b, false, "gloo: connection reset by peer");
  ASSERT_TRUE(controller().Pump(0).ok());
  launcher_.Exit(1000, true, SIGKILL);
  auto out = controller().AwaitAll({*a, *b});
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  EXPECT_NE(msg.find("actor echo-0 (pid"), std::string::npos) << msg;
  EXPECT_NE(msg.find("killed by signal 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("then work " + std::to_string(*b) + " failed on echo-1"), std::string::npos)
      << msg;
}

TEST_F(ControllerTest, AwaitAnyReturnsTheFirstResultAndLeavesTheRestPending) {
  RegisterTwo();
  proto::WorkRequest req;
  req.mutable_echo();
  auto a = controller().Submit("echo-0", req, {});
  auto b = controller().Submit("echo-1", req, {});
  ASSERT_TRUE(a.ok() && b.ok());
  SendResult("p1", "echo-1", *b, true);
  auto first = controller().AwaitAny({*a, *b});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->first, 1u);
  EXPECT_EQ(first->second.actor_id, "echo-1");
  // echo-0's work is still awaited; echo-1's is no longer known.
  EXPECT_EQ(controller().AwaitAny({*b}).status().code(), absl::StatusCode::kNotFound);
  SendResult("p0", "echo-0", *a, true);
  auto second = controller().AwaitAny({*a});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first, 0u);
  EXPECT_EQ(second->second.actor_id, "echo-0");
}

TEST_F(ControllerTest, AwaitAnyFailsNamingTheActorOfAFailedWork) {
  RegisterTwo();
  auto a = controller().Submit("echo-0", proto::WorkRequest{}, {});
  auto b = controller().Submit("echo-1", proto::WorkRequest{}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  SendResult("p1", "echo-1", *b, false, "out of KV blocks");
  auto out = controller().AwaitAny({*a, *b});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(out.status().message().find("failed on echo-1: out of KV blocks"), std::string::npos)
      << out.status();
}

TEST_F(ControllerTest, OverdueWorkNamesTheActor) {
  RegisterTwo();
  auto id = controller().Submit("echo-1", proto::WorkRequest{}, {});
  ASSERT_TRUE(id.ok());
  clock_.AdvanceMillis(31'000);
  SendHeartbeat("h0", "echo-0");
  SendHeartbeat("h1", "echo-1");
  auto out = controller().Await(*id);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("echo-1"), std::string::npos);
  EXPECT_NE(out.status().message().find("request_timeout_s"), std::string::npos);
}

TEST_F(ControllerTest, BadInputIsDroppedAndCountedAndServingContinues) {
  RegisterTwo();
  std::vector<zmq::message_t> garbage;
  garbage.emplace_back(std::string("\x08\x96\x01 not a protobuf \xff\xfe"));
  transport_.InjectFrames("evil", std::move(garbage));
  transport_.InjectFrames("evil", {});
  Message wrong = Envelope("echo-0");
  wrong.envelope.mutable_heartbeat();
  auto frames = Encode(std::move(wrong));
  proto::Envelope env;
  env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()));
  env.set_protocol_version(99);
  frames[0] = zmq::message_t(env.SerializeAsString());
  transport_.InjectFrames("old", std::move(frames));
  SendHeartbeat("h9", "echo-7");  // unregistered sender
  SendHeartbeat("h0", "echo-0");  // still served
  Message other_job = Envelope("echo-1", "job-2");
  other_job.envelope.mutable_heartbeat();
  transport_.Inject("h1", std::move(other_job));
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().drops().malformed, 2u);
  EXPECT_EQ(controller().drops().wrong_version, 1u);
  EXPECT_EQ(controller().drops().unknown_sender, 1u);
  EXPECT_EQ(controller().drops().wrong_job, 1u);
  auto sent = transport_.TakeSent();
  bool rejected_old = false, acked = false;
  for (auto& [peer, m] : sent) {
    if (peer == "old" && m.envelope.has_reject()) rejected_old = true;
    if (peer == "h0" && m.envelope.has_heartbeat_ack()) acked = true;
  }
  EXPECT_TRUE(rejected_old) << "a wrong-version peer is told why";
  EXPECT_TRUE(acked);
}

TEST_F(ControllerTest, ChildExitStopsTheJobNamingActorAndSignal) {
  controller().ExpectRole("echo", 1, false);
  ASSERT_TRUE(controller()
                  .LaunchAll([](const ActorInfo& a) {
                    return ProcessSpec{a.id, {"/bin/true"}, "/nonexistent/echo-0.log", {}, {}};
                  })
                  .ok());
  SendRegister("p0", "echo", 0, "i0", launcher_.specs[0].env.at("RLFORGE_LAUNCH_TOKEN"));
  ASSERT_TRUE(controller().WaitForActors().ok());
  launcher_.Exit(1000, true, SIGKILL);
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("actor echo-0 (pid 42 on h) killed by signal 9"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("its log: /nonexistent/echo-0.log"), std::string::npos) << s;
}

// scancel signals the controller and every step at once: an actor's exit that the same pump
// reaps is the stop's doing, and the job ends interrupted rather than failed.
TEST_F(ControllerTest, ChildExitDuringAStopSignalIsAnInterruptNotAFailure) {
  controller().ExpectRole("echo", 1, false);
  ASSERT_TRUE(controller()
                  .LaunchAll([](const ActorInfo& a) {
                    return ProcessSpec{a.id, {"/bin/true"}, "/nonexistent/echo-0.log", {}, {}};
                  })
                  .ok());
  SendRegister("p0", "echo", 0, "i0", launcher_.specs[0].env.at("RLFORGE_LAUNCH_TOKEN"));
  ASSERT_TRUE(controller().WaitForActors().ok());
  launcher_.Exit(1000, true, SIGTERM);
  controller().set_pump_observer([this] { stop_ = SIGTERM; });  // arrives mid-pump
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("interrupted by signal 15"), std::string::npos) << s;
}

TEST_F(ControllerTest, StopFlagCancels) {
  RegisterTwo();
  stop_ = SIGINT;
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_NE(s.message().find("signal 2"), std::string::npos);
}

TEST_F(ControllerTest, ShutdownTellsActorsThenForcesStragglers) {
  controller().ExpectRole("echo", 1, false);
  ASSERT_TRUE(controller()
                  .LaunchAll([](const ActorInfo& a) {
                    return ProcessSpec{a.id, {"/bin/true"}, "/tmp/x.log", {}, {}};
                  })
                  .ok());
  SendRegister("p0", "echo", 0, "i0", launcher_.specs[0].env.at("RLFORGE_LAUNCH_TOKEN"));
  ASSERT_TRUE(controller().WaitForActors().ok());
  transport_.TakeSent();
  controller().Shutdown("done");
  auto sent = transport_.TakeSent();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0].second.envelope.shutdown().reason(), "done");
  // The fake child ignored the message, so it got SIGTERM and is gone.
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0].second, SIGTERM);
  EXPECT_TRUE(launcher_.Running().empty());
}

// Worker failure: two launched, recoverable echo actors, registered; one restart per role.
class RecoveryTest : public ControllerTest {
 protected:
  void SetUp() override {
    options_.max_restarts = 1;
    options_.restart_backoff_s = 2;
    controller().set_fault_sink([this](const FaultEvent& e) { events_.push_back(e); });
    controller().ExpectRole("echo", 2, /*external=*/false, /*recoverable=*/true);
    ASSERT_TRUE(controller()
                    .LaunchAll([](const ActorInfo& a) {
                      return ProcessSpec{a.id, {"/bin/true"}, "/tmp/x.log", {}, {}};
                    })
                    .ok());
    SendRegister("p0", "echo", 0, "i0", Token(0));
    SendRegister("p1", "echo", 1, "i1", Token(1));
    ASSERT_TRUE(controller().WaitForActors().ok());
    transport_.TakeSent();
  }
  std::string Token(size_t launch) {
    return launcher_.specs.at(launch).env.at("RLFORGE_LAUNCH_TOKEN");
  }
  // Heartbeats from echo-1 only, `seconds` times a second apart.
  void OnlyEcho1Beats(int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.AdvanceMillis(1000);
      SendHeartbeat("h1", "echo-1");
      ASSERT_TRUE(controller().Pump(0).ok());
    }
  }
  std::vector<FaultEvent> events_;
};

TEST_F(RecoveryTest, ExitGivesTheWorkBackAndTheSlotIsRelaunchedAfterTheBackoff) {
  const uint64_t w0 = *controller().Submit("echo-0", proto::WorkRequest());
  const uint64_t w1 = *controller().Submit("echo-1", proto::WorkRequest());
  launcher_.Exit(1000, true, SIGKILL);
  auto lost = controller().AwaitNext({w1, w0});
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(lost->first, 1u);
  EXPECT_TRUE(lost->second.lost);
  EXPECT_EQ(lost->second.actor_id, "echo-0");
  EXPECT_NE(lost->second.result.error().find("echo-0 killed by signal 9"), std::string::npos);
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kDead);
  EXPECT_EQ(controller().actors().LiveOfRole("echo"), std::vector<std::string>{"echo-1"});
  // The backoff (2 s) first: no relaunch yet.
  OnlyEcho1Beats(1);
  EXPECT_EQ(launcher_.specs.size(), 2u);
  OnlyEcho1Beats(1);
  ASSERT_EQ(launcher_.specs.size(), 3u);
  EXPECT_NE(Token(2), Token(0)) << "a fresh launch token";
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kPending);
  SendRegister("p0b", "echo", 0, "i0b", Token(2));
  ASSERT_TRUE(controller().Pump(0).ok());
  const ActorInfo* a = controller().actors().Find("echo-0");
  EXPECT_EQ(a->state, ActorState::kReady);
  EXPECT_EQ(a->incarnation, 2);
  EXPECT_EQ(a->restarts, 1);
  ASSERT_EQ(events_.size(), 3u);
  EXPECT_EQ(events_[0].kind, "lost");
  EXPECT_EQ(events_[0].works_given_back, 1);
  EXPECT_NE(events_[0].detail.find("restart in 2.0 s"), std::string::npos) << events_[0].detail;
  EXPECT_EQ(events_[1].kind, "restart");
  EXPECT_EQ(events_[2].kind, "rejoined");
  EXPECT_EQ(controller().faults().restarts, 1u);
  // echo-1's work is still pending, unaffected.
  SendResult("p1", "echo-1", w1, true);
  auto done = controller().Await(w1);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(done->lost);
}

TEST_F(RecoveryTest, SilentActorIsDeclaredDeadAfterThreeMissedBeatsAndKilled) {
  OnlyEcho1Beats(3);
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kReady) << "3 s: not yet";
  clock_.AdvanceMillis(100);
  SendHeartbeat("h1", "echo-1");
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kDead);
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0], std::make_pair(1000, SIGKILL)) << "a stopped process is killed";
  ASSERT_FALSE(events_.empty());
  EXPECT_NEAR(events_[0].silent_s, 3.1, 1e-9);
  // What a stopped-then-resumed process says is dropped.
  SendHeartbeat("h0", "echo-0");
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().drops().from_lost_actor, 1u);
}

TEST_F(RecoveryTest, HungWorkMeetsTheRequestDeadlineAndComesBackLost) {
  const uint64_t w0 = *controller().Submit("echo-0", proto::WorkRequest());
  // echo-0 keeps heartbeating but never answers: request_timeout_s (30 s) declares it dead.
  for (int i = 0; i < 31; ++i) {
    clock_.AdvanceMillis(1000);
    SendHeartbeat("h0", "echo-0");
    SendHeartbeat("h1", "echo-1");
    ASSERT_TRUE(controller().Pump(0).ok());
  }
  auto lost = controller().AwaitNext({w0});
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_TRUE(lost->second.lost);
  EXPECT_NE(lost->second.result.error().find("did not finish work 1 within 30 s"),
            std::string::npos)
      << lost->second.result.error();
}

TEST_F(RecoveryTest, RestartsStopAtMaxRestartsAndAwaitLiveSaysSo) {
  launcher_.Exit(1000, false, 1);
  launcher_.Exit(1001, false, 1);
  ASSERT_TRUE(controller().Pump(0).ok());
  clock_.AdvanceMillis(2500);
  ASSERT_TRUE(controller().Pump(0).ok());
  // One relaunch for the role (max_restarts 1): the first slot lost gets it.
  EXPECT_EQ(launcher_.specs.size(), 3u);
  launcher_.Exit(1002, false, 1);
  ASSERT_TRUE(controller().Pump(0).ok());
  absl::Status s = controller().AwaitLive("echo");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("no live echo actor and none coming back (launch.max_restarts 1"),
            std::string::npos)
      << s;
}

// Killed between two pumps: ZeroMQ refuses the send before the exit is reaped. The work
// comes back lost and the actor is recovered, exactly as if it had died with the work.
TEST_F(RecoveryTest, SubmitToAVanishedActorGivesTheWorkBackLost) {
  transport_.Disconnect("p0");
  absl::StatusOr<uint64_t> w0 = controller().Submit("echo-0", proto::WorkRequest());
  ASSERT_TRUE(w0.ok()) << w0.status();
  auto lost = controller().AwaitNext({*w0});
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_TRUE(lost->second.lost);
  EXPECT_NE(lost->second.result.error().find("echo-0 cannot be reached"), std::string::npos)
      << lost->second.result.error();
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kDead);
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0], std::make_pair(1000, SIGKILL));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].works_given_back, 1);
  // Its exit, reaped later, is not a second loss.
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().faults().actors_lost, 1u);
  EXPECT_EQ(events_.size(), 1u);
}

// issue 42: a reward worker whose regex did not compile was relaunched three times as if it had
// crashed, and the job ended "dead, 3 restart(s)" with the cause only in its log.
TEST_F(RecoveryTest, WorkerThatFailsItsSetUpOnConfigStopsTheJobNamingItWithoutARestart) {
  Message m = Envelope("echo-0");
  m.envelope.mutable_setup_failed()->set_error(
      "cannot set up role reward: reward.rewards[0] (fmt): params.pattern: missing ')'");
  transport_.Inject("p0", std::move(m));
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("echo-0 (pid 42 on h) failed its set-up on the job's config: cannot "
                             "set up role reward: reward.rewards[0] (fmt): params.pattern: "
                             "missing ')'; config errors are not retried"),
            std::string::npos)
      << s;
  EXPECT_TRUE(controller().stopped_on_config());
  // The worker is told, so that it exits only once the report is read.
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first, "p0");
  EXPECT_TRUE(sent[0].second.envelope.has_shutdown());
  // Its exit (code 2) and any time that passes neither relaunch it nor hide the cause.
  launcher_.Exit(1000, false, 2);
  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceMillis(1000);
    EXPECT_EQ(controller().Pump(0), s);
  }
  EXPECT_EQ(launcher_.specs.size(), 2u) << "relaunched";
  EXPECT_EQ(controller().faults().actors_lost, 0u);
  EXPECT_EQ(controller().faults().fatal_losses, 0u) << "would restart the whole job";
  EXPECT_TRUE(events_.empty());
}

// The same when no report came (a process that is not on the control plane, or one whose config
// did not load): exit code 2 is rlforge's "bad config", final, while a crash is still retried.
TEST_F(RecoveryTest, LaunchedWorkerExitingWithTheConfigErrorCodeIsNotRelaunched) {
  launcher_.Exit(1001, false, 1);  // a fault: echo-1 is relaunched after its backoff
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().faults().actors_lost, 1u);
  launcher_.Exit(1000, false, kConfigErrorExit);
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("echo-0 (pid 42 on h) exited with code 2: it cannot work with the "
                             "job's config; config errors are not retried"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("its log: /tmp/x.log"), std::string::npos) << s;
  clock_.AdvanceMillis(10'000);
  EXPECT_EQ(controller().Pump(0), s);
  EXPECT_EQ(launcher_.specs.size(), 2u) << "relaunched";
  EXPECT_EQ(controller().faults().actors_lost, 1u);
}

TEST_F(RecoveryTest, ServiceExitingWithTheConfigErrorCodeIsNotRestarted) {
  ASSERT_TRUE(controller()
                  .LaunchService(ProcessSpec{"sim-0", {"/bin/true"}, "/tmp/sim-0.log", {}, {}},
                                 "echo-0", "sim")
                  .ok());
  launcher_.Exit(1002, false, kConfigErrorExit);
  absl::Status s = controller().Pump(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("sim-0 (pid 1002) exited with code 2: it cannot work with the job's "
                             "config; config errors are not retried"),
            std::string::npos)
      << s;
  EXPECT_EQ(launcher_.specs.size(), 3u) << "restarted";
  EXPECT_EQ(controller().faults().actors_lost, 0u);
  EXPECT_EQ(controller().faults().fatal_losses, 0u);
}

TEST_F(ControllerTest, SubmitToAVanishedNonRecoverableActorStopsTheJobNamingIt) {
  RegisterTwo();
  transport_.Disconnect("p1");
  absl::StatusOr<uint64_t> w = controller().Submit("echo-1", proto::WorkRequest());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(w.status().message().find("actor echo-1"), std::string::npos) << w.status();
  EXPECT_NE(w.status().message().find("cannot be reached"), std::string::npos) << w.status();
}

TEST_F(ControllerTest, LossOfANonRecoverableActorStillStopsTheJob) {
  RegisterTwo();
  clock_.AdvanceMillis(3500);
  EXPECT_EQ(controller().Pump(0).code(), absl::StatusCode::kUnavailable);
}

// Elastic workers: the two launched echo actors of RecoveryTest, with room for a third to join.
class ElasticTest : public RecoveryTest {
 protected:
  void SetUp() override {
    RecoveryTest::SetUp();
    controller().AllowJoins("echo", 3);
    controller().set_status_sink([this](const std::string& state, const std::string& message) {
      statuses_.push_back(state + ": " + message);
    });
  }
  void SendLeave(const std::string& peer, const std::string& actor) {
    Message m = Envelope(actor);
    m.envelope.mutable_leave()->set_reason("SIGTERM");
    transport_.Inject(peer, std::move(m));
  }
  // The reasons of the Rejects sent since the last call.
  std::vector<std::string> Rejects() {
    std::vector<std::string> out;
    for (const auto& [peer, m] : transport_.TakeSent()) {
      if (m.envelope.has_reject()) out.push_back(m.envelope.reject().reason());
    }
    return out;
  }
  std::vector<std::string> statuses_;
};

TEST_F(ElasticTest, AJoinerTakesAnExtraSlotUpToTheCapAndMayLeave) {
  EXPECT_EQ(controller().actors().Find("echo-2")->state, ActorState::kVacant);
  ASSERT_TRUE(controller().WaitForActors().ok()) << "a vacant slot is not waited for";
  SendRegister("pj", "echo", -1, "ij");
  ASSERT_TRUE(controller().Pump(0).ok());
  const ActorInfo* j = controller().actors().Find("echo-2");
  EXPECT_EQ(j->state, ActorState::kReady);
  EXPECT_TRUE(j->elastic);
  auto sent = transport_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].second.envelope.assignment().actor_id(), "echo-2");
  EXPECT_TRUE(sent[0].second.envelope.assignment().may_leave());
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].kind, "joined");
  EXPECT_EQ(controller().elastic().joins, 1u);
  EXPECT_EQ(controller().faults().rejoins, 0u);
  // The cap holds, ranked or not.
  SendRegister("pk", "echo", -1, "ik");
  SendRegister("pl", "echo", 5, "il");
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(Rejects(),
            (std::vector<std::string>{
                "every echo slot is taken (3, echo.max_workers)",
                "rank 5 is out of range: the job has 3 echo slot(s) (echo.max_workers)"}));
}

TEST_F(ElasticTest, ALeavingWorkerHandsBackItsWorkWithNoFaultNoRelaunchAndItsSlotTakesAJoin) {
  const uint64_t w0 = *controller().Submit("echo-0", proto::WorkRequest());
  SendLeave("p0", "echo-0");
  auto back = controller().AwaitNext({w0});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->second.lost);
  EXPECT_TRUE(back->second.left);
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kLeft);
  bool answered = false;
  for (const auto& [peer, m] : transport_.TakeSent()) {
    answered = answered || (peer == "p0" && m.envelope.has_shutdown());
  }
  EXPECT_TRUE(answered) << "the leaving actor is told it may go";
  // Its exit is expected: no loss, no relaunch, even after any backoff.
  launcher_.Exit(1000, false, 0);
  OnlyEcho1Beats(5);
  EXPECT_EQ(launcher_.specs.size(), 2u);
  EXPECT_EQ(controller().faults().actors_lost, 0u);
  EXPECT_EQ(controller().faults().works_given_back, 0u);
  EXPECT_EQ(controller().elastic().leaves, 1u);
  EXPECT_EQ(controller().elastic().works_handed_back, 1u);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].kind, "left");
  EXPECT_EQ(events_[0].works_given_back, 1);
  // A join by hand fills the left slot before the vacant one.
  SendRegister("pj", "echo", -1, "ij");
  ASSERT_TRUE(controller().Pump(0).ok());
  EXPECT_EQ(controller().actors().Find("echo-0")->state, ActorState::kReady);
  EXPECT_EQ(events_.back().kind, "joined");
}

TEST_F(ElasticTest, BelowTheMinimumTheLoopWaitsSayingSoThenFailsNamingRoleLiveAndMinimum) {
  SendLeave("p0", "echo-0");
  ASSERT_TRUE(controller().Pump(0).ok());
  // Once it says it waits, time runs out.
  controller().set_status_sink([this](const std::string& state, const std::string& message) {
    statuses_.push_back(state + ": " + message);
    clock_.AdvanceMillis(100'000);
  });
  absl::Status s = controller().AwaitLive("echo", 2, "echo.min_workers");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("s for 2 live echo actors (echo.min_workers), have "),
            std::string::npos)
      << s;
  ASSERT_EQ(statuses_.size(), 1u);
  EXPECT_EQ(statuses_[0].rfind("waiting: waiting for 2 live echo actors (echo.min_workers): 1 live "
                               "of minimum 2; join one with `rlforge actor --role echo --connect ",
                               0),
            0u)
      << statuses_[0];
}

TEST_F(ElasticTest, AJoinEndsTheWaitForTheMinimum) {
  SendLeave("p0", "echo-0");
  ASSERT_TRUE(controller().Pump(0).ok());
  controller().set_status_sink([this](const std::string& state, const std::string& message) {
    statuses_.push_back(state);
    if (state == "waiting") SendRegister("pj", "echo", -1, "ij");
  });
  ASSERT_TRUE(controller().AwaitLive("echo", 2, "echo.min_workers").ok());
  EXPECT_EQ(statuses_, (std::vector<std::string>{"waiting", "running"}));
  EXPECT_EQ(controller().actors().LiveOfRole("echo").size(), 2u);
}

}  // namespace
}  // namespace rlforge
