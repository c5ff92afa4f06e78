#include "amber/core/stream.h"

namespace amber::cuda {
namespace {

// Null means the per-thread default stream, so the thread-local needs no dynamic
// initialisation.
thread_local Stream scoped = nullptr;

}  // namespace

Stream current_stream() { return scoped ? scoped : per_thread_stream(); }

Stream exchange_current_stream(Stream stream) {
  const Stream previous = scoped;
  scoped = stream;
  return previous;
}

}  // namespace amber::cuda
