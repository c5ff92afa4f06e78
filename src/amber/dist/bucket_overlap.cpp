#include "amber/dist/bucket_overlap.h"

#include "amber/core/error.h"

namespace amber::dist {

OverlappedBuckets::OverlappedBuckets(const GradientBuckets& buckets, Communicator& comm)
    : buckets_(buckets), comm_(comm), is_started_(buckets.buckets().size(), false) {}

void OverlappedBuckets::arm() {
  is_started_.assign(is_started_.size(), false);
  started_.clear();
}

void OverlappedBuckets::gradients_final(size_t first) {
  const std::vector<size_t>& final_from = buckets_.final_from();
  for (size_t i = 0; i < final_from.size(); ++i) {
    if (is_started_[i] || final_from[i] < first) continue;
    Tensor bucket = buckets_.buckets()[i];
    comm_.all_reduce_sum_start(bucket);
    is_started_[i] = true;
    started_.push_back(i);
  }
}

void OverlappedBuckets::finish() {
  comm_.all_reduce_sum_wait();
  // The backward ends by reporting every parameter final, so a bucket not started means
  // a backward that did not report: its gradients would go unsummed.
  AMBER_CHECK(started_.size() == is_started_.size(), "data parallel: the backward reported ", started_.size(),
              " of ", is_started_.size(), " gradient buckets final; every bucket must be summed before the update");
}

}  // namespace amber::dist
