// The MPI backend's collectives, run under mpirun (tests/CMakeLists.txt starts 3 ranks):
// every rank checks the values it receives against what each rank sent, with sizes that
// differ per rank where the collective allows it; and data-parallel steps whose bucket
// sums overlap the backward against steps that sum after it.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "amber/core/error.h"
#include "amber/core/random.h"
#include "amber/data/batch.h"
#include "amber/dist/mpi/mpi_communicator.h"
#include "amber/train/step.h"
#include "tiny_model.h"

namespace amber::dist {
namespace {

Communicator* comm = nullptr;

// Rank r's value at index i: distinct per rank and index, exact in every dtype tested.
double value(int r, int64_t i) { return 1000.0 * (r + 1) + static_cast<double>(i); }

TEST(MpiCommunicator, WorldMatchesTheLauncher) {
  EXPECT_EQ(comm->backend(), "mpi");
  EXPECT_GE(comm->world_size(), 2) << "run this test under mpirun -np 2 or more";
  EXPECT_GE(comm->rank(), 0);
  EXPECT_LT(comm->rank(), comm->world_size());
}

TEST(MpiCommunicator, AllReduceSumsEveryDtype) {
  const int n = comm->world_size();
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    std::vector<double> mine(5);
    for (int64_t i = 0; i < 5; ++i) mine[static_cast<size_t>(i)] = value(comm->rank(), i);
    Tensor x = Tensor::from_vector(mine, {5}).to(t);
    comm->all_reduce_sum(x);
    for (int64_t i = 0; i < 5; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += value(r, i);
      EXPECT_EQ(x.to_doubles()[static_cast<size_t>(i)], want) << dtype_name(t) << " at " << i;
    }
  }
}

TEST(MpiCommunicator, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  const int n = comm->world_size(), me = comm->rank();
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r + 1);  // blocks of unequal sizes
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> mine(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(value(me, i));
  Tensor out = Tensor::zeros({counts[static_cast<size_t>(me)]}, DType::f32);
  comm->reduce_scatter_sum(Tensor::from_vector(mine, {total}), out, counts);
  const int64_t first = me * (me + 1) / 2;
  for (int64_t i = 0; i < out.numel(); ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += value(r, first + i);
    EXPECT_EQ(out.item(i), want) << "element " << i;
  }
}

TEST(MpiCommunicator, AllGatherInPlaceAndNotConcatenatesTheBlocks) {
  const int n = comm->world_size(), me = comm->rank();
  std::vector<int64_t> counts, starts;
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    starts.push_back(total);
    counts.push_back(2 * r + 1);
    total += counts.back();
  }
  for (bool in_place : {false, true}) {
    Tensor out = Tensor::zeros({total}, DType::f64);
    const int64_t begin = starts[static_cast<size_t>(me)], end = begin + counts[static_cast<size_t>(me)];
    Tensor in = in_place ? out.slice(0, begin, end) : Tensor::zeros({end - begin}, DType::f64);
    for (int64_t i = 0; i < in.numel(); ++i) in.data<double>()[i] = value(me, i);
    comm->all_gather(in, out, counts);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i)
        EXPECT_EQ(out.item(starts[static_cast<size_t>(r)] + i), value(r, i)) << "rank " << r << " in place "
                                                                              << in_place;
  }
}

TEST(MpiCommunicator, BroadcastCopiesTheRootsTensor) {
  const int root = comm->world_size() - 1;
  Tensor x = Tensor::full({4}, comm->rank(), DType::bf16);
  comm->broadcast(x, root);
  EXPECT_EQ(x.to_doubles(), std::vector<double>(4, root));
}

TEST(MpiCommunicator, AllToAllTransposesTheBlocks) {
  const int n = comm->world_size(), me = comm->rank();
  std::vector<int64_t> mine;
  for (int j = 0; j < n; ++j) mine.insert(mine.end(), {me * 100 + j, -(me * 100 + j)});
  Tensor out = Tensor::zeros({2 * n}, DType::i64);
  comm->all_to_all(Tensor::from_vector(mine, {2 * n}), out);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(out.item(2 * i), i * 100 + me);
    EXPECT_EQ(out.item(2 * i + 1), -(i * 100 + me));
  }
}

