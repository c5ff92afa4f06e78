// The cuBLASLt handle and workspace of this host thread on the current device, shared by
// the products that call cuBLASLt (gemm.cpp, fp8_gemm.cpp): each host thread launches on
// its own stream (core/stream.h), so sharing a workspace across threads would race.
#pragma once

#include <cublasLt.h>

#include <cstddef>

namespace amber::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

struct LtHandle {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kLtWorkspaceBytes
};
// Created at the thread's first product on the device, for the life of the thread.
const LtHandle& lt_handle();

}  // namespace amber::cuda
