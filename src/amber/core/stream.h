// The CUDA stream that this thread's ops, copies, fills, cuBLASLt products, events and
// graph captures are issued to. It is CUDA's per-thread default stream unless a
// StreamScope names another for a region (a communication stream overlapping the
// backward, a test's own stream), so the step and its graph capture run on one stream
// as they always did. CPU-only builds compile this too: the handle is opaque here.
#pragma once

// cudaStream_t is a pointer to this struct; declaring it here keeps CUDA's headers out.
struct CUstream_st;

namespace amber::cuda {

// cudaStream_t, in CPU-only builds too.
using Stream = CUstream_st*;

// CUDA's cudaStreamPerThread: the runtime fixes its handle at 0x2.
inline Stream per_thread_stream() { return reinterpret_cast<Stream>(0x2); }

// The stream this thread issues to now.
Stream current_stream();
// Makes `stream` this thread's (null: the per-thread default) and returns the one before.
Stream exchange_current_stream(Stream stream);

// Issues this thread's work to `stream` until the scope ends, then to the stream
// before it; scopes nest. A null stream selects the per-thread default (not CUDA's
// legacy stream 0).
class StreamScope {
 public:
  explicit StreamScope(Stream stream) : previous_(exchange_current_stream(stream)) {}
  ~StreamScope() { exchange_current_stream(previous_); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  Stream previous_;
};

}  // namespace amber::cuda
