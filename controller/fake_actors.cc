#include "controller/fake_actors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace rlforge::testing {

std::string FakeWork::kind() const {
  const auto* field = proto::WorkRequest::descriptor()->FindFieldByNumber(request.task_case());
  return field == nullptr ? "none" : field->name();
}

const TensorFrame* FakeWork::Tensor(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

::testing::AssertionResult SameWork(const FakeWork& a, const FakeWork& b) {
  proto::WorkRequest ra = a.request, rb = b.request;
  ra.clear_work_id();
  rb.clear_work_id();
  if (ra.SerializeAsString() != rb.SerializeAsString()) {
    return ::testing::AssertionFailure() << a.actor_id << " got " << ra.ShortDebugString() << ", "
                                         << b.actor_id << " got " << rb.ShortDebugString();
  }
  if (a.tensors.size() != b.tensors.size()) {
    return ::testing::AssertionFailure() << a.actor_id << " got " << a.tensors.size()
                                         << " tensors, " << b.actor_id << " " << b.tensors.size();
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorFrame &ta = a.tensors[i], &tb = b.tensors[i];
    if (ta.name() != tb.name() || ta.dtype() != tb.dtype() || ta.shape() != tb.shape() ||
        ta.nbytes() != tb.nbytes() ||
        (ta.nbytes() > 0 && std::memcmp(ta.data(), tb.data(), ta.nbytes()) != 0)) {
      return ::testing::AssertionFailure()
             << "tensor " << i << " (" << ta.name() << ") differs between " << a.actor_id << " and "
             << b.actor_id;
    }
  }
  return ::testing::AssertionSuccess();
}

FakeReply FakeReply::Ok() {
  FakeReply r;
  r.result.set_ok(true);
  return r;
}

FakeReply FakeReply::Fail(const std::string& error) {
  FakeReply r;
  r.result.set_ok(false);
  r.result.set_error(error);
  return r;
}

FakeReply FakeReply::Never() {
  FakeReply r;
  r.never = true;
  return r;
}

FakeReply FakeReply::Crash() {
  FakeReply r;
  r.crash = true;
  return r;
}

FakeReply FakeReply::Hang() {
  FakeReply r;
  r.hang = true;
  return r;
}

FakeReply FakeReply::AndLeave(FakeReply reply) {
  reply.leave = true;
  return reply;
}

FakeActors::FakeActors(const JobConfig& config) : config_(config) {
  Controller::Options o;
  o.job_id = "fake-job";
  o.heartbeat_interval_ms = config.controller.heartbeat_interval_ms;
  o.heartbeat_misses = config.controller.heartbeat_misses;
  o.register_timeout_s = config.controller.register_timeout_s;
  o.request_timeout_s = config.controller.request_timeout_s;
  o.setup_timeout_s = config.controller.setup_timeout_s;
  o.shutdown_grace_s = 0;
  o.collective_timeout_s = config.trainer.collective_timeout_s;
  // Where real trainer ranks would meet; the fakes run no collective.
  if (config.trainer.ranks > 1) o.trainer_store_address = "127.0.0.1:29500";
  controller_ = std::make_unique<Controller>(o, &transport_, &clock_, nullptr, nullptr);
  controller_->set_pump_observer([this] { OnPump(); });
}

FakeActors::~FakeActors() = default;

void FakeActors::AddRoles(const std::vector<RoleRequirement>& roles) {
  for (const RoleRequirement& r : roles) {
    controller_->ExpectRole(r.role, r.count, /*external=*/true, r.recoverable);
    if (r.elastic) controller_->AllowJoins(r.role, r.max_count);
    for (int rank = 0; rank < r.count; ++rank) {
      actors_.push_back({r.role, rank, absl::StrCat("peer/", r.role, "/", rank), ""});
    }
  }
}

void FakeActors::On(const std::string& role, proto::WorkRequest::TaskCase task, FakeScript script) {
  scripts_[{role, static_cast<int>(task)}] = std::move(script);
}

void FakeActors::Register(const Actor& a) {
  Message m;
  m.envelope.set_sender(a.peer);
  proto::Register* r = m.envelope.mutable_register_();
  r->set_role(a.role);
  r->set_requested_rank(a.rank);
  r->set_instance_id(a.peer);
  r->set_host("fakehost");
  r->set_pid(4242 + a.instance);
  transport_.Inject(a.peer, std::move(m));
}

absl::Status FakeActors::Start() {
  for (const Actor& a : actors_) Register(a);
  return controller_->WaitForActors();
}

void FakeActors::RejoinDead() {
  if (!rejoin_) return;
  for (Actor& a : actors_) {
    if (!a.dead && !a.hung) continue;
    const ActorInfo* slot = controller_->actors().Find(a.id);
    if (slot == nullptr || slot->state != ActorState::kPending) continue;
    a.dead = a.hung = false;
    ++a.instance;
    a.peer = absl::StrCat("peer/", a.role, "/", a.rank, "/", a.instance);
    ++rejoins_;
    Register(a);
  }
}

std::string FakeActors::Join(const std::string& role) {
  Actor a{role, -1, absl::StrCat("peer/", role, "/joined-", joins_++), ""};
  actors_.push_back(a);
  Register(a);
  return a.peer;
}

std::string FakeActors::IdOf(const std::string& peer) const {
  const Actor* a = ByPeer(peer);
  return a == nullptr ? "" : a->id;
}

std::vector<std::string> FakeActors::Ids(const std::string& role) const {
  std::vector<std::string> ids;
  for (const Actor& a : actors_) {
    if (a.role == role) ids.push_back(a.id);
  }
  return ids;
}

std::vector<const FakeWork*> FakeActors::Received(proto::WorkRequest::TaskCase task) const {
  std::vector<const FakeWork*> out;
  for (const FakeWork& w : received_) {
    if (w.request.task_case() == task) out.push_back(&w);
  }
  return out;
}

std::vector<std::string> FakeActors::Log() const {
  std::vector<std::string> out;
  for (const FakeWork& w : received_) out.push_back(w.actor_id + " " + w.kind());
  return out;
}

const FakeActors::Actor* FakeActors::ByPeer(const std::string& peer) const {
  for (const Actor& a : actors_) {
    if (a.peer == peer) return &a;
  }
  return nullptr;
}

void FakeActors::Inject(const std::string& peer, const std::string& actor_id, FakeReply reply) {
  Message m;
  m.envelope.set_job_id("fake-job");
  m.envelope.set_sender(actor_id);
  *m.envelope.mutable_work_result() = std::move(reply.result);
  m.tensors = std::move(reply.tensors);
  transport_.Inject(peer, std::move(m));
}

void FakeActors::SendResult(const std::string& actor_id, uint64_t work_id, FakeReply reply) {
  for (const Actor& a : actors_) {
    if (a.id != actor_id) continue;
    reply.result.set_work_id(work_id);
    Inject(a.peer, a.id, std::move(reply));
    return;
  }
  ADD_FAILURE() << "no fake actor " << actor_id;
}

void FakeActors::Answer(const std::string& peer, const proto::Envelope& env,
                        std::vector<TensorFrame> tensors) {
  Actor* a = const_cast<Actor*>(ByPeer(peer));
  if (a == nullptr) {
    // A dead instance's peer: the request is lost with the process.
    for (const Actor& old : actors_) {
      if (absl::StartsWith(peer, absl::StrCat("peer/", old.role, "/", old.rank))) return;
    }
    ADD_FAILURE() << "the controller sent a work request to unknown peer " << peer;
    return;
  }
  if (a->dead || a->hung || a->left) return;
  FakeWork& w = received_.emplace_back();
  w.actor_id = a->id;
  w.role = a->role;
  w.rank = a->rank;
  w.request = env.work_request();
  w.tensors = std::move(tensors);
  auto it = scripts_.find({a->role, static_cast<int>(w.request.task_case())});
  FakeReply reply =
      it == scripts_.end()
          ? FakeReply::Fail(absl::StrCat("fake ", a->id, " has no script for ", w.kind()))
          : it->second(w);
  a = const_cast<Actor*>(ByPeer(peer));  // a script may Join, which moves actors_
  if (reply.crash || reply.hang) {
    a->dead = reply.crash;
    a->hung = reply.hang;
    // A dead process sends nothing it had not sent already.
    if (reply.crash) {
      std::erase_if(held_, [&](const Held& h) { return h.peer == a->peer; });
    }
    return;
  }
  if (reply.never && !reply.leave) return;
  reply.result.set_work_id(w.request.work_id());
  if (reply.leave) {
    // Its reply (unless `never`), then Leave, in the order one channel keeps.
    a->left = true;
    if (!reply.never) Inject(a->peer, a->id, std::move(reply));
    Message bye;
    bye.envelope.set_job_id("fake-job");
    bye.envelope.set_sender(a->id);
    bye.envelope.mutable_leave()->set_reason("SIGTERM");
    transport_.Inject(a->peer, std::move(bye));
    return;
  }
  held_.push_back({a->peer, a->id, std::move(reply)});
}

void FakeActors::HeartbeatAll() {
  for (const Actor& a : actors_) {
    if (a.id.empty() || a.dead || a.left) continue;
    Message m;
    m.envelope.set_job_id("fake-job");
    m.envelope.set_sender(a.id);
    m.envelope.mutable_heartbeat()->set_state(proto::Heartbeat::IDLE);
    transport_.Inject("heartbeat/" + a.peer, std::move(m));
  }
}

void FakeActors::OnPump() {
  bool busy = false;
  for (auto& [peer, msg] : transport_.TakeSent()) {
    const proto::Envelope& env = msg.envelope;
    if (env.has_assignment()) {
      for (Actor& a : actors_) {
        if (a.peer != peer) continue;
        a.id = env.assignment().actor_id();
        a.rank = env.assignment().rank();
      }
    } else if (env.has_work_request()) {
      Answer(peer, env, std::move(msg.tensors));
      busy = true;
    }
  }
  // Release the replies whose delay is over, in the order they were made.
  std::vector<Held> still;
  for (Held& h : held_) {
    if (h.reply.delay_pumps-- > 0) {
      still.push_back(std::move(h));
      continue;
    }
    if (h.reply.twice) {
      FakeReply again;
      again.result = h.reply.result;
      for (const TensorFrame& t : h.reply.tensors) {
        again.tensors.push_back(TensorFrame::Copy(t.name(), t.dtype(), t.shape(), t.data()));
      }
      Inject(h.peer, h.actor_id, std::move(h.reply));
      Inject(h.peer, h.actor_id, std::move(again));
    } else {
      Inject(h.peer, h.actor_id, std::move(h.reply));
    }
    busy = true;
  }
  held_ = std::move(still);
  RejoinDead();
  if (!busy && held_.empty()) {
    // Nothing to answer: let time pass, actors alive, so a missing reply meets its deadline.
    clock_.AdvanceMillis(config_.controller.heartbeat_interval_ms);
    HeartbeatAll();
  }
}

FakeJobContext::FakeJobContext(FakeActors& actors, const JobConfig& config,
                               const std::string& run_root)
    : actors_(actors), config_(config) {
  auto dir = RunDirectory::Create(run_root, "run");
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (dir.ok()) dir_ = std::make_unique<RunDirectory>(*std::move(dir));
}

absl::Status FakeJobContext::EndIteration(const IterationRecord& record) {
  records.push_back(record);
  ends_at.push_back(actors_.received().size());
  return absl::OkStatus();
}

std::string FreshTestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name =
      info == nullptr ? "test" : absl::StrCat(info->test_suite_name(), ".", info->name());
  name = absl::StrReplaceAll(name, {{"/", "_"}});
  const std::string dir = ::testing::TempDir() + "rlforge_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

JobConfig TestConfig(const std::string& yaml) {
  LoadedJob j = LoadJobText(yaml, "test.yaml");
  for (const auto& e : j.errors) ADD_FAILURE() << e.ToString();
  return j.config;
}

FakeReply WeightsReply(int64_t version, const std::string& location) {
  FakeReply r = FakeReply::Ok();
  r.result.set_policy_version(version);
  proto::WeightsReady* w = r.result.mutable_weights();
  w->set_version(version);
  w->set_location(location);
  w->set_nbytes(16);
  w->set_checksum(1000 + static_cast<uint64_t>(version));
  w->set_layout_hash(77);
  if (location == "inline") {
    r.tensors.push_back(
        TensorFrame::FromVector<float>("weights", {static_cast<float>(version), 1, 2, 3}));
  }
  return r;
}

FakeReply PublishReply(const FakeWork&) {
  FakeReply r = FakeReply::Ok();
  (*r.result.mutable_metrics())["publish_s"] = 0.001;
  return r;
}

}  // namespace rlforge::testing
