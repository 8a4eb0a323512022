#include "actors/heartbeat_sender.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "common/clock.h"
#include "common/logging.h"
#include "proto/zmq_transport.h"

namespace rlforge {

HeartbeatSender::HeartbeatSender(zmq::context_t& ctx, Options options, const ActorStatus* status)
    : ctx_(ctx), options_(std::move(options)), status_(status) {}

HeartbeatSender::~HeartbeatSender() { Stop(); }

void HeartbeatSender::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void HeartbeatSender::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void HeartbeatSender::Loop() {
  ZmqOptions zo;
  zo.linger_ms = 0;
  zo.send_timeout_ms = options_.interval_ms;
  zo.curve = options_.curve;
  zo.watch_connection = true;
  auto transport = ZmqClientTransport::Connect(ctx_, options_.endpoint, zo);
  if (!transport.ok()) {
    spdlog::error("heartbeat channel: {}", transport.status().ToString());
    controller_lost_ = true;
    return;
  }
  const Clock* clock = RealClock::Get();
  int64_t last_ack = clock->NowMicros();
  int64_t lost_at = 0;  // when the controller was found lost
  int64_t next_beat = 0;
  while (!stop_) {
    int64_t now = clock->NowMicros();
    if (now >= next_beat) {
      Message m;
      m.envelope.set_sender(options_.actor_id);
      m.envelope.set_job_id(options_.job_id);
      proto::Heartbeat* hb = m.envelope.mutable_heartbeat();
      hb->set_state(static_cast<proto::Heartbeat::State>(status_->state.load()));
      hb->set_current_work_id(status_->current_work_id.load());
      hb->set_policy_version(status_->policy_version.load());
      hb->set_works_done(status_->works_done.load());
      if (hb->state() == proto::Heartbeat::SETTING_UP) hb->set_phase(status_->get_phase());
      absl::Status s = (*transport)->Send(std::move(m));
      if (!s.ok()) spdlog::warn("heartbeat not sent: {}", s.ToString());
      next_beat = now + int64_t{options_.interval_ms} * 1000;
    }
    // Wake often enough to stop promptly.
    auto got = (*transport)->Receive(std::min(50, options_.interval_ms));
    if (got && got->ok() && (*got)->envelope.has_heartbeat_ack()) last_ack = clock->NowMicros();
    if (got && got->ok() && (*got)->envelope.has_reject() && !controller_lost_) {
      // Its slot waits for a replacement (or this process, started again) to register.
      spdlog::error("the controller refused this actor's heartbeat: {}",
                    (*got)->envelope.reject().reason());
      controller_lost_ = true;
    }
    const int64_t t = clock->NowMicros();
    if (CheckLost(t, last_ack, (*transport)->LinkDownMicros(t)) && lost_at == 0) lost_at = t;
    if (lost_at > 0 && options_.exit_grace_ms > 0 &&
        t - lost_at > int64_t{options_.exit_grace_ms} * 1000) {
      spdlog::error("{}: still busy {} ms after losing the controller; exiting now",
                    options_.actor_id, options_.exit_grace_ms);
      spdlog::default_logger()->flush();
      std::fflush(nullptr);
      _exit(1);
    }
  }
}

bool HeartbeatSender::CheckLost(int64_t now_us, int64_t last_ack_us, int64_t link_down_us) {
  if (controller_lost_) return true;
  if (link_down_us > int64_t{options_.disconnect_grace_ms} * 1000) {
    spdlog::error(
        "the controller at {} closed the connection and has not come back in {} ms "
        "(it exited?)",
        options_.endpoint, link_down_us / 1000);
  } else if (now_us - last_ack_us > int64_t{options_.controller_timeout_ms} * 1000) {
    spdlog::error("no answer from the controller at {} for {} ms", options_.endpoint,
                  options_.controller_timeout_ms);
  } else {
    return false;
  }
  controller_lost_ = true;
  return true;
}

}  // namespace rlforge
