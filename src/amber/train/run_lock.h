// RunLock: one training run owns its out_dir. It holds an exclusive flock(2) on
// <out_dir>/.lock for its lifetime and writes its pid there, so a second run into the
// same folder is refused at start, naming the holder. The kernel drops the lock when
// the process ends in any way (exit, crash, kill -9), so a stale file never blocks.
#pragma once

#include <string>

namespace amber {

class RunLock {
 public:
  // Creates out_dir if needed and takes its lock; an Error names the folder (and the
  // holder's pid) when the folder cannot be written or another run holds it.
  explicit RunLock(const std::string& out_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace amber
