// What the products that call cuBLASLt share (gemm.cpp, fp8_gemm.cpp): the handle and
// workspace of this host thread on the current device (each host thread launches on its
// own stream, core/stream.h, so sharing a workspace across threads would race), and the
// owner of a call's descriptors.
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

// Owns the descriptors of one call, so every error path releases them.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace amber::cuda
