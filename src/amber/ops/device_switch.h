// The one runtime switch inside an op entry point: the tensor's device. In a
// CPU-only build the CUDA branch becomes an error that says how to get CUDA.
#pragma once

#include <initializer_list>
#include <span>

#include "amber/core/op_hook.h"
#include "amber/core/tensor.h"

namespace amber::ops {

// Every defined tensor of an op lives on one device; returns that device.
inline Device common_device(const char* op, std::span<const Tensor* const> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    AMBER_CHECK(t->device() == first->device(), op, ": tensors on different devices (",
                first->device(), " and ", t->device(), "); move them to one device first");
  }
  return first ? first->device() : Device::cpu();
}

inline Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  return common_device(op, std::span<const Tensor* const>(tensors.begin(), tensors.size()));
}

[[noreturn]] inline void no_cuda_build(const char* op) {
  fail(op, ": the tensors are on a GPU but this amber was built without CUDA; rebuild with nvcc on "
           "PATH (AMBER_CUDA=auto or ON) or run on --device cpu");
}

}  // namespace amber::ops

// AMBER_ON_DEVICE(device, op, cuda_call, cpu_call): runs cuda_call for a GPU device
// (only in CUDA builds, so CPU-only builds never reference a CUDA symbol), else
// cpu_call, bracketed as op `op`'s work for an installed op hook (core/op_hook.h: the
// tools' profiler).
#ifdef AMBER_WITH_CUDA
#define AMBER_ON_DEVICE(device, op, cuda_call, cpu_call)            \
  do {                                                              \
    const bool on_gpu_ = (device).is_cuda();                        \
    const ::amber::OpScope op_scope_(op, /*on_host=*/!on_gpu_);     \
    if (on_gpu_) {                                                  \
      cuda_call;                                                    \
    } else {                                                        \
      cpu_call;                                                     \
    }                                                               \
  } while (0)
#else
#define AMBER_ON_DEVICE(device, op, cuda_call, cpu_call)           \
  do {                                                             \
    if ((device).is_cuda()) ::amber::ops::no_cuda_build(op);       \
    const ::amber::OpScope op_scope_(op, /*on_host=*/true);        \
    cpu_call;                                                      \
  } while (0)
#endif
