// Each collective is MPI's non-blocking form, polled until it completes or its deadline
// passes (an overlapped all-reduce's from when all_reduce_sum_wait reaches it): a
// blocking MPI call waits forever for a rank that hangs, and Open MPI's mpirun ends a
// job only when a rank exits. Polling sleeps between tests, so ranks that share cores
// (mpirun --oversubscribe) leave them to the ranks still computing. Rank 0 knows which
// collective every rank reached (MpiArrivals) and reports first: the other ranks'
// deadline is half as long again, so the error names the rank that hangs.
#include "amber/dist/mpi/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "amber/core/error.h"
#include "amber/dist/collective_checks.h"
#include "amber/dist/mpi/mpi_arrivals.h"

namespace amber::dist {
namespace {

MPI_Datatype reduce_type(const char* collective, DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: break;
  }
  fail(collective, ": the MPI backend sums f32, f64, i32 and i64 tensors, not ", dtype_name(t));
}

int mpi_count(const char* collective, int64_t count) {
  AMBER_CHECK(count <= INT_MAX, collective, ": ", count, " elements exceed MPI's int count; split the tensor");
  return static_cast<int>(count);
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_(timeout_s) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Only the thread that made the communicator calls MPI (the loader's thread never does).
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns_mpi_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
    arrivals_ = std::make_unique<MpiArrivals>(rank_, world_);
  }
  // MPI_Finalize waits for every rank, so a rank leaving on an error would wait there
  // for ranks that wait for it in a collective. Without it, the rank exits with its
  // error and status 1, and mpirun then ends the others.
  ~MpiCommunicator() override {
    if (!owns_mpi_ || std::uncaught_exceptions() > 0) return;
    arrivals_->close(timeout_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(Tensor& tensor) override {
    const char* op = "all_reduce_sum";
    check_cpu(op, tensor);
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, tensor.raw(), mpi_count(op, tensor.numel()), reduce_type(op, tensor.dtype()),
                   MPI_SUM, MPI_COMM_WORLD, &r);
    wait(op, r);
  }

  // The same MPI_Iallreduce as all_reduce_sum's, so the sum is the same. Each start also
  // tests the reductions started before it: Open MPI advances a non-blocking collective
  // only inside MPI calls, and the backward between two starts makes none.
  void all_reduce_sum_start(Tensor& tensor) override {
    const char* op = "all_reduce_sum_start";
    check_cpu(op, tensor);
    Started s;
    MPI_Iallreduce(MPI_IN_PLACE, tensor.raw(), mpi_count(op, tensor.numel()), reduce_type(op, tensor.dtype()),
                   MPI_SUM, MPI_COMM_WORLD, &s.request);
    s.number = enter();
    for (Started& before : started_) {
      int done = 0;
      MPI_Test(&before.request, &done, MPI_STATUS_IGNORE);
    }
    started_.push_back(s);
  }

  void all_reduce_sum_wait() override {
    for (Started& s : started_) wait("all_reduce_sum_start", s.request, s.number);
    started_.clear();
  }

  void reduce_scatter_sum(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    const char* op = "reduce_scatter_sum";
    check_blocks(op, input, output, counts, rank_, world_);
    check_cpu(op, input);
    check_cpu(op, output);
    const std::vector<int> c = int_counts(op, counts);
    MPI_Request r;
    MPI_Ireduce_scatter(input.raw(), output.raw(), c.data(), reduce_type(op, input.dtype()), MPI_SUM,
                        MPI_COMM_WORLD, &r);
    wait(op, r);
  }

  void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    const char* op = "all_gather";
    check_blocks(op, output, input, counts, rank_, world_);
    check_cpu(op, input);
    check_cpu(op, output);
    // As bytes, so that any dtype gathers.
    const int64_t size = static_cast<int64_t>(dtype_size(output.dtype()));
    std::vector<int64_t> bytes(counts.begin(), counts.end());
    for (int64_t& b : bytes) b *= size;
    const std::vector<int> c = int_counts(op, bytes);
    std::vector<int> displacements(c.size(), 0);
    for (size_t i = 1; i < c.size(); ++i) displacements[i] = displacements[i - 1] + c[i - 1];
    const bool in_place = static_cast<char*>(input.raw()) == static_cast<char*>(output.raw()) +
                                                                 displacements[static_cast<size_t>(rank_)];
    MPI_Request r;
    MPI_Iallgatherv(in_place ? MPI_IN_PLACE : input.raw(), c[static_cast<size_t>(rank_)], MPI_BYTE, output.raw(),
                    c.data(), displacements.data(), MPI_BYTE, MPI_COMM_WORLD, &r);
    wait(op, r);
  }

  void broadcast(Tensor& tensor, int root) override {
    const char* op = "broadcast";
    check_cpu(op, tensor);
    AMBER_CHECK(root >= 0 && root < world_, op, ": root ", root, " outside a world of ", world_, " ranks");
    MPI_Request r;
    MPI_Ibcast(tensor.raw(), mpi_count(op, static_cast<int64_t>(tensor.bytes())), MPI_BYTE, root, MPI_COMM_WORLD, &r);
    wait(op, r);
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    const char* op = "all_to_all";
    check_cpu(op, input);
    check_cpu(op, output);
    AMBER_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() && input.numel() % world_ == 0,
                op, ": input and output must have one dtype and the same number of elements, a multiple of the ",
                world_, " ranks (", input.numel(), " and ", output.numel(), ")");
    const int64_t block = static_cast<int64_t>(input.bytes()) / world_;
    MPI_Request r;
    MPI_Ialltoall(input.raw(), mpi_count(op, block), MPI_BYTE, output.raw(), mpi_count(op, block), MPI_BYTE,
                  MPI_COMM_WORLD, &r);
    wait(op, r);
  }

