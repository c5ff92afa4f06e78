// NcclWatch: the NCCL backend's deadline (train.comm_timeout_s). NCCL itself waits
// forever for a peer that hangs or died, on the host (connecting) or on the GPU (a
// collective's kernel), so every NCCL call and the device work it queues are watched
// by a DeadlineWatch thread that also polls the communicator's asynchronous error. On
// a timeout or an error it prints a message naming this rank and the collective or step,
// aborts the communicator (ncclCommAbort) and ends the process, as the MPI backend does.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <string>

#include "amber/dist/deadline_watch.h"

namespace amber::dist {

class NcclWatch {
 public:
  NcclWatch(int rank, int world_size, int device, double timeout_s);

  // From then on the communicator's asynchronous errors are polled, and a failure aborts it.
  void connected(ncclComm_t comm) { comm_.store(comm); }
  // Runs `call` (calls into NCCL and CUDA, which may block the host) under the deadline,
  // named `what`, and after it the device work queued on `stream` so far (unless
  // `stream` is null or being captured: a captured graph's work is watched where the
  // graph is launched).
  void run(const std::string& what, cudaStream_t stream, const std::function<void()>& call);

 private:
  [[noreturn]] void end_rank(const std::string& message);
  std::string async_error() const;

  int rank_, world_, device_;
  std::atomic<ncclComm_t> comm_{nullptr};
  DeadlineWatch watch_;  // last: its thread stops before the rest goes
};

}  // namespace amber::dist
