// EchoRole: the transport self-test's actor. Returns every tensor it receives
// unchanged, with its own checksum of each, after the requested simulated work.
#pragma once

#include "actors/role.h"

namespace rlforge {

class EchoRole final : public Role {
 public:
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
};

}  // namespace rlforge
