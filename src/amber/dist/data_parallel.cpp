#include "amber/dist/data_parallel.h"

#include <algorithm>
#include <unordered_map>

#include "amber/core/error.h"

namespace amber::dist {

GradientBuckets::GradientBuckets(const ParamStore& store, int64_t bucket_elements) {
  AMBER_CHECK(bucket_elements > 0, "gradient buckets need a positive size, got ", bucket_elements);
  AMBER_CHECK(store.allocated(), "gradient buckets are slices of an allocated parameter store");
  std::unordered_map<const Param*, size_t> index;
  for (size_t i = 0; i < store.params().size(); ++i) index[store.params()[i].get()] = i;
  const std::vector<ParamStore::Buffer>& buffers = store.buffers();
  for (auto b = buffers.rbegin(); b != buffers.rend(); ++b) {
    const int64_t n = b->grad.numel();
    for (int64_t end = n; end > 0; end -= bucket_elements) {
      const int64_t begin = std::max<int64_t>(0, end - bucket_elements);
      buckets_.push_back(b->grad.slice(0, begin, end));
      size_t first = store.params().size();
      for (const Param* p : b->params)
        if (p->offset < end && p->offset + p->grad.numel() > begin) first = std::min(first, index.at(p));
      final_from_.push_back(first);
    }
  }
}

void GradientBuckets::all_reduce(Communicator& comm) const {
  for (Tensor bucket : buckets_) comm.all_reduce_sum(bucket);
}

}  // namespace amber::dist
