// Each collective: an event on the issuing stream that the communicator's stream waits
// for, the NCCL call on that stream, and an event there that the issuing stream waits
// for; the NCCL call, and the device work it queues, under NcclWatch's deadline. Blocks
// of unequal size (reduce-scatter, all-gather) are one NCCL group of a reduce or a
// broadcast per rank, NCCL having no "v" forms. Host tensors are staged through device
// memory and waited for (a step's few host scalars, never its gradients).
#include "amber/dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "amber/core/error.h"
#include "amber/core/stream.h"
#include "amber/dist/collective_checks.h"
#include "amber/dist/mpi/mpi_communicator.h"
#include "amber/dist/nccl/nccl_watch.h"
#include "amber/dist/tcp_rendezvous.h"

namespace amber::dist {
namespace {

void check_nccl(ncclResult_t result, const char* what) {
  AMBER_CHECK(result == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(result),
              " (NCCL_DEBUG=WARN prints NCCL's own account)");
}

void check_cuda(cudaError_t result, const char* what) {
  AMBER_CHECK(result == cudaSuccess, "CUDA ", what, " failed: ", cudaGetErrorString(result));
}

ncclDataType_t nccl_type(const char* collective, DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: break;
  }
  fail(collective, ": the NCCL backend takes f32, f64, bf16, f16, i32, i64 and u8 tensors, not ", dtype_name(t));
}

char* bytes_at(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, int device, double timeout_s)
      : rank_(env.rank),
        world_(env.world_size),
        local_rank_(env.local_rank),
        device_(device),
        watch_(std::make_unique<NcclWatch>(env.rank, env.world_size, device, timeout_s)) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (env.launcher == LaunchEnv::Launcher::torchrun) {
      std::vector<uint8_t> bytes(sizeof(id));
      std::memcpy(bytes.data(), &id, sizeof(id));
      bytes = rendezvous_broadcast(env, bytes, timeout_s);
      AMBER_CHECK(bytes.size() == sizeof(id), "rendezvous: rank 0 sent ", bytes.size(), " bytes, not NCCL's ",
                  sizeof(id), "-byte id; are all ranks the same amber?");
      std::memcpy(&id, bytes.data(), sizeof(id));
    } else {
      AMBER_CHECK(mpi_available(), "rank ", rank_, " was started by ", env.launcher_name(),
                  ", whose ranks share NCCL's id over MPI, but this amber was built without MPI; launch with "
                  "torchrun-style variables (amber launch --via env) or build with libopenmpi-dev");
      bootstrap_ = mpi_communicator(timeout_s);
      Tensor bytes = Tensor::empty({static_cast<int64_t>(sizeof(id))}, DType::u8);
      std::memcpy(bytes.raw(), &id, sizeof(id));
      bootstrap_->broadcast(bytes, 0);
      std::memcpy(&id, bytes.raw(), sizeof(id));
    }
    watch_->run("ncclCommInitRank (connecting to the other ranks)", nullptr,
                [&] { check_nccl(ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank"); });
    watch_->connected(comm_);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    scratch_ = Tensor::empty({1}, DType::f32, Device::cuda(device_));
  }

  ~NcclCommunicator() override {
    watch_->run("the collectives still in flight at the end", nullptr, [&] { cudaStreamSynchronize(stream_); });
    watch_.reset();
    ncclCommDestroy(comm_);
    cudaEventDestroy(done_);
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(Tensor& tensor) override {
    const char* op = "all_reduce_sum";
    check_operand(op, tensor);
    Tensor on_device = staged(tensor);
    run(op, [&] {
      check_nccl(ncclAllReduce(on_device.raw(), on_device.raw(), static_cast<size_t>(on_device.numel()),
                               nccl_type(op, on_device.dtype()), ncclSum, comm_, stream_),
                 op);
    });
    unstage(tensor, on_device);
  }

  // The fork of `run` without its join: the communicator's stream waits for the issuing
  // stream's work so far, and the issuing stream goes on with the backward meanwhile.
  void all_reduce_sum_start(Tensor& tensor) override {
    const char* op = "all_reduce_sum_start";
    check_device(op, tensor);
    watch_->run(numbered(op), stream_, [&] {
      check_cuda(cudaEventRecord(issued_, cuda::current_stream()), op);
      check_cuda(cudaStreamWaitEvent(stream_, issued_, 0), op);
      check_nccl(ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<size_t>(tensor.numel()),
                               nccl_type(op, tensor.dtype()), ncclSum, comm_, stream_),
                 op);
    });
    started_ = true;
  }

  // The join: the communicator's stream runs its collectives in order, so one event
  // after the last covers them all.
  void all_reduce_sum_wait() override {
    if (!started_) return;
    started_ = false;
    check_cuda(cudaEventRecord(done_, stream_), "all_reduce_sum_wait");
    check_cuda(cudaStreamWaitEvent(cuda::current_stream(), done_, 0), "all_reduce_sum_wait");
  }

  void reduce_scatter_sum(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    const char* op = "reduce_scatter_sum";
    check_blocks(op, input, output, counts, rank_, world_);
    check_device(op, input);
    check_device(op, output);
    const ncclDataType_t type = nccl_type(op, input.dtype());
    run(op, [&] {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      int64_t at = 0;
      for (int r = 0; r < world_; ++r) {
        const int64_t n = counts[static_cast<size_t>(r)];
        check_nccl(ncclReduce(bytes_at(input, at), output.raw(), static_cast<size_t>(n), type, ncclSum, r, comm_,
                              stream_),
                   op);
        at += n;
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    const char* op = "all_gather";
    check_blocks(op, output, input, counts, rank_, world_);
    check_device(op, input);
    check_device(op, output);
    const ncclDataType_t type = nccl_type(op, output.dtype());
    run(op, [&] {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      int64_t at = 0;
      for (int r = 0; r < world_; ++r) {
        const int64_t n = counts[static_cast<size_t>(r)];
        check_nccl(ncclBroadcast(input.raw(), bytes_at(output, at), static_cast<size_t>(n), type, r, comm_, stream_),
                   op);
        at += n;
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  void broadcast(Tensor& tensor, int root) override {
    const char* op = "broadcast";
    check_operand(op, tensor);
    AMBER_CHECK(root >= 0 && root < world_, op, ": root ", root, " outside a world of ", world_, " ranks");
    Tensor on_device = staged(tensor);
    run(op, [&] {
      check_nccl(ncclBroadcast(on_device.raw(), on_device.raw(), on_device.bytes(), ncclUint8, root, comm_, stream_),
                 op);
    });
    unstage(tensor, on_device);
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    const char* op = "all_to_all";
    check_device(op, input);
    check_device(op, output);
    AMBER_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() && input.numel() % world_ == 0,
                op, ": input and output must have one dtype and the same number of elements, a multiple of the ",
                world_, " ranks (", input.numel(), " and ", output.numel(), ")");
    const size_t block = input.bytes() / static_cast<size_t>(world_);
    run(op, [&] {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < world_; ++r) {
        check_nccl(ncclSend(static_cast<char*>(input.raw()) + r * block, block, ncclUint8, r, comm_, stream_), op);
        check_nccl(ncclRecv(static_cast<char*>(output.raw()) + r * block, block, ncclUint8, r, comm_, stream_), op);
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  void barrier() override {
    run("barrier", [&] {
      check_nccl(ncclAllReduce(scratch_.raw(), scratch_.raw(), 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
    });
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // A step's graph, whose collectives the watch does not see launched: its device work
  // as a whole under the deadline.
  void watch(const std::string& what, const std::function<void()>& work) override {
    watch_->run(what, cuda::current_stream(), work);
  }

 private:
  void check_device(const char* collective, const Tensor& t) const {
    check_operand(collective, t);
    AMBER_CHECK(t.device().is_cuda() && t.device().index == device_, collective,
                ": the NCCL backend of GPU ", device_, " takes tensors on cuda:", device_, ", not ", t.device());
  }

  // A host tensor's device copy (the tensor itself on this GPU).
  Tensor staged(const Tensor& t) const {
    if (t.device().is_cuda()) {
      check_device("collective", t);
      return t;
    }
    return t.to(Device::cuda(device_));
  }
  void unstage(Tensor& host, const Tensor& on_device) const {
    if (host.device().is_cuda()) return;
    host.copy_from(on_device.to(Device::cpu()));
  }

  // Orders `call` (issued on the communicator's stream) after the issuing stream's work
  // and that stream's later work after it.
  template <class Call>
  void run(const char* collective, Call&& call) {
    const cudaStream_t issuing = cuda::current_stream();
    watch_->run(numbered(collective), stream_, [&] {
      check_cuda(cudaEventRecord(issued_, issuing), collective);
      check_cuda(cudaStreamWaitEvent(stream_, issued_, 0), collective);
      call();
      check_cuda(cudaEventRecord(done_, stream_), collective);
      check_cuda(cudaStreamWaitEvent(issuing, done_, 0), collective);
    });
  }

  // "all_reduce_sum (collective 12)": the collectives this rank has issued, alike on
  // every rank, so the ranks' messages point at the same one.
  std::string numbered(const char* collective) { return concat(collective, " (collective ", ++collectives_, ")"); }

  int rank_, world_, local_rank_, device_;
  std::unique_ptr<NcclWatch> watch_;
  int64_t collectives_ = 0;
  std::unique_ptr<Communicator> bootstrap_;  // MPI, kept initialised for the run
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr, done_ = nullptr;
  bool started_ = false;  // an all_reduce_sum_start not yet joined
  Tensor scratch_;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Communicator> nccl_communicator(const LaunchEnv& env, int device, double timeout_s) {
  return std::make_unique<NcclCommunicator>(env, device, timeout_s);
}

}  // namespace amber::dist
