#include "common/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {
namespace {

absl::Status Errno(int err, const std::string& path, const std::string& op) {
  return absl::ErrnoToStatus(err, absl::StrCat(path, ": cannot ", op));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t end)
      : path_(std::move(path)), fd_(fd), end_(end) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& path() const override { return path_; }

  absl::Status Append(std::string_view data) override {
    RETURN_IF_ERROR(WriteAt(end_, data));
    return absl::OkStatus();
  }

  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    RETURN_IF_ERROR(CheckOpen());
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, path_, "write");
      done += static_cast<size_t>(n);
    }
    end_ = std::max<uint64_t>(end_, offset + data.size());
    return absl::OkStatus();
  }

  absl::Status Truncate(uint64_t size) override {
    RETURN_IF_ERROR(CheckOpen());
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno(errno, path_, "resize");
    end_ = size;
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    RETURN_IF_ERROR(CheckOpen());
    if (::fsync(fd_) != 0) return Errno(errno, path_, "fsync");
    return absl::OkStatus();
  }

  absl::Status Close() override {
    RETURN_IF_ERROR(CheckOpen());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Errno(errno, path_, "close");
    return absl::OkStatus();
  }

 private:
  absl::Status CheckOpen() const {
    if (fd_ >= 0) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  }

  std::string path_;
  int fd_;
  uint64_t end_;  // where Append writes
};

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return Open(path, O_TRUNC, "open for writing");
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return Open(path, 0, "open for appending");
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, path, "open");
    std::string out;
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return Errno(err, path, "read");
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }

  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Errno(errno, path, "stat");
    return FileStat{S_ISDIR(st.st_mode), static_cast<uint64_t>(st.st_size)};
  }

  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return Errno(errno, path, "list");
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return Errno(err, path, "list");
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return Errno(errno, from, absl::StrCat("rename to ", to));
    }
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& path) override {
    if (std::remove(path.c_str()) != 0) return Errno(errno, path, "remove");
    return absl::OkStatus();
  }

  absl::StatusOr<bool> CreateDirectory(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) == 0) return true;
    if (errno == EEXIST) return false;
    return Errno(errno, path, "create directory");
  }

  absl::Status SyncDirectory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, path, "open directory");
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Errno(err, path, "fsync directory");
    return absl::OkStatus();
  }

 private:
  static absl::StatusOr<std::unique_ptr<WritableFile>> Open(const std::string& path, int mode,
                                                            const std::string& op) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
    if (fd < 0) return Errno(errno, path, op);
    const off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) {
      const int err = errno;
      ::close(fd);
      return Errno(err, path, "seek");
    }
    return std::unique_ptr<WritableFile>(
        new PosixWritableFile(path, fd, static_cast<uint64_t>(end)));
  }
};

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : absl::StrCat(dir, "/", name);
}

}  // namespace

FileSystem& FileSystem::Default() {
  static FileSystem* fs = new PosixFileSystem();
  return *fs;
}

bool FileSystem::Exists(const std::string& path) { return Stat(path).ok(); }

absl::Status FileSystem::CreateDirectories(const std::string& path) {
  auto st = Stat(path);
  if (st.ok()) {
    if (st->is_directory) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(path,
                                                      ": cannot create directory: a file "
                                                      "is in the way"));
  }
  if (!absl::IsNotFound(st.status())) return st.status();
  const std::string parent = ParentDirectory(path);
  if (parent != path && parent != "." && parent != "/") RETURN_IF_ERROR(CreateDirectories(parent));
  ASSIGN_OR_RETURN(const bool made, CreateDirectory(path));
  (void)made;  // another process making it first is fine
  return absl::OkStatus();
}

absl::Status FileSystem::RemoveTree(const std::string& path) {
  auto st = Stat(path);
  if (absl::IsNotFound(st.status())) return absl::OkStatus();
  if (!st.ok()) return st.status();
  if (st->is_directory) {
    ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(path));
    for (const std::string& name : names) RETURN_IF_ERROR(RemoveTree(Join(path, name)));
  }
  return Remove(path);
}

std::string ParentDirectory(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

absl::Status SyncParentDirectory(FileSystem& fs, const std::string& path) {
  return fs.SyncDirectory(ParentDirectory(path));
}

absl::Status WriteFileAtomic(FileSystem& fs, const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(tmp));
  absl::Status s = file->Append(contents);
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (s.ok()) s = fs.Rename(tmp, path);
  if (!s.ok()) {
    file.reset();
    fs.Remove(tmp).IgnoreError();  // may fail as the write did; the next write replaces it
    return s;
  }
  return SyncParentDirectory(fs, path);
}

}  // namespace rlforge
