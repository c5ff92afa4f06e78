// Data parallel over a ParamStore: every rank runs the same model on its share of the
// step's micro-batches, then the ranks' gradients are summed in buckets, slices of the
// store's flat gradient buffers, so that every rank holds the gradient of the whole
// step. The loss was already scaled by the whole step's trained tokens (the loader
// gives every rank that count), so the sum is the step's gradient, token for token.
//
// The buckets are summed after the backward, one after another. On the CPU MPI's
// shared-memory transport takes the cores the backward would use, so there is nothing
// to overlap it with; on a GPU each bucket runs on the communicator's stream but the
// step waits for it, since the backward does not yet say when a bucket's blocks are
// done (docs/distributed.md, "What is overlapped").
#pragma once

#include <cstdint>
#include <vector>

#include "amber/dist/communicator.h"
#include "amber/model/param_store.h"

namespace amber::dist {

class GradientBuckets {
 public:
  // Buckets of at most bucket_elements gradient entries, in reverse store order (the
  // order in which the backward finishes them: the head's first, the embedding's last).
  GradientBuckets(const ParamStore& store, int64_t bucket_elements);

  const std::vector<Tensor>& buckets() const { return buckets_; }
  // Sums every bucket over comm's ranks, in place.
  void all_reduce(Communicator& comm) const;

 private:
  std::vector<Tensor> buckets_;
};

// 2^22 f32 entries, 16 MiB: large enough that a bucket's transfer time dwarfs its
// latency, small enough that the first bucket starts early in the backward.
inline constexpr int64_t kDefaultBucketElements = int64_t{1} << 22;

}  // namespace amber::dist
