// RunLocalGroup: N ranks as threads of this process, joined through a store of their own.
// For tests and single-process tools; jobs run one rank per process.
//
// fn(communicator) runs on each rank's thread; returns once every thread finished, with the
// first failure to connect. libtorch's intra-op pool is shared by the threads: set it to one.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "dist/communicator.h"

namespace rlforge::dist {

absl::Status RunLocalGroup(int size, const std::function<void(Communicator&)>& fn,
                           double timeout_s = 30);

}  // namespace rlforge::dist
