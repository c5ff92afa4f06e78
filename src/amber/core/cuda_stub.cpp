// CPU-only builds: every CUDA entry point explains how to get a CUDA build.
#ifndef AMBER_WITH_CUDA
#include "amber/core/cuda_runtime.h"
#include "amber/core/error.h"

namespace amber::cuda {
namespace {
[[noreturn]] void no_cuda() {
  fail("this amber was built without CUDA; rebuild with nvcc on PATH (AMBER_CUDA=auto or ON) "
       "or run on --device cpu");
}
}  // namespace

int device_count() { return 0; }
std::string device_name(int) { no_cuda(); }
void* pool_allocate(size_t, int) { no_cuda(); }
void pool_free(void*, int) {}
void copy(void*, bool, const void*, bool, size_t) { no_cuda(); }
void zero(void*, size_t) { no_cuda(); }
void synchronize() {}
void* pinned_allocate(size_t) { no_cuda(); }
void pinned_free(void*) {}
void copy_from_pinned(void*, const void*, size_t) { no_cuda(); }
void copy_to_pinned(void*, const void*, size_t) { no_cuda(); }
void begin_capture() { no_cuda(); }
void* end_capture() { no_cuda(); }
void discard_capture() {}
void launch_graph(void*) { no_cuda(); }
void destroy_graph(void*) {}
void* create_marker() { no_cuda(); }
void destroy_marker(void*) {}
void place_marker(void*) { no_cuda(); }
void wait_for_marker(void*) {}
size_t pool_peak_bytes(int) { return 0; }
void reset_pool_peak(int) {}
void start_card_sampling(int) {}
CardState stop_card_sampling() { return {}; }
bool convert(void*, DType, const void*, DType, size_t) { no_cuda(); }
void copy_rows(void*, const int64_t*, const void*, const int64_t*, const int64_t*, int, size_t) { no_cuda(); }
void fill(void*, size_t, const void*, size_t) { no_cuda(); }

}  // namespace amber::cuda
#endif
