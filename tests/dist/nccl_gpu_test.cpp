// The NCCL backend at a world of one on the machine's GPU: every collective leaves the
// data as one rank has it, eagerly and replayed from a captured CUDA graph, ordered
// against the kernels around it on the issuing stream.
#include <gtest/gtest.h>

#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/core/random.h"
#include "amber/dist/nccl/nccl_communicator.h"
#include "dist/testing.h"

namespace amber::dist {
namespace {

using testing::free_port;

std::unique_ptr<Communicator> world_of_one() {
  LaunchEnv env;
  env.launcher = LaunchEnv::Launcher::torchrun;
  env.master_addr = "127.0.0.1";
  env.master_port = free_port();
  return nccl_communicator(env, 0, 60);
}

Tensor random_on_gpu(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::f32);
  fill_normal(t, seed, 0);
  return t.to(Device::cuda());
}

std::vector<double> host(const Tensor& t) { return t.to(Device::cpu()).to_doubles(); }

#define REQUIRE_NCCL()                                               \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";           \
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL"

TEST(NcclGpu, WorldOfOneCollectivesKeepTheData) {
  REQUIRE_NCCL();
  const auto comm = world_of_one();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->world_size(), 1);
  const int64_t n = 1000;
  const Tensor a = random_on_gpu(n, 1);
  const std::vector<double> want = host(a);
  Tensor t = a.to(Device::cuda());
  comm->all_reduce_sum(t);
  EXPECT_EQ(host(t), want);
  comm->broadcast(t, 0);
  EXPECT_EQ(host(t), want);
  const std::vector<int64_t> counts = {n};
  Tensor scattered = Tensor::zeros({n}, DType::f32, Device::cuda());
  comm->reduce_scatter_sum(a, scattered, counts);
  EXPECT_EQ(host(scattered), want);
  Tensor gathered = Tensor::zeros({n}, DType::f32, Device::cuda());
  comm->all_gather(a, gathered, counts);
  EXPECT_EQ(host(gathered), want);
  Tensor exchanged = Tensor::zeros({n}, DType::f32, Device::cuda());
  comm->all_to_all(a, exchanged);
  EXPECT_EQ(host(exchanged), want);
  comm->barrier();
}

// Captured between two copies on the issuing stream, the all-reduce must read the first
// copy's result and finish before the second copy reads it, at every replay.
TEST(NcclGpu, AllReduceInACapturedGraphIsOrderedWithTheStream) {
  REQUIRE_NCCL();
  const auto comm = world_of_one();
  const int64_t n = 1 << 20;
  Tensor source = random_on_gpu(n, 2), middle = Tensor::zeros({n}, DType::f32, Device::cuda());
  Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda());
  cuda::begin_capture();
  middle.copy_from(source);
  comm->all_reduce_sum(middle);
  out.copy_from(middle);
  void* graph = cuda::end_capture();
  for (uint64_t seed = 3; seed < 6; ++seed) {
    source.copy_from(random_on_gpu(n, seed));
    cuda::launch_graph(graph);
    cuda::synchronize();
    ASSERT_EQ(host(out), host(source)) << "replay with seed " << seed;
  }
  cuda::destroy_graph(graph);
}

}  // namespace
}  // namespace amber::dist
