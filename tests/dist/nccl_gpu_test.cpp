// The NCCL backend at a world of one on the machine's GPU: every collective leaves the
// data as one rank has it, eagerly and replayed from a captured CUDA graph, ordered
// against the kernels around it on the issuing stream; a training step whose bucket
// sums overlap the backward inside the captured graph, or whose optimizer is ZeRO-1's
// over sharded f32 masters, trains as a step without a communicator does; a collective that never completes ends the rank within its deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/core/random.h"
#include "amber/core/stream.h"
#include "amber/data/batch.h"
#include "amber/dist/nccl/nccl_communicator.h"
#include "amber/dist/zero_shard.h"
#include "amber/train/step.h"
#include "amber/train/zero_optimizer.h"
#include "dist/testing.h"
#include "tiny_model.h"

#ifdef AMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace amber::dist {
namespace {

using testing::free_port;

std::unique_ptr<Communicator> world_of_one(double timeout_s = 60) {
  LaunchEnv env;
  env.launcher = LaunchEnv::Launcher::torchrun;
  env.master_addr = "127.0.0.1";
  env.master_port = free_port();
  return nccl_communicator(env, 0, timeout_s);
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

data::Batch batch(const std::vector<int32_t>& lengths, int vocab, uint64_t seed) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> doc;
    for (int32_t i = 0; i < lengths[d]; ++i)
      doc.push_back(static_cast<int32_t>((seed * 131 + d * 17 + static_cast<uint64_t>(i) * 7) % vocab));
    docs.push_back(doc);
  }
  return data::pack_documents(docs);
}

// Four graph-captured runs of the same steps, bf16 compute, AdamW, clipping: without a
// communicator; through NCCL at a world of one with the buckets summed during the
// backward (their forks and joins inside the graph) or after it; and ZeRO-1, its f32
// masters kept as the rank's range (the whole buffers at a world of one) and the bf16
// working copies all-gathered inside the graph. A world of one's sum is the gradient
// itself, so the weights match bit for bit at every step, and the graph is captured once.
TEST(NcclGpu, OverlappedBucketSumsAndZeroInACapturedStepTrainAsWithoutACommunicator) {
  REQUIRE_NCCL();
  const auto comm = world_of_one();
  ModelConfig c = amber::testing::tiny_model();
  c.vocab_size = 300;
  c.dim = 128;  // head_dim 32: a size the CUDA attention kernel takes
  c.mlp_hidden = 128;
  c.depth = 3;
  struct Arm {
    const char* name;
    Communicator* comm;
    bool overlap, zero;
  };
  const std::vector<Arm> arms = {{"none", nullptr, false, false},
                                 {"overlapped", comm.get(), true, false},
                                 {"after the backward", comm.get(), false, false},
                                 {"ZeRO-1", comm.get(), true, true}};
  std::vector<std::unique_ptr<LanguageModel>> models;
  std::vector<std::unique_ptr<StoreShard>> shards;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<std::unique_ptr<TrainStep>> steps;
  for (const Arm& arm : arms) {
    models.push_back(std::make_unique<LanguageModel>(c, DType::f32, Device::cuda(), DType::bf16));
    models.back()->init_weights(7);
    ParamStore& store = models.back()->store();
    if (arm.zero) {
      shards.push_back(std::make_unique<StoreShard>(store, 0, 1));
      store.keep_master_ranges(shards.back()->ranges());
      optimizers.push_back(build_sharded_optimizer(OptimizerConfig{}, store, *shards.back(), *arm.comm));
    } else {
      optimizers.push_back(build_optimizer(OptimizerConfig{}, store));
    }
    // Buckets of 20000 entries: several per buffer, some across two blocks.
    steps.push_back(std::make_unique<TrainStep>(
        *models.back(), optimizers.back().get(),
        StepOptions{.grad_clip = 0.5, .communicator = arm.comm, .overlap_gradient_sums = arm.overlap,
                    .bucket_elements = 20000, .shard = arm.zero ? shards.back().get() : nullptr}));
  }
  ASSERT_TRUE(models.back()->store().masters_sharded());
  const int runs = 6;
  std::vector<int> replays(arms.size(), 0);
  for (int s = 0; s < runs; ++s) {
    const std::vector<data::Batch> micro = {batch({100, 7, 200, 50}, c.vocab_size, 10 + s),
                                            batch({300, 57}, c.vocab_size, 20 + s)};
    const int64_t trained = micro[0].trained_tokens + micro[1].trained_tokens;
    for (size_t a = 0; a < arms.size(); ++a) {
      steps[a]->run(micro, 1.0, trained);
      replays[a] += steps[a]->replayed() ? 1 : 0;
      ASSERT_TRUE(steps[a]->read().applied) << arms[a].name;
    }
    for (size_t a = 1; a < arms.size(); ++a)
      for (size_t i = 0; i < models[0]->params().size(); ++i) {
        const Param &mine = *models[a]->params()[i], &reference = *models[0]->params()[i];
        ASSERT_EQ(host(mine.value), host(reference.value)) << arms[a].name << " step " << s << " " << mine.name;
        ASSERT_EQ(host(mine.work), host(reference.work)) << arms[a].name << " step " << s << " " << mine.name;
      }
  }
  for (size_t a = 0; a < arms.size(); ++a) EXPECT_EQ(replays[a], runs - 2) << arms[a].name;
}

#ifdef AMBER_WITH_CUDA
// The issuing stream held back by a host function that never returns: the all-reduce
// queued behind it never runs, so the deadline ends the process with the rank, the
// collective and the limit named, instead of a wait that never ends. 10 s: NCCL's
// initialisation, watched under the same deadline, must fit in it.
void stall_an_all_reduce() {
  const auto comm = world_of_one(10);
  static std::atomic<bool> release = false;
  cudaLaunchHostFunc(
      static_cast<cudaStream_t>(cuda::current_stream()),
      [](void*) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      nullptr);
  Tensor t = Tensor::zeros({1000}, DType::f32, Device::cuda());
  comm->all_reduce_sum(t);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  release = true;  // the deadline did not end the process: let it finish, and fail
  cuda::synchronize();
  std::exit(0);
}

TEST(NcclGpu, CollectiveThatNeverCompletesEndsTheRankWithinItsDeadline) {
  REQUIRE_NCCL();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts afresh, CUDA and all
  EXPECT_EXIT(stall_an_all_reduce(), ::testing::ExitedWithCode(1),
              "rank 0 of 1: all_reduce_sum \\(collective 1\\) has not completed .*\\(the limit is 10 s\\).*"
              "aborting NCCL and ending this rank");
}
#endif

}  // namespace
}  // namespace amber::dist
