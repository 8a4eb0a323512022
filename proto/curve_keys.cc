#include "proto/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status.h"
#include "zmq.h"

namespace rlforge {

namespace {

constexpr size_t kZ85KeyChars = 40;

struct KeyPair {
  std::string public_key, secret_key;
};

absl::StatusOr<KeyPair> NewKeyPair() {
  char pub[kZ85KeyChars + 1] = {}, sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return absl::InternalError(absl::StrCat("zmq_curve_keypair: ", zmq_strerror(zmq_errno()),
                                            " (libzmq built without CURVE?)"));
  }
  return KeyPair{pub, sec};
}

// Creates `path` readable by its owner only (no moment with wider permissions) and writes it.
absl::Status WritePrivateFile(const std::string& path, const std::string& contents) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat(path, ": write: ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0600) != 0 || fsync(fd) != 0 || close(fd) != 0) {
    return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string KeyFileText(const std::string& what, const std::map<std::string, std::string>& keys) {
  std::string text =
      absl::StrCat("# rlforge CURVE keys (", what,
                   "); format: `name: value`, Z85. Keep private (0600): it admits to the job.\n");
  for (const auto& [name, value] : keys) absl::StrAppend(&text, name, ": ", value, "\n");
  return text;
}

// Refuses a file its group or others may read or write: a leaked key admits anyone to the job.
absl::Status CheckPrivate(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("key file ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("key file ", path, ": not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return absl::PermissionDeniedError(absl::StrCat(
        "key file ", path, " has mode ", mode,
        ": others may read it; it must be private to its owner (chmod 600 ", path, ")"));
  }
  return absl::OkStatus();
}

// Parses `name: value` lines into the fields `allowed` names; every one must be present.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyFile(
    const std::string& path, const std::vector<std::string>& allowed) {
  RETURN_IF_ERROR(CheckPrivate(path));
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::map<std::string, std::string> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto where = [&] { return absl::StrCat(path, ":", line_no, ": "); };
    size_t colon = line.find(": ");  // Z85 values may hold ':' themselves
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "expected `name: value`"));
    }
    std::string name(line.substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 2)));
    bool known = false;
    for (const std::string& a : allowed) known |= a == name;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "unknown key name '", name,
                       "' (expected one of: ", absl::StrJoin(allowed, ", "), ")"));
    }
    if (value.size() != kZ85KeyChars) {
      return absl::InvalidArgumentError(absl::StrCat(where(), name, ": expected a ", kZ85KeyChars,
                                                     "-character Z85 key, got ", value.size(),
                                                     " characters"));
    }
    uint8_t raw[32];
    if (zmq_z85_decode(raw, value.c_str()) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where(), name, ": not a Z85 key"));
    }
    if (!out.emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat(where(), name, " given twice"));
    }
  }
  for (const std::string& a : allowed) {
    if (out.count(a) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no '", a, "' line"));
    }
  }
  return out;
}

}  // namespace

std::string JobKeyPath(const std::string& run_dir, const std::string& file) {
  return absl::StrCat(run_dir, "/", kKeysDir, "/", file);
}

absl::StatusOr<JobKeyTexts> MakeJobKeyTexts() {
  ASSIGN_OR_RETURN(KeyPair controller, NewKeyPair());
  ASSIGN_OR_RETURN(KeyPair actor, NewKeyPair());
  JobKeyTexts t;
  t.controller =
      KeyFileText("controller.key: the controller's server pair and the actors' public key",
                  {{"controller_public", controller.public_key},
                   {"controller_secret", controller.secret_key},
                   {"actor_public", actor.public_key}});
  t.actor = KeyFileText("actor.key: the controller's public key and the actors' pair",
                        {{"controller_public", controller.public_key},
                         {"actor_public", actor.public_key},
                         {"actor_secret", actor.secret_key}});
  return t;
}

absl::Status WriteJobKeys(const std::string& run_dir) {
  const std::string dir = absl::StrCat(run_dir, "/", kKeysDir);
  if (mkdir(dir.c_str(), 0700) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot make the job's key folder ", dir, ": ", std::strerror(errno)));
  }
  if (chmod(dir.c_str(), 0700) != 0) {  // whatever the umask left
    return absl::InternalError(absl::StrCat(dir, ": chmod: ", std::strerror(errno)));
  }
  ASSIGN_OR_RETURN(JobKeyTexts keys, MakeJobKeyTexts());
  RETURN_IF_ERROR(WritePrivateFile(JobKeyPath(run_dir, kControllerKeyFile), keys.controller));
  RETURN_IF_ERROR(WritePrivateFile(JobKeyPath(run_dir, kActorKeyFile), keys.actor));
  return SyncParentDirectory(JobKeyPath(run_dir, kActorKeyFile));
}

absl::StatusOr<CurveKeys> LoadActorKeys(const std::string& path) {
  ASSIGN_OR_RETURN(auto f,
                   ParseKeyFile(path, {"controller_public", "actor_public", "actor_secret"}));
  CurveKeys k;
  k.controller_public = f["controller_public"];
  k.actor_public = f["actor_public"];
  k.actor_secret = f["actor_secret"];
  k.path = path;
  return k;
}

absl::StatusOr<CurveKeys> LoadControllerKeys(const std::string& path) {
  ASSIGN_OR_RETURN(auto f,
                   ParseKeyFile(path, {"controller_public", "controller_secret", "actor_public"}));
  CurveKeys k;
  k.controller_public = f["controller_public"];
  k.controller_secret = f["controller_secret"];
  k.actor_public = f["actor_public"];
  k.path = path;
  return k;
}

}  // namespace rlforge
