// The few CUDA runtime calls the core needs, declared here so that CPU-only builds
// link against stubs that explain how to get a CUDA build.
#pragma once

#include <cstddef>
#include <string>

#include "amber/core/dtype.h"

namespace amber::cuda {

int device_count();
// The device's product name as the driver reports it ("NVIDIA H100 80GB HBM3").
std::string device_name(int device);
void* pool_allocate(size_t bytes, int device);
void pool_free(void* data, int device);
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes);
void zero(void* dst, size_t bytes);
void synchronize();
// Page-locked host memory: a copy between it and the device is queued without waiting,
// and a captured graph copies again at every replay.
void* pinned_allocate(size_t bytes);
void pinned_free(void* data);
void copy_from_pinned(void* device_dst, const void* pinned_src, size_t bytes);
void copy_to_pinned(void* pinned_dst, const void* device_src, size_t bytes);
// Capture of the calling thread's stream into a CUDA graph: the work issued between
// begin_capture and end_capture is recorded, not run; end_capture returns the
// instantiated graph, which launch_graph replays on that stream.
void begin_capture();
void* end_capture();
// Ends a capture that failed part-way, dropping what it recorded.
void discard_capture();
void launch_graph(void* graph);
void destroy_graph(void* graph);
// A marker in the calling thread's stream: place_marker records the point the work
// queued so far has reached (while capturing, a node that records it at every replay);
// wait_for_marker blocks the host until the stream has passed the marker's last placing
// (at once if it was never placed). Lets the host reuse a buffer that queued work reads
// without waiting for the rest of that work.
void* create_marker();
void destroy_marker(void* marker);
void place_marker(void* marker);
void wait_for_marker(void* marker);
// Bytes allocated from the device's memory pool at most since the last reset (in use,
// like PyTorch's max_memory_allocated; a reset starts again from the bytes in use now),
// plus the peak of the graph memory pool (replayed graphs' temporaries): an upper
// bound when both pools are in use.
size_t pool_peak_bytes(int device);
void reset_pool_peak(int device);
// Element conversion on the device between f32, bf16 and f16 (round to nearest even);
// returns false for other pairs, which the caller converts through the host.
bool convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n);
// A same-dtype copy on one device between two views of `shape` (ndim <= kMaxDims,
// strides in elements) whose last dimension is contiguous in both, such as the heads
// of a stacked projection; no host synchronisation.
void copy_rows(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
               const int64_t* shape, int ndim, size_t element_bytes);
// n elements of `element_bytes` (1, 2, 4 or 8) on the device set to the bit pattern
// at `element` (host memory), without a host synchronisation.
void fill(void* dst, size_t element_bytes, const void* element, size_t n);

// What the card ran at between start_card_sampling and stop_card_sampling: the mean SM
// clock and board power of samples taken every 20 ms by a background thread, and the
// power limit the driver enforces. Read through NVML, loaded at run time from the
// driver; `available` is false where it is absent (then the rest is 0). One sampling
// runs at a time.
struct CardState {
  bool available = false;
  int samples = 0;
  double sm_mhz = 0, watts = 0, limit_watts = 0;
};
void start_card_sampling(int device);
CardState stop_card_sampling();

}  // namespace amber::cuda
