#include "amber/dist/nccl/nccl_watch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "amber/core/error.h"

namespace amber::dist {
namespace {

// One watched call: the host part is done once `issued` is set, the device part once
// `event` (recorded after the call, or none) has passed.
struct InFlight {
  std::atomic<bool> issued = false;
  cudaEvent_t event = nullptr;

  bool finished() const {
    if (!issued.load(std::memory_order_acquire)) return false;
    // An error other than "not ready" surfaces on the issuing thread's next CUDA call.
    return !event || cudaEventQuery(event) != cudaErrorNotReady;
  }
};

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

}  // namespace

NcclWatch::NcclWatch(int rank, int world_size, int device, double timeout_s)
    : rank_(rank),
      world_(world_size),
      device_(device),
      // Looks 20 times per deadline, at most once a second.
      watch_(timeout_s, std::clamp(timeout_s / 20, 0.01, 1.0),
             {.start = [this] { cudaSetDevice(device_); },
              .error = [this] { return async_error(); },
              .fail = [this](const std::string& message) { end_rank(message); }}) {}

void NcclWatch::run(const std::string& what, cudaStream_t stream, const std::function<void()>& call) {
  auto work = std::make_shared<InFlight>();
  watch_.add(
      what, [work] { return work->finished(); },
      [work] {
        if (work->event) cudaEventDestroy(work->event);
      });
  try {
    call();
  } catch (...) {
    work->issued.store(true, std::memory_order_release);  // the error propagates; nothing waits
    throw;
  }
  if (stream && !capturing(stream)) {
    // Failing here means a broken CUDA context, which the issuing thread's next call reports.
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess) {
      if (cudaEventRecord(event, stream) == cudaSuccess)
        work->event = event;
      else
        cudaEventDestroy(event);
    }
  }
  work->issued.store(true, std::memory_order_release);
}

std::string NcclWatch::async_error() const {
  const ncclComm_t comm = comm_.load();
  if (!comm) return "";
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state == ncclSuccess || state == ncclInProgress) return "";
  return concat("NCCL reported an asynchronous error, ", ncclGetErrorString(state), " (", ncclGetLastError(comm), ")");
}

void NcclWatch::end_rank(const std::string& message) {
  std::fprintf(stderr,
               "amber: error: rank %d of %d: %s: a rank hangs or died, or the link between the GPUs is stuck; "
               "aborting NCCL and ending this rank. The latest checkpoint resumes the run (--resume); "
               "train.comm_timeout_s sets the time limit\n",
               rank_, world_, message.c_str());
  std::fflush(stderr);
  // ncclCommAbort stops the collectives in flight so the GPU is left usable; it may wait
  // on a peer itself, so the process ends after a grace period whatever it does.
  if (const ncclComm_t comm = comm_.load()) {
    auto aborted = std::make_shared<std::atomic<bool>>(false);
    std::thread([comm, aborted] {
      ncclCommAbort(comm);
      aborted->store(true);
    }).detach();
    for (int i = 0; i < 100 && !aborted->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::_Exit(1);
}

}  // namespace amber::dist
