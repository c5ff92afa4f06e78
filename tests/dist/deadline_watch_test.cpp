// The deadline beside the NCCL backend, driven on the CPU: work that finishes is
// forgotten (and released), work that does not fails the rank once its deadline passes,
// naming it, and a transport error fails it at once, naming the work then in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "amber/dist/deadline_watch.h"

namespace amber::dist {
namespace {

using namespace std::chrono_literals;

// The hooks of a watch whose failure a test waits for.
struct Failure {
  std::promise<std::string> message;
  std::atomic<int> calls = 0;
  DeadlineWatch::Hooks hooks(std::function<std::string()> error = {}) {
    return {{}, std::move(error), [this](const std::string& m) {
              if (calls++ == 0) message.set_value(m);
            }};
  }
};

TEST(DeadlineWatch, FinishedWorkIsReleasedAndNeverFails) {
  Failure failure;
  std::atomic<bool> done = false;
  std::atomic<int> released = 0;
  {
    DeadlineWatch watch(0.3, 0.01, failure.hooks());
    watch.add("all_reduce_sum (collective 1)", [&] { return done.load(); }, [&] { ++released; });
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(watch.in_flight(), 1u);
    done = true;
    for (int i = 0; i < 200 && watch.in_flight() > 0; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(watch.in_flight(), 0u);
    EXPECT_EQ(released, 1);
    std::this_thread::sleep_for(400ms);  // past the deadline of the finished work
  }
  EXPECT_EQ(failure.calls, 0);
  EXPECT_EQ(released, 1);
}

TEST(DeadlineWatch, WorkPastItsDeadlineFailsOnceNamingIt) {
  Failure failure;
  std::future<std::string> message = failure.message.get_future();
  std::atomic<int> released = 0;
  const auto start = DeadlineWatch::Clock::now();
  {
    DeadlineWatch watch(0.2, 0.01, failure.hooks());
    watch.add("step 3's graph", [] { return true; });
    watch.add("all_reduce_sum (collective 7)", [] { return false; }, [&] { ++released; });
    ASSERT_EQ(message.wait_for(5s), std::future_status::ready);
    const double waited = std::chrono::duration<double>(DeadlineWatch::Clock::now() - start).count();
    EXPECT_GE(waited, 0.2);
    EXPECT_LT(waited, 2.0);
    const std::string m = message.get();
    EXPECT_NE(m.find("all_reduce_sum (collective 7) has not completed"), std::string::npos) << m;
    EXPECT_NE(m.find("the limit is 0.2 s"), std::string::npos) << m;
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(failure.calls, 1) << "the watch goes on after failing";
  }
  EXPECT_EQ(released, 1) << "the watch's end releases the work it still held";
}

TEST(DeadlineWatch, TransportErrorFailsAtOnceNamingTheOldestWorkInFlight) {
  Failure failure;
  std::future<std::string> message = failure.message.get_future();
  std::atomic<bool> broken = false;
  DeadlineWatch watch(60, 0.01,
                      failure.hooks([&] { return broken ? std::string("NCCL reported a remote error") : ""; }));
  watch.add("broadcast (collective 2)", [] { return false; });
  std::this_thread::sleep_for(20ms);
  watch.add("barrier (collective 3)", [] { return false; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(failure.calls, 0);
  broken = true;
  ASSERT_EQ(message.wait_for(5s), std::future_status::ready) << "a 60 s deadline, yet the error ends it at once";
  EXPECT_EQ(message.get(), "NCCL reported a remote error while broadcast (collective 2) was in flight");
}

}  // namespace
}  // namespace amber::dist
