// Host addresses for jobs that span hosts: which address to bind, which to hand out, and which
// local interface reaches a given peer.
//
// controller.host (bind) + controller.advertise_host -> AdvertisedHost -> the address handed to
//   actors on other hosts; an actor: peer host -> LocalAddressToward -> the address it binds
//
// Pure functions except LocalAddressToward, which resolves a name and asks the kernel's routing
// table (a UDP connect() sends nothing). Safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/host_address.h"  // IsLoopbackHost

namespace rlforge {

// "0.0.0.0", "*", "::" or "": binds every interface, so it names no one host to reach.
bool IsWildcardHost(const std::string& host);

// The host other processes are told to reach a socket bound at `bind_host` by: `advertise`
// when set, else `bind_host`, else (a wildcard bind) `host_name`.
std::string AdvertisedHost(const std::string& bind_host, const std::string& advertise,
                           const std::string& host_name);

// This machine's host name (gethostname), or "localhost" when it has none.
std::string LocalHostName();

// The IPv4 address of the local interface the kernel would route packets to `host`:`port`
// from (a UDP socket's connect() and getsockname(); nothing is sent). Fails, naming `host`,
// when the name does not resolve or no route leads there.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port);

}  // namespace rlforge
