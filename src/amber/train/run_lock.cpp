#include "amber/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "amber/core/error.h"

namespace amber {
namespace fs = std::filesystem;

RunLock::RunLock(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  AMBER_CHECK(!ec && fs::is_directory(out_dir), "train.out_dir '", out_dir, "' cannot be used as the run's folder (",
              ec ? ec.message() : std::string("it is not a directory"),
              "); choose a folder this user can create and write");
  const std::string path = (fs::path(out_dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  AMBER_CHECK(fd_ >= 0, "train.out_dir '", out_dir, "' is not writable (cannot create ", path, ": ",
              std::strerror(errno), "); choose a folder this user can write");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    AMBER_CHECK(error != EWOULDBLOCK, "train.out_dir '", out_dir, "' is in use by another amber train (pid ",
                n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("unknown"),
                "); wait for it to end, or choose another train.out_dir");
    fail("cannot lock ", path, ": ", std::strerror(error));
  }
  const std::string mine = std::to_string(::getpid());
  const bool written =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, mine.data(), mine.size(), 0) == static_cast<ssize_t>(mine.size());
  if (!written) {
    const int error = errno;
    ::close(fd_);  // a constructor that throws runs no destructor
    fd_ = -1;
    fail("cannot write ", path, ": ", std::strerror(error), " (disk full?)");
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

}  // namespace amber
