#include "amber/dist/data_parallel.h"

#include <algorithm>

#include "amber/core/error.h"

namespace amber::dist {

GradientBuckets::GradientBuckets(const ParamStore& store, int64_t bucket_elements) {
  AMBER_CHECK(bucket_elements > 0, "gradient buckets need a positive size, got ", bucket_elements);
  AMBER_CHECK(store.allocated(), "gradient buckets are slices of an allocated parameter store");
  const std::vector<ParamStore::Buffer>& buffers = store.buffers();
  for (auto b = buffers.rbegin(); b != buffers.rend(); ++b) {
    const int64_t n = b->grad.numel();
    for (int64_t end = n; end > 0; end -= bucket_elements)
      buckets_.push_back(b->grad.slice(0, std::max<int64_t>(0, end - bucket_elements), end));
  }
}

void GradientBuckets::all_reduce(Communicator& comm) const {
  for (Tensor bucket : buckets_) comm.all_reduce_sum(bucket);
}

}  // namespace amber::dist
