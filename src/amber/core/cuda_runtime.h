// The few CUDA runtime calls the core needs, declared here so that CPU-only builds
// link against stubs that explain how to get a CUDA build.
#pragma once

#include <cstddef>

namespace amber::cuda {

int device_count();
void* pool_allocate(size_t bytes, int device);
void pool_free(void* data, int device);
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes);
void zero(void* dst, size_t bytes);
void synchronize();

}  // namespace amber::cuda
