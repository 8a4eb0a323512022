// FakeActors: scripted actors for testing an algorithm's controller loop (test-only).
//
// Algorithm::Run -> Controller::Submit -> MemoryServerTransport -> FakeActors (the
//   controller's pump observer) -> the script for (role, WorkRequest::task_case) ->
//   WorkResult + tensor frames injected back -> the loop's Await
//
// Everything runs on the test's thread, with no sockets, no sleeps and no other process.
// After every Pump the harness takes what the controller sent, records each WorkRequest
// (in order, with its tensors) and answers it with its role's script. A reply may be held
// back for a number of pumps (a late reply) or never sent (left to the deadline). A Pump
// that gives the harness nothing to answer or release moves the fake clock on by one
// heartbeat interval, and every actor heartbeats: a loop waiting on a reply that will not
// come meets controller.request_timeout_s instead of hanging.
//
// Actors register as the real ones do (Register -> Assignment); their ids come from the
// controller, so tests name roles and look ids up rather than spelling them.
//
// Failures: a script may answer Crash (the actor takes the work and dies: no reply, no more
// heartbeats) or Hang (it keeps heartbeating but never answers again). With set_rejoin, a
// dead actor's slot, once the controller opens it again, is filled by a fresh instance (a
// new peer and instance id), as a replacement process would.
// Elastic workers: Join adds an actor to a running job (as `rlforge actor --connect` without a
// rank); a reply marked `leave` is sent, then the actor says Leave (SIGTERM) and goes quiet.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "config/job_config.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/run_directory.h"
#include "proto/memory_transport.h"

namespace rlforge::testing {

// One WorkRequest as an actor received it.
struct FakeWork {
  std::string actor_id;
  std::string role;
  int rank = 0;
  proto::WorkRequest request;
  std::vector<TensorFrame> tensors;

  // The request's task field name: "lm_generate", "grpo_train", ...
  std::string kind() const;
  // The frame named `name`, or nullptr.
  const TensorFrame* Tensor(const std::string& name) const;
};

// Whether two requests carry the same task (work ids aside) and byte-identical tensor frames,
// as every trainer rank must receive; the failure message says what differs.
::testing::AssertionResult SameWork(const FakeWork& a, const FakeWork& b);

// What a script answers. `result.work_id` is filled in by the harness.
struct FakeReply {
  proto::WorkResult result;
  std::vector<TensorFrame> tensors;
  // Pumps to wait before the reply is sent (a slow actor).
  int delay_pumps = 0;
  // No reply at all: the controller's request deadline has to notice.
  bool never = false;
  // The reply is sent twice (an actor retrying): the second must change nothing.
  bool twice = false;
  // The actor dies on this request: it neither answers nor heartbeats again.
  bool crash = false;
  // The actor hangs on this request: it keeps heartbeating but never answers again.
  bool hang = false;
  // The actor answers at once, then leaves (SIGTERM): Leave, and nothing after it. With
  // `never`: it leaves without answering (the controller hands the request back).
  bool leave = false;

  static FakeReply Ok();
  static FakeReply Fail(const std::string& error);
  static FakeReply Never();
  static FakeReply Crash();
  static FakeReply Hang();
  static FakeReply AndLeave(FakeReply reply);
};

using FakeScript = std::function<FakeReply(const FakeWork&)>;

class FakeActors {
 public:
  // A controller over an in-memory transport and a fake clock, with config.controller's
  // heartbeat and request deadlines. `config` must outlive the harness.
  explicit FakeActors(const JobConfig& config);
  ~FakeActors();

  // Declares the actors to play (before Start): what an algorithm's Roles() asks for.
  void AddRoles(const std::vector<RoleRequirement>& roles);
  // How actors of `role` answer requests of kind `task`. A request with no script is answered
  // ok=false, naming the actor and the kind, so a loop that sends the unexpected fails loudly.
  void On(const std::string& role, proto::WorkRequest::TaskCase task, FakeScript script);
  // Registers every declared actor; fails as WaitForActors does.
  absl::Status Start();

  Controller& controller() { return *controller_; }
  FakeClock& clock() { return clock_; }
  MemoryServerTransport& transport() { return transport_; }

