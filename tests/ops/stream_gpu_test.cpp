// An op issued under a StreamScope runs on that stream: the stream is held back by a
// host function, the op's output stays unwritten while the per-thread stream is idle,
// and appears once the stream is released.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/core/device.h"
#include "amber/core/stream.h"
#include "amber/core/tensor.h"
#include "amber/ops/elementwise.h"

#ifdef AMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace amber {
namespace {

#ifdef AMBER_WITH_CUDA
// f32 values of a device tensor, copied on a stream of their own that waits for no other.
std::vector<float> peek(const Tensor& t, cudaStream_t side) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  EXPECT_EQ(cudaMemcpyAsync(host.data(), t.raw(), host.size() * sizeof(float), cudaMemcpyDeviceToHost, side),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  return host;
}

void CUDART_CB hold(void* released) {
  while (!static_cast<std::atomic<bool>*>(released)->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}
#endif

TEST(StreamGpuTest, AnOpUnderAScopedStreamRunsOnThatStream) {
#ifndef AMBER_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 4096;
  const Tensor in = Tensor::full({n}, 3.0, DType::f32).to(Device::cuda());
  Tensor out = Tensor::full({n}, 0.0, DType::f32).to(Device::cuda());
  cuda::synchronize();
  cudaStream_t user = nullptr, side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  std::atomic<bool> released{false};
  ASSERT_EQ(cudaLaunchHostFunc(user, hold, &released), cudaSuccess);
  {
    const cuda::StreamScope scope(user);
    EXPECT_EQ(cuda::current_stream(), user);
    scale_into(out, in, 2.0);
  }
  // Expectations only until the release: the held stream must be let go on every path.
  EXPECT_EQ(cuda::current_stream(), cudaStreamPerThread);
  EXPECT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(user), cudaErrorNotReady) << "the scoped stream has nothing queued";
  EXPECT_EQ(peek(out, side)[0], 0.0f) << "the op ran before its stream was released";
  released = true;
  ASSERT_EQ(cudaStreamSynchronize(user), cudaSuccess);
  const std::vector<float> done = peek(out, side);
  EXPECT_EQ(done[0], 6.0f);
  EXPECT_EQ(done[n - 1], 6.0f);
  cudaStreamDestroy(side);
  cudaStreamDestroy(user);
#endif
}

}  // namespace
}  // namespace amber
