// rlforge-store: the rendezvous store of a job's trainer ranks (dist::StoreServer), in a
// process of its own so that the controller, which starts it, never loads libtorch.
//
// controller (job_runner, trainer.ranks > 1) -> rlforge-store --host H --address-file F
//   -> listens on H at a port the OS picks -> writes "H:PORT" to F (whole or not at all)
//   -> serves the ranks' rendezvous until SIGTERM or SIGINT (the controller's shutdown)
//
// Exit codes: 0 stopped by a signal, 1 the store or the file could not be made, 2 bad usage.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "CLI/CLI.hpp"
#include "cli/signals.h"
#include "common/logging.h"
#include "common/status.h"
#include "dist/communicator.h"

namespace {

// Written beside `path` then renamed over it, so a reader sees the whole address or none.
bool WriteAddress(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << address << "\n";
    if (!out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rlforge-store: the rendezvous store of a job's trainer ranks"};
  std::string host = "127.0.0.1", address_file;
  app.add_option("--host", host, "Address to listen on");
  app.add_option("--address-file", address_file, "Where to write host:port once listening")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  rlforge::InitLogging("trainer-store");
  rlforge::InstallSignalHandlers();
  auto store = rlforge::dist::StoreServer::Start(host);
  if (!store.ok()) {
    spdlog::error("{}", rlforge::Msg(store.status()));
    return 1;
  }
  const std::string address = (*store)->address();
  if (!WriteAddress(address_file, address)) {
    spdlog::error("cannot write the store's address {} to {}", address, address_file);
    return 1;
  }
  spdlog::info("trainer ranks meet at {}", address);
  // The store serves from its own thread; this one only waits to be told to stop.
  while (rlforge::StopFlag().load() == 0) usleep(100'000);
  spdlog::info("stopping (signal {})", rlforge::StopFlag().load());
  return 0;
}
