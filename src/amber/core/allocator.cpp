#include "amber/core/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "amber/core/cuda_runtime.h"
#include "amber/core/error.h"

namespace amber {
namespace {

constexpr size_t kHostAlignment = 64;  // one cache line; also AVX-512 friendly

void release_host(void* data, Device) { std::free(data); }

// A CPU step frees and allocates the same large temporaries every step. By default
// glibc maps each block of 128 KiB or more afresh and unmaps it on free, so every step
// faulted all its temporaries' pages in again (2-3% of a 25M model's step on two
// cores). Blocks up to 32 MiB (glibc's ceiling) now come from the heap, and the heap
// keeps up to 1 GiB of freed memory for the next step instead of returning it.
void keep_freed_host_memory() {
  static const bool set = (mallopt(M_MMAP_THRESHOLD, 32 << 20), mallopt(M_TRIM_THRESHOLD, 1 << 30), true);
  (void)set;
}
void release_cuda(void* data, Device device) { cuda::pool_free(data, device.index); }

}  // namespace

Storage::~Storage() {
  if (release && data) release(data, device);
}

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device) {
  auto storage = std::make_shared<Storage>();
  storage->bytes = bytes;
  storage->device = device;
  if (bytes == 0) return storage;
  if (device.is_cpu()) {
    keep_freed_host_memory();
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    storage->data = std::aligned_alloc(kHostAlignment, rounded);
    AMBER_CHECK(storage->data, "out of host memory allocating ", bytes, " bytes");
    storage->release = release_host;
  } else {
    storage->data = cuda::pool_allocate(bytes, device.index);
    storage->release = release_cuda;
  }
  return storage;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::copy(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes);
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  cuda::zero(dst, bytes);
}

}  // namespace amber
