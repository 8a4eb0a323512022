#include "common/net_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rlforge {

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]";
}

std::string AdvertisedHost(const std::string& bind_host, const std::string& advertise,
                           const std::string& host_name) {
  if (!advertise.empty()) return advertise;
  return IsWildcardHost(bind_host) ? host_name : bind_host;
}

std::string LocalHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve '", host, "' to an IPv4 address: ", gai_strerror(rc)));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  }
  // A UDP connect() only picks the route and the source address; no packet leaves.
  const int connected = connect(fd, found->ai_addr, found->ai_addrlen);
  const int err = errno;
  freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (connected != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("no route from this host to '", host, "': ", std::strerror(err)));
  }
  close(fd);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

}  // namespace rlforge
