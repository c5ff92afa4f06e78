// Data parallel over a ParamStore: every rank runs the same model on its share of the
// step's micro-batches, then the ranks' gradients are summed in buckets, slices of the
// store's flat gradient buffers, so that every rank holds the gradient of the whole
// step. The loss was already scaled by the whole step's trained tokens (the loader
// gives every rank that count), so the sum is the step's gradient, token for token.
//
// Each bucket's sum starts as soon as the step's last backward has finished every
// parameter the bucket holds (OverlappedBuckets, dist/bucket_overlap.h), so it runs
// while the backward computes the earlier blocks; all_reduce sums them after the
// backward instead, one after another, with the same sums (docs/distributed.md, "What
// is overlapped").
#pragma once

#include <cstddef>
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
  // Per bucket, the declaration index (ParamStore::params()) of its earliest parameter:
  // the bucket is final once the backward reports every parameter from there on final
  // (GradientReady). A bucket of alignment gaps alone holds no parameter and reads
  // params().size(), final at the first report.
  const std::vector<size_t>& final_from() const { return final_from_; }
  // Sums every bucket over comm's ranks, in place, after the backward.
  void all_reduce(Communicator& comm) const;

 private:
  std::vector<Tensor> buckets_;
  std::vector<size_t> final_from_;
};

// 2^22 f32 entries, 16 MiB: large enough that a bucket's transfer time dwarfs its
// latency, small enough that the first bucket starts early in the backward.
inline constexpr int64_t kDefaultBucketElements = int64_t{1} << 22;

}  // namespace amber::dist
