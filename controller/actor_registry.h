// ActorRegistry: every actor the job expects, and what is known about each.
//
// Slots are created up front (ExpectRole); registration fills a slot; the
// controller updates liveness as heartbeats and results arrive. A role may also
// take joiners (AllowJoins): elastic slots beyond its configured count, vacant
// until someone joins, never waited for and never relaunched. Single-threaded
// (the controller's loop thread).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rlforge {

// kVacant: an elastic slot nobody has joined yet; kLeft: its actor left on purpose (SIGTERM),
// and the slot is open to a join. Neither is waited for.
enum class ActorState { kPending, kReady, kBusy, kDead, kStopped, kVacant, kLeft };
const char* ActorStateName(ActorState s);

struct ActorInfo {
  std::string id;  // "<role>-<rank>"
  std::string role;
  int rank = 0;
  bool external = false;  // joins by hand (`rlforge actor`) rather than being launched
  // Its loss is survivable: its in-flight work is given back to the loop and the slot is
  // refilled (relaunched, or rejoined by hand when external) instead of stopping the job.
  bool recoverable = false;
  // A slot beyond the role's configured count, opened by AllowJoins: filled by joiners only.
  bool elastic = false;
  ActorState state = ActorState::kPending;
  std::string host;
  int pid = 0;           // as the actor reported it
  int launched_pid = 0;  // as the launcher started it (local backend); 0 if external
  std::string log_path;
  std::string launch_token;  // set when launched; a Register must present it
  std::string instance_id;
  std::string work_peer;       // ROUTER id of the work channel
  std::string heartbeat_peer;  // ROUTER id of the heartbeat channel
  int64_t registered_us = 0;
  int64_t last_heard_us = 0;
  uint64_t current_work_id = 0;
  int64_t policy_version = -1;
  uint64_t works_done = 0;
  int restarts = 0;
  int incarnation = 0;        // registrations so far: a replacement has a higher one
  bool after_leave = false;   // the current registration took the slot of an actor that left
  int64_t restart_at_us = 0;  // when a scheduled relaunch is due; 0: none scheduled
  int64_t lost_at_us = 0;     // when it was last declared dead
  int64_t relaunched_us = 0;  // when its latest replacement was started; 0: never
  std::string last_loss;      // why it was last declared dead
  // Its heartbeats say it is still setting up (since registered_us), doing `setup_phase`.
  bool setting_up = false;
  std::string setup_phase;
  int64_t setup_logged_us = 0;  // when its phase was last logged
};

class ActorRegistry {
 public:
  // Creates `count` pending slots role-0 .. role-(count-1).
  void ExpectRole(const std::string& role, int count, bool external, bool recoverable = false);
  ActorInfo* Find(const std::string& id);
  const ActorInfo* Find(const std::string& id) const;
  ActorInfo* FindByInstance(const std::string& instance_id);
  ActorInfo* FindByLaunchedPid(int pid);
  // Adds vacant elastic slots so that `role` has `max_count` in all (no-op when it has that
  // many). Joined actors of the role may leave (Assignment.may_leave) once this is called,
  // whatever `max_count`.
  void AllowJoins(const std::string& role, int max_count);
  // Whether AllowJoins was called for `role`.
  bool Elastic(const std::string& role) const { return elastic_roles_.count(role) > 0; }
  // The slot a Register for `role` should fill: a launched slot only for the
  // process launched into it (matched by launch token), an external slot for anyone
  // (the requested rank, or the lowest free one), and for an elastic role a vacant or left
  // slot for anyone; nullopt with a reason if none.
  std::optional<std::string> ChooseSlot(const std::string& role, int requested_rank,
                                        const std::string& launch_token, std::string* why) const;
  std::vector<std::string> Roles() const;
  std::vector<std::string> IdsOfRole(const std::string& role) const;
  int CountOfRole(const std::string& role) const;
  // The slots that are not elastic, over every role: the actors a job starts with.
  int ConfiguredCount() const;
  // Whether a slot of `role` is open to a join (vacant, or left).
  bool OpenToJoin(const std::string& role) const;
  // The ids of `role` that are registered and alive (ready or busy), by rank.
  std::vector<std::string> LiveOfRole(const std::string& role) const;
  std::vector<const ActorInfo*> All() const;
  std::vector<const ActorInfo*> Pending() const;

 private:
  std::map<std::string, ActorInfo> actors_;  // ordered: role then rank
  std::vector<std::string> order_;           // insertion order, for display
  std::set<std::string> elastic_roles_;
};

}  // namespace rlforge
