// HeartbeatSender: a thread that tells the controller this actor is alive.
//
// every interval: snapshot of ActorStatus -> Heartbeat -> controller;
// HeartbeatAck back resets the controller-lost timer; a Reject back (the controller declared
// this actor dead, e.g. while its host was cut off, and reopened its slot) loses it at once.
//
// The controller is lost when its connection closed and stayed closed for disconnect_grace_ms
// (its process exited: seconds, on any host), or when it was silent for controller_timeout_ms
// (its host or the network went away). The actor's main loop then exits; if it is still busy
// exit_grace_ms later (a long request), the process exits from here: no orphans.
//
// Owns its own socket; the only shared state is ActorStatus (atomics, and the phase under its
// own mutex). Started as soon as the actor registers, before its role is built: a set-up that
// keeps the main thread busy for minutes (loading a checkpoint) is never silence.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "proto/curve_keys.h"
#include "zmq.hpp"

namespace rlforge {

// Written by the actor's main thread, read by the heartbeat thread.
struct ActorStatus {
  std::atomic<int> state{1};  // proto::Heartbeat::State
  std::atomic<uint64_t> current_work_id{0};
  std::atomic<int64_t> policy_version{-1};
  std::atomic<uint64_t> works_done{0};

  // What a set-up (state SETTING_UP) is doing, sent with each heartbeat.
  void set_phase(std::string phase) {
    std::lock_guard<std::mutex> l(phase_mu);
    this->phase = std::move(phase);
  }
  std::string get_phase() const {
    std::lock_guard<std::mutex> l(phase_mu);
    return phase;
  }

 private:
  mutable std::mutex phase_mu;
  std::string phase;
};

class HeartbeatSender {
 public:
  struct Options {
    std::string endpoint;
    std::string actor_id;
    std::string job_id;
    int interval_ms = 1000;
    // No ack for this long: the controller is considered gone.
    int controller_timeout_ms = 30'000;
    // The connection closed (the controller process exited) and not back for this long.
    int disconnect_grace_ms = 1'500;
    // From the loss to a forced exit of the process (0: never forced).
    int exit_grace_ms = 0;
    std::optional<CurveKeys> curve;  // the work channel's keys, if any
  };
  HeartbeatSender(zmq::context_t& ctx, Options options, const ActorStatus* status);
  ~HeartbeatSender();  // stops the thread
  void Start();
  void Stop();
  bool controller_lost() const { return controller_lost_.load(); }

 private:
  void Loop();
  // Whether the controller is gone as of `now_us`; logs why, once.
  bool CheckLost(int64_t now_us, int64_t last_ack_us, int64_t link_down_us);
  zmq::context_t& ctx_;
  Options options_;
  const ActorStatus* status_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> controller_lost_{false};
  std::thread thread_;
};

}  // namespace rlforge
