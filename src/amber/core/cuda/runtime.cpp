// The CUDA side of the core: a stream-ordered memory pool per device (allocations
// and frees are ordered on the stream, never synchronising), copies and fills.
#include <cuda_runtime.h>

#include "amber/core/cuda_runtime.h"
#include "amber/core/error.h"
#include "amber/core/stream.h"

namespace amber::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  AMBER_CHECK(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
}

// Keep freed memory in the pool instead of returning it to the driver at every
// synchronisation, so a steady-state step never calls into the driver allocator.
void keep_pool_memory(int device) {
  static bool configured[64] = {};
  if (configured[device]) return;
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute");
  configured[device] = true;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

void* pool_allocate(size_t bytes, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  keep_pool_memory(device);
  void* data = nullptr;
  const cudaError_t status = cudaMallocAsync(&data, bytes, current_stream());
  AMBER_CHECK(status == cudaSuccess, "out of GPU memory on cuda:", device, " allocating ", bytes,
              " bytes (", cudaGetErrorString(status),
              "); lower the micro-batch token budget or enable recompute");
  return data;
}

void pool_free(void* data, int device) {
  cudaSetDevice(device);
  cudaFreeAsync(data, current_stream());
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) {
  const cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice
                                                             : cudaMemcpyHostToDevice)
                                            : cudaMemcpyDeviceToHost;
  check(cudaMemcpyAsync(dst, src, bytes, kind, current_stream()), "cudaMemcpyAsync");
  if (!dst_on_device || !src_on_device) check(cudaStreamSynchronize(current_stream()), "copy");
}

void zero(void* dst, size_t bytes) {
  check(cudaMemsetAsync(dst, 0, bytes, current_stream()), "cudaMemsetAsync");
}

size_t pool_peak_bytes(int device) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  uint64_t bytes = 0, graph_bytes = 0;
  check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bytes), "cudaMemPoolGetAttribute");
  // A replayed graph's temporaries come from the graph memory pool, not the default one.
  check(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &graph_bytes),
        "cudaDeviceGetGraphMemAttribute");
  return static_cast<size_t>(bytes + graph_bytes);
}

void reset_pool_peak(int device) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute");
  check(cudaDeviceSetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &zero), "cudaDeviceSetGraphMemAttribute");
}

void synchronize() { check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize"); }

void* pinned_allocate(size_t bytes) {
  void* data = nullptr;
  check(cudaMallocHost(&data, bytes), "cudaMallocHost");
  return data;
}

void pinned_free(void* data) { cudaFreeHost(data); }

void copy_from_pinned(void* device_dst, const void* pinned_src, size_t bytes) {
  check(cudaMemcpyAsync(device_dst, pinned_src, bytes, cudaMemcpyHostToDevice, current_stream()),
        "cudaMemcpyAsync");
}

void copy_to_pinned(void* pinned_dst, const void* device_src, size_t bytes) {
  check(cudaMemcpyAsync(pinned_dst, device_src, bytes, cudaMemcpyDeviceToHost, current_stream()),
        "cudaMemcpyAsync");
}

void begin_capture() {
  check(cudaStreamBeginCapture(current_stream(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

void* end_capture() {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(current_stream(), &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(status, "cudaGraphInstantiate");
  return exec;
}

void discard_capture() {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(current_stream(), &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

void launch_graph(void* graph) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), current_stream()), "cudaGraphLaunch");
}

void destroy_graph(void* graph) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)); }

void* create_marker() {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}

void destroy_marker(void* marker) { cudaEventDestroy(static_cast<cudaEvent_t>(marker)); }

void place_marker(void* marker) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(current_stream(), &capture), "cudaStreamIsCapturing");
  // While capturing, a plain record only orders streams; an external one is a node.
  const unsigned flags = capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : 0;
  check(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(marker), current_stream(), flags),
        "cudaEventRecordWithFlags");
}

void wait_for_marker(void* marker) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(marker)), "cudaEventSynchronize");
}

}  // namespace amber::cuda