  void barrier() override {
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    wait("barrier", r);
  }

 private:
  static void check_cpu(const char* collective, const Tensor& t) {
    check_operand(collective, t);
    AMBER_CHECK(t.device().is_cpu(), collective, ": the MPI backend takes CPU tensors, not ", t.device());
  }

  static std::vector<int> int_counts(const char* collective, std::span<const int64_t> counts) {
    std::vector<int> c;
    for (int64_t n : counts) c.push_back(mpi_count(collective, n));
    return c;
  }

  // Numbers the collective just issued and tells rank 0 of it.
  int64_t enter() {
    const int64_t number = ++collectives_;
    arrivals_->enter(number);
    arrivals_->poll();  // at every collective, so that rank 0's arrivals never pile up
    return number;
  }

  void wait(const char* collective, MPI_Request& request) { wait(collective, request, enter()); }

  // Polls the request of collective `number`; a first stretch of tight polls keeps short
  // collectives fast, then each test is followed by a sleep.
  void wait(const char* collective, MPI_Request& request, int64_t number) {
    using Clock = std::chrono::steady_clock;
    const double limit = rank_ == 0 ? timeout_ : 1.5 * timeout_;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      arrivals_->poll();
      arrivals_->still_in(number);
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (Clock::now() > deadline) break;
    }
    std::string culprit;
    if (rank_ != 0) {
      culprit = "rank 0, which names the ranks that did not arrive, has not reported: rank 0 hangs or died";
    } else if (const std::string missing = arrivals_->missing(number, 3.0); !missing.empty()) {
      culprit = concat(missing, ": that rank hangs or died");
    } else {
      culprit = "every rank reached it, but MPI did not complete it: the transport between the ranks is stuck";
    }
    std::fprintf(stderr,
                 "amber: error: rank %d of %d waited more than %g s in %s (collective %lld): %s; ending every "
                 "rank. The latest checkpoint resumes the run (--resume); train.comm_timeout_s sets this limit\n",
                 rank_, world_, limit, collective, static_cast<long long>(number), culprit.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  double timeout_;
  int rank_ = 0, world_ = 1, local_rank_ = 0;
  bool owns_mpi_ = false;
  int64_t collectives_ = 0;  // issued so far, alike on every rank
  std::unique_ptr<MpiArrivals> arrivals_;
  struct Started {
    MPI_Request request = MPI_REQUEST_NULL;
    int64_t number = 0;
  };
  std::vector<Started> started_;  // all_reduce_sum_start's, not yet waited for
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> mpi_communicator(double timeout_s) {
  return std::make_unique<MpiCommunicator>(timeout_s);
}

}  // namespace amber::dist