TEST(MpiCommunicator, MismatchedBlocksAreAnErrorBeforeAnyTransfer) {
  const int n = comm->world_size();
  std::vector<int64_t> counts(static_cast<size_t>(n), 2);
  Tensor out = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(comm->reduce_scatter_sum(Tensor::zeros({2 * n}, DType::f32), out, counts), Error);
  Tensor bf = Tensor::zeros({2}, DType::bf16);
  EXPECT_THROW(comm->all_reduce_sum(bf), Error);
  comm->barrier();
}

// Several reductions in flight at once give each the sum all_reduce_sum gives, bit for
// bit (random f32 values, whose sums round, so another order of adding would show).
TEST(MpiCommunicator, StartedAllReducesSumLikeAllReduce) {
  std::vector<Tensor> started, blocking;
  for (int64_t n : {1, 1000, 70000, 3}) {
    Tensor t = Tensor::empty({n}, DType::f32);
    fill_normal(t, 11 + static_cast<uint64_t>(n), static_cast<uint64_t>(comm->rank()) << 32);
    started.push_back(t.clone());
    blocking.push_back(t);
  }
  for (Tensor& t : started) comm->all_reduce_sum_start(t);
  comm->all_reduce_sum_wait();
  for (Tensor& t : blocking) comm->all_reduce_sum(t);
  for (size_t i = 0; i < started.size(); ++i) EXPECT_EQ(started[i].to_doubles(), blocking[i].to_doubles()) << i;
}

// Each rank's own micro-batches: documents of every length from 3 on, tokens from the
// rank and the step.
std::vector<data::Batch> rank_batches(int rank, int step, int vocab) {
  std::vector<data::Batch> out;
  for (int m = 0; m < 2; ++m) {
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 6; ++d) {
      std::vector<int32_t> doc;
      for (int i = 0; i < 3 + 5 * d + rank; ++i) doc.push_back((rank * 37 + step * 11 + m * 7 + d * 3 + i * i) % vocab);
      docs.push_back(doc);
    }
    out.push_back(data::pack_documents(docs));
  }
  return out;
}

// The weights after a few data-parallel AdamW steps: the same whether each bucket's sum
// starts during the backward or after it, bit for bit, and alike on every rank.
TEST(DataParallel, OverlappedBucketSumsGiveTheWeightsOfSumsAfterTheBackward) {
  ModelConfig c = testing::tiny_model();
  c.depth = 3;
  std::vector<std::vector<double>> weights;
  for (bool overlap : {true, false}) {
    LanguageModel model(c);
    model.init_weights(9);
    OptimizerConfig oc;
    oc.lr = 1e-2;
    auto optimizer = build_optimizer(oc, model.store());
    TrainStep step(model, optimizer.get(),
                   {.grad_clip = 1.0, .communicator = comm, .overlap_gradient_sums = overlap, .bucket_elements = 900});
    for (int s = 0; s < 3; ++s) {
      const std::vector<data::Batch> batches = rank_batches(comm->rank(), s, c.vocab_size);
      Tensor tokens = Tensor::full({1}, 0.0, DType::i64);
      for (const data::Batch& b : batches) tokens.data<int64_t>()[0] += b.trained_tokens;
      comm->all_reduce_sum(tokens);
      step.run(batches, 1.0, tokens.data<int64_t>()[0]);
      ASSERT_TRUE(step.read().applied);
    }
    std::vector<double> all;
    for (const auto& p : model.params()) {
      const std::vector<double> v = p->value.to_doubles();
      all.insert(all.end(), v.begin(), v.end());
    }
    weights.push_back(all);
  }
  EXPECT_EQ(weights[0], weights[1]);
  Tensor rank0 = Tensor::from_vector(weights[0], {static_cast<int64_t>(weights[0].size())});
  comm->broadcast(rank0, 0);
  EXPECT_EQ(rank0.to_doubles(), weights[0]) << "rank " << comm->rank() << " holds other weights than rank 0";
}

}  // namespace
}  // namespace amber::dist

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::unique_ptr<amber::dist::Communicator> owner = amber::dist::mpi_communicator(60);
  amber::dist::comm = owner.get();
  // Only rank 0 prints, so that ctest shows one report; every rank's failures set its status.
  if (owner->rank() != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  return RUN_ALL_TESTS();
}
