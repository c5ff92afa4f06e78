// The MPI backend's collectives, run under mpirun (tests/CMakeLists.txt starts 3 ranks):
// every rank checks the values it receives against what each rank sent, with sizes that
// differ per rank where the collective allows it.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "amber/core/error.h"
#include "amber/dist/mpi/mpi_communicator.h"

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
