#include "dist/local_group.h"

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge::dist {

absl::Status RunLocalGroup(int size, const std::function<void(Communicator&)>& fn,
                           double timeout_s) {
  static std::atomic<int> groups{0};
  ASSIGN_OR_RETURN(std::unique_ptr<StoreServer> server, StoreServer::Start("127.0.0.1"));
  const std::string name = absl::StrCat("local", groups++);
  std::mutex mu;
  absl::Status first = absl::OkStatus();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions o;
      o.store_address = server->address();
      o.name = name;
      o.rank = r;
      o.size = size;
      o.timeout_s = timeout_s;
      absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectGroup(o);
      if (!comm.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = comm.status();
        return;
      }
      fn(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace rlforge::dist
