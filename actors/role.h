// Role: what an actor process does with the work the controller sends it.
//
// WorkRequest + tensors -> Role::Handle -> WorkResult + tensors
//
// One Role object lives in each actor process, built from the job's resolved
// config and the actor's Assignment. Handle() is called from the actor's main
// thread only, one request at a time. An error status becomes a WorkResult
// with ok=false and the message, which stops the job with that message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/setup_progress.h"
#include "config/job_config.h"
#include "proto/control.pb.h"
#include "proto/tensor_frame.h"

namespace rlforge {

struct WorkReply {
  proto::WorkResult result;  // work_id, ok and policy_version are filled in by the runtime
  std::vector<TensorFrame> tensors;
};

class Role {
 public:
  virtual ~Role() = default;
  virtual absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                           std::vector<TensorFrame> tensors) = 0;
  // Version of the policy this actor currently holds; -1 when it holds none.
  virtual int64_t policy_version() const { return -1; }
};

// Builds the role named `role` for an actor process. The binary supplies it (cli/role_registry.h),
// so this folder depends on no role folder. A long build (loading a checkpoint) says how far it
// is through `progress`; the actor's heartbeats carry it.
using RoleFactory = absl::StatusOr<std::unique_ptr<Role>> (*)(const std::string& role,
                                                              const JobConfig& config,
                                                              const proto::Assignment& assignment,
                                                              const SetupProgress& progress);

}  // namespace rlforge
