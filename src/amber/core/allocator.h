// Memory for tensors: 64-byte aligned host memory, and on CUDA builds a
// stream-ordered pool (cudaMallocAsync) so a step that frees and reallocates never
// synchronises the device.
#pragma once

#include <cstddef>
#include <memory>

#include "amber/core/device.h"

namespace amber {

// One allocation. The deleter returns it to the allocator that made it; a Storage
// may also be a non-owning window into an Arena block (keep_alive holds the block).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::shared_ptr<void> keep_alive;
  void (*release)(void* data, Device device) = nullptr;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device);

// Raw bytes between devices (host<->device copies synchronise the current stream).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void zero_bytes(void* dst, Device device, size_t bytes);

}  // namespace amber
