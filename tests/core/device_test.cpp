// Device names as configs and the CLI spell them, and the per-op GPU profiler's
// contract (bench/op_profile.h).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "amber/core/cuda_runtime.h"
#include "amber/core/device.h"
#include "amber/core/error.h"
#include "amber/core/tensor.h"
#include "amber/ops/elementwise.h"
#include "bench/op_profile.h"

namespace amber {
namespace {

TEST(Device, NamesParse) {
  EXPECT_EQ(device_from_name("cpu"), Device::cpu());
  EXPECT_EQ(device_from_name("cuda"), Device::cuda(0));
  EXPECT_EQ(device_from_name("cuda:3"), Device::cuda(3));
  // auto: the first GPU when one is visible, else the CPU.
  EXPECT_EQ(device_from_name("auto"), cuda_available() ? Device::cuda(0) : Device::cpu());
  for (const char* bad : {"gpu", "cuda:", "cuda:x", ""}) {
    try {
      device_from_name(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("auto, cpu, cuda or cuda:N"), std::string::npos) << e.what();
    }
  }
}

// A GPU profile does not record CPU ops, and a report turns profiling off.
TEST(OpProfile, GpuProfileSkipsCpuOpsAndReportStops) {
  profile::start(profile::Clock::gpu);
  EXPECT_TRUE(profile::active());
  Tensor x = Tensor::full({8}, 1.0, DType::f32);
  add_scaled(x, x, 2.0);
  EXPECT_TRUE(profile::report(1).empty());
  EXPECT_FALSE(profile::active());
}

// A host-clock profile times CPU ops by name, nested entry points inside the outer op
// only, divided by the steps.
TEST(OpProfile, HostClockTimesCpuOpsByName) {
  // Eight calls on a million elements against one on sixteen: the order of the report
  // (by time) must hold on a loaded machine and under the sanitizers, where four calls
  // against one of the same size once came out the other way.
  Tensor x = Tensor::full({1 << 20}, 1.0, DType::f32), small = Tensor::full({16}, 1.0, DType::f32);
  profile::start(profile::Clock::host);
  for (int i = 0; i < 8; ++i) add_scaled(x, x, 0.5);
  scale_into(small, small, 2.0);
  const auto rows = profile::report(2);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& [op, ms] : rows) {
    EXPECT_TRUE(op == "add_scaled" || op == "scale_into") << op;
    EXPECT_GT(ms, 0.0) << op;
  }
  EXPECT_EQ(rows[0].first, "add_scaled") << "eight large calls take longer than one small one";
  EXPECT_FALSE(profile::active());
  EXPECT_TRUE(profile::report(1).empty()) << "a report clears the records";
}

// GPU ops each get one row (nested entry points count once, in the outer op), with
// their time summed over calls.
TEST(OpProfileGpu, GpuOpsAreRecordedByName) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = Tensor::full({1 << 20}, 1.0, DType::f32).to(Device::cuda());
  profile::start();
  for (int i = 0; i < 3; ++i) add_scaled(x, x, 0.5);
  scale_into(x, x, 2.0);
  const auto rows = profile::report(1);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& [op, ms] : rows) {
    EXPECT_TRUE(op == "add_scaled" || op == "scale_into") << op;
    EXPECT_GT(ms, 0.0) << op;
  }
  EXPECT_FALSE(profile::active());
}

// Ops captured into a CUDA graph are timed at its replays: the report gives the last
// replay's time (not divided by the steps) and drops the ops run eagerly before, and the
// graph still replays after the report.
TEST(OpProfileGpu, CapturedOpsGiveTheLastReplay) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = Tensor::full({1 << 24}, 1.0, DType::f32).to(Device::cuda());
  profile::start();
  scale_into(x, x, 1.0);
  const auto eager = profile::report(1);
  ASSERT_EQ(eager.size(), 1u);
  profile::start();
  add_scaled(x, x, 0.5);
  cuda::begin_capture();
  scale_into(x, x, 2.0);
  void* graph = cuda::end_capture();
  for (int i = 0; i < 3; ++i) cuda::launch_graph(graph);
  const auto rows = profile::report(1000);
  ASSERT_EQ(rows.size(), 1u) << "the eager add_scaled was reported beside the graph's op";
  EXPECT_EQ(rows[0].first, "scale_into");
  EXPECT_GT(rows[0].second, eager[0].second / 10) << "a replay's time was divided by the steps";
  cuda::launch_graph(graph);
  cuda::synchronize();
  EXPECT_EQ(x.to(Device::cpu()).item(0), 24.0) << "x = 1.5, doubled by 4 replays";
  cuda::destroy_graph(graph);
}

// Sampled replays are averaged: a graph whose op runs twice as long as an eager call
// reports about twice that call's time, not its sum over the samples. Without a graph,
// sampling changes nothing.
TEST(OpProfileGpu, SampledReplaysAreAveraged) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = Tensor::full({1 << 24}, 1.0, DType::f32).to(Device::cuda());
  profile::start();
  for (int i = 0; i < 8; ++i) {
    scale_into(x, x, 1.0);
    profile::sample_replay();
  }
  const auto eager = profile::report(8);
  ASSERT_EQ(eager.size(), 1u);
  profile::start();
  cuda::begin_capture();
  scale_into(x, x, 1.0);
  scale_into(x, x, 1.0);
  void* graph = cuda::end_capture();
  for (int i = 0; i < 8; ++i) {
    cuda::launch_graph(graph);
    profile::sample_replay();
  }
  const auto rows = profile::report(8);
  cuda::destroy_graph(graph);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0].second, 1.2 * eager[0].second) << "eager " << eager[0].second;
  EXPECT_LT(rows[0].second, 4.0 * eager[0].second) << "eager " << eager[0].second;
}

// Without a GPU (or a build without CUDA) card sampling reports nothing, and says so.
TEST(CardState, WithoutAGpuNothingIsSampled) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  cuda::start_card_sampling(0);
  const cuda::CardState state = cuda::stop_card_sampling();
  EXPECT_FALSE(state.available);
  EXPECT_EQ(state.samples, 0);
}

// On a GPU the driver's NVML gives the SM clock, the board power and its limit while
// the card works.
TEST(CardStateGpu, SamplesClockAndPowerWhileTheCardWorks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = Tensor::full({1 << 24}, 1.0, DType::f32).to(Device::cuda());
  cuda::start_card_sampling(0);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
    for (int i = 0; i < 20; ++i) add_scaled(x, x, 0.5);
    cuda::synchronize();
  }
  const cuda::CardState state = cuda::stop_card_sampling();
  ASSERT_TRUE(state.available) << "NVML (libnvidia-ml.so.1) did not answer";
  EXPECT_GE(state.samples, 5);
  EXPECT_GT(state.sm_mhz, 100.0);
  EXPECT_GT(state.watts, 10.0);
  EXPECT_GT(state.limit_watts, 10.0);
  std::cout << "card: SM " << state.sm_mhz << " MHz, " << state.watts << " W of " << state.limit_watts << " W over "
            << state.samples << " samples\n";
  // A second sampling starts afresh.
  cuda::start_card_sampling(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const cuda::CardState again = cuda::stop_card_sampling();
  EXPECT_TRUE(again.available);
  EXPECT_LT(again.samples, state.samples);  // 100 ms of samples, not added to the 200 before
}

}  // namespace
}  // namespace amber
