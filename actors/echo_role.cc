#include "actors/echo_role.h"

#include <chrono>
#include <thread>

namespace rlforge {

absl::StatusOr<WorkReply> EchoRole::Handle(const proto::WorkRequest& request,
                                           std::vector<TensorFrame> tensors) {
  if (request.task_case() != proto::WorkRequest::kEcho) {
    return absl::InvalidArgumentError("echo actor got a request that is not an echo task");
  }
  if (request.echo().work_micros() > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(request.echo().work_micros()));
  }
  WorkReply reply;
  for (auto& t : tensors) {
    reply.result.mutable_echo()->add_checksums(Fnv1a64(t.data(), t.nbytes()));
  }
  reply.tensors = std::move(tensors);
  return reply;
}

}  // namespace rlforge