  // The ids the controller gave the actors of `role`, by rank.
  std::vector<std::string> Ids(const std::string& role) const;
  // Every request in the order the controller sent them.
  const std::deque<FakeWork>& received() const { return received_; }
  // The requests of one kind, in order (all roles).
  std::vector<const FakeWork*> Received(proto::WorkRequest::TaskCase task) const;
  // "<actor id> <kind>" per request, in order.
  std::vector<std::string> Log() const;
  // Injects a result for `work_id` from `actor_id`, as if the actor sent it unasked.
  void SendResult(const std::string& actor_id, uint64_t work_id, FakeReply reply);
  // Whether a dead actor's slot is filled again by a fresh instance once the controller opens
  // it (off by default).
  void set_rejoin(bool rejoin) { rejoin_ = rejoin; }
  // Instances that joined to replace a dead one, so far.
  int rejoins() const { return rejoins_; }
  // A new actor of `role` registers with the running job (no rank asked for); it is served
  // from the next Pump on. Returns its peer.
  std::string Join(const std::string& role);
  // The actor id the controller gave `peer` ("" before its Assignment).
  std::string IdOf(const std::string& peer) const;

 private:
  struct Actor {
    std::string role;
    int rank = 0;
    std::string peer;
    std::string id;  // from the Assignment
    bool dead = false;
    bool hung = false;
    bool left = false;
    int instance = 0;  // 0 for the first; +1 per replacement
  };
  struct Held {
    std::string peer;
    std::string actor_id;
    FakeReply reply;
  };
  void OnPump();
  void Answer(const std::string& peer, const proto::Envelope& env,
              std::vector<TensorFrame> tensors);
  void Inject(const std::string& peer, const std::string& actor_id, FakeReply reply);
  void HeartbeatAll();
  void Register(const Actor& a);
  // Re-registers dead actors whose slots the controller opened again (set_rejoin).
  void RejoinDead();
  const Actor* ByPeer(const std::string& peer) const;

  const JobConfig& config_;
  MemoryServerTransport transport_;
  FakeClock clock_;
  std::unique_ptr<Controller> controller_;
  std::vector<Actor> actors_;
  std::map<std::pair<std::string, int>, FakeScript> scripts_;  // (role, task case)
  std::deque<FakeWork> received_;
  std::vector<Held> held_;
  bool rejoin_ = false;
  int rejoins_ = 0;
  int joins_ = 0;
};

// A JobContext over FakeActors' controller that records what the loop reports.
class FakeJobContext final : public JobContext {
 public:
  // `run_root`: a fresh folder; the run directory is made inside it.
  FakeJobContext(FakeActors& actors, const JobConfig& config, const std::string& run_root);

  Controller& controller() override { return actors_.controller(); }
  const JobConfig& config() const override { return config_; }
  const RunDirectory& run_dir() const override { return *dir_; }
  absl::Status EndIteration(const IterationRecord& record) override;
  void SetTotalIterations(int64_t total) override { total_iterations = total; }
  void AddSamples(const std::vector<SampleRecord>& s) override {
    samples.insert(samples.end(), s.begin(), s.end());
  }
  const JobCheckpoint* resume_point() const override { return resume; }

  // Set before the loop runs: the checkpoint it resumes from (owned by the test).
  const JobCheckpoint* resume = nullptr;

  std::vector<IterationRecord> records;
  int64_t total_iterations = 0;
  std::vector<SampleRecord> samples;
  // Requests sent before each EndIteration: records[i] closed after ends_at[i] requests.
  std::vector<size_t> ends_at;

 private:
  FakeActors& actors_;
  const JobConfig& config_;
  std::unique_ptr<RunDirectory> dir_;
};

// A fresh empty folder under the test temp dir, named after the running test.
std::string FreshTestDir();

// Loads a job config from YAML text; a config error fails the test and returns the defaults.
JobConfig TestConfig(const std::string& yaml);

// A WorkResult's weights for `version` (location "inline" carries a "weights" frame).
FakeReply WeightsReply(int64_t version, const std::string& location = "shm:/fake");
// A trainer rank's answer to PublishWeights (the stream itself is the engines' business).
FakeReply PublishReply(const FakeWork& w);

}  // namespace rlforge::testing
