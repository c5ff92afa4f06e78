// DeadlineWatch: a thread beside the run that watches work in flight (a collective, a
// step's graph, a communicator's set-up) and ends the rank when one has not finished
// within the deadline or when the transport reports an error, so that a rank waiting
// for a peer that hangs or died says so instead of waiting forever. It knows nothing of
// NCCL or CUDA: the backend says what "finished" means (an event passed) and what an
// error is (NCCL's asynchronous error), which lets the CPU tests drive it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace amber::dist {

class DeadlineWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    // Runs first on the watch's thread (a GPU backend makes its device current there).
    std::function<void()> start;
    // Polled on the watch's thread: an error that ends the rank, "" while there is none.
    std::function<std::string()> error;
    // Called once, on the watch's thread, with what went wrong; the watch then stops. The
    // backends print it, abort the transport and end the process.
    std::function<void(const std::string& message)> fail;
  };

  // Work older than timeout_s fails; the thread looks every poll_s seconds.
  DeadlineWatch(double timeout_s, double poll_s, Hooks hooks);
  ~DeadlineWatch();
  DeadlineWatch(const DeadlineWatch&) = delete;
  DeadlineWatch& operator=(const DeadlineWatch&) = delete;

  // Watches work issued now under the name `what` ("all_reduce_sum (collective 12)")
  // until `finished` (polled on the watch's thread) returns true; `release` (may be
  // empty) runs once when it has, or when the watch ends.
  void add(std::string what, std::function<bool()> finished, std::function<void()> release = {});
  // The work still watched.
  size_t in_flight() const;
  double timeout_s() const { return timeout_s_; }

 private:
  struct Work {
    std::string what;
    Clock::time_point issued;
    std::function<bool()> finished;
    std::function<void()> release;
  };
  void run();
  // One look at the work: the message of a failure, "" when there is none.
  std::string look();

  double timeout_s_;
  Clock::duration poll_;
  Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Work> work_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace amber::dist
