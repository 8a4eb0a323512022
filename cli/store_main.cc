// rlforge-store: the rendezvous store of a job's trainer ranks (dist::StoreServer), in a
// process of its own so that the controller, which starts it, never loads libtorch.
//
// controller (job_runner) -> rlforge-store --host H [--port P] [--advertise A] --address-file F
//   -> listens at P (0: a port the OS picks) on every interface -> writes "A:PORT" (A defaults
//   to H) to F, whole or not at all -> serves the ranks' rendezvous until SIGTERM or SIGINT
//   (the controller's shutdown)
//
// Exit codes: 0 stopped by a signal, 1 the store or the file could not be made, 2 bad usage.
#include <unistd.h>

#include <cstdio>

#include "CLI/CLI.hpp"
#include "cli/signals.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status.h"
#include "dist/communicator.h"

int main(int argc, char** argv) {
  CLI::App app{"rlforge-store: the rendezvous store of a job's trainer ranks"};
  std::string host = "127.0.0.1", advertise, address_file;
  int port = 0;
  app.add_option("--host", host, "This host's address for the store (it listens on all)");
  app.add_option("--port", port, "Port to listen on; 0: one the OS picks")
      ->check(CLI::Range(0, 65535));
  app.add_option("--advertise", advertise,
                 "Host name written to the address file, for ranks on other hosts "
                 "(default: --host)");
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
  auto store = rlforge::dist::StoreServer::Start(host, port, advertise);
  if (!store.ok()) {
    spdlog::error("{}", rlforge::Msg(store.status()));
    return 1;
  }
  const std::string address = (*store)->address();
  if (absl::Status s = rlforge::WriteFileAtomic(address_file, address + "\n"); !s.ok()) {
    spdlog::error("cannot write the store's address {}: {}", address, rlforge::Msg(s));
    return 1;
  }
  spdlog::info("trainer ranks meet at {}", address);
  // The store serves from its own thread; this one only waits to be told to stop.
  while (rlforge::StopFlag().load() == 0) usleep(100'000);
  spdlog::info("stopping (signal {})", rlforge::StopFlag().load());
  return 0;
}
