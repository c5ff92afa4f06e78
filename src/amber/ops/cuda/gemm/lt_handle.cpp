#include "amber/ops/cuda/gemm/lt_handle.h"

#include <cuda_runtime.h>

#include <map>

#include "amber/core/error.h"

namespace amber::cuda {

const LtHandle& lt_handle() {
  thread_local std::map<int, LtHandle> handles;
  int device = 0;
  cudaGetDevice(&device);
  LtHandle& h = handles[device];
  if (!h.handle) {
    AMBER_CHECK(cublasLtCreate(&h.handle) == CUBLAS_STATUS_SUCCESS, "cuBLASLt: cublasLtCreate failed");
    // Allocated once for the life of the thread; the pool would also serve it, but a
    // fixed buffer keeps the steady state free of allocator calls.
    AMBER_CHECK(cudaMalloc(&h.workspace, kLtWorkspaceBytes) == cudaSuccess, "cuBLASLt: cannot allocate the ",
                kLtWorkspaceBytes, "-byte workspace");
  }
  return h;
}

}  // namespace amber::cuda
