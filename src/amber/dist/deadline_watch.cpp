#include "amber/dist/deadline_watch.h"

#include <cmath>

#include "amber/core/error.h"

namespace amber::dist {

DeadlineWatch::DeadlineWatch(double timeout_s, double poll_s, Hooks hooks)
    : timeout_s_(timeout_s),
      poll_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(poll_s))),
      hooks_(std::move(hooks)) {
  AMBER_CHECK(timeout_s > 0 && poll_s > 0, "a deadline watch needs a positive timeout and poll interval, got ",
              timeout_s, " s and ", poll_s, " s");
  thread_ = std::thread([this] { run(); });
}

DeadlineWatch::~DeadlineWatch() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Work& w : work_)
    if (w.release) w.release();
}

void DeadlineWatch::add(std::string what, std::function<bool()> finished, std::function<void()> release) {
  const std::lock_guard lock(mutex_);
  work_.push_back({std::move(what), Clock::now(), std::move(finished), std::move(release)});
}

size_t DeadlineWatch::in_flight() const {
  const std::lock_guard lock(mutex_);
  return work_.size();
}

void DeadlineWatch::run() {
  if (hooks_.start) hooks_.start();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll_, [this] { return stopping_; });
    if (stopping_) break;
    const std::string failure = look();
    if (failure.empty()) continue;
    lock.unlock();
    hooks_.fail(failure);
    return;
  }
}

// Called with the mutex held. The error hook runs first, so that a transport that has
// failed is named as the cause rather than the timeout it leads to.
std::string DeadlineWatch::look() {
  std::string error = hooks_.error ? hooks_.error() : std::string();
  std::erase_if(work_, [](Work& w) {
    if (!w.finished()) return false;
    if (w.release) w.release();
    return true;
  });
  const Work* oldest = nullptr;
  for (const Work& w : work_)
    if (!oldest || w.issued < oldest->issued) oldest = &w;
  if (!error.empty()) return oldest ? concat(error, " while ", oldest->what, " was in flight") : error;
  if (!oldest) return "";
  const double age = std::chrono::duration<double>(Clock::now() - oldest->issued).count();
  if (age <= timeout_s_) return "";
  return concat(oldest->what, " has not completed ", std::round(age * 10) / 10, " s after it was issued (the limit is ",
                timeout_s_, " s)");
}

}  // namespace amber::dist
