#include "amber/model/kv_cache.h"

#include "amber/core/error.h"

namespace amber {

CachedStep CachedStep::packed(const std::vector<int32_t>& counts, const std::vector<int32_t>& starts,
                              Device device) {
  AMBER_CHECK(!counts.empty() && counts.size() == starts.size(), "a cached step needs one count and one start per ",
              "sequence, got ", counts.size(), " and ", starts.size());
  std::vector<int32_t> cu_q(counts.size() + 1, 0), positions, last;
  for (size_t s = 0; s < counts.size(); ++s) {
    AMBER_CHECK(counts[s] >= 1 && starts[s] >= 0, "sequence ", s, " of a cached step has ", counts[s],
                " new tokens after ", starts[s], " cached ones; each needs at least one");
    cu_q[s + 1] = cu_q[s] + counts[s];
    for (int32_t j = 0; j < counts[s]; ++j) positions.push_back(starts[s] + j);
    last.push_back(cu_q[s + 1] - 1);
  }
  const auto on_device = [&](const std::vector<int32_t>& v) {
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(device);
  };
  return {on_device(cu_q), on_device(starts), on_device(positions), on_device(last)};
}

}  // namespace amber
