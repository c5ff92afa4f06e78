#include <gtest/gtest.h>

#include <numeric>

#include "amber/dist/zero_shard.h"
#include "amber/model/language_model.h"
#include "tiny_model.h"

namespace amber::dist {
namespace {

// Every rank's ranges: whole parameters, together the whole buffer, each parameter
// owned by the rank whose range holds it, and no rank with more than its share plus
// the largest parameter of the buffer.
TEST(StoreShard, RangesAreWholeParametersCoveringEachBufferInBalance) {
  ModelConfig config = testing::tiny_model();
  config.depth = 5;
  const LanguageModel model(config, DType::f32, Device::cpu(), DType::f32);
  const ParamStore& store = model.store();
  for (int world : {1, 2, 3, 7}) {
    std::vector<StoreShard> shards;
    for (int r = 0; r < world; ++r) shards.emplace_back(store, r, world);
    for (size_t b = 0; b < store.buffers().size(); ++b) {
      const ParamStore::Buffer& buffer = store.buffers()[b];
      const std::vector<int64_t>& counts = shards[0].counts(static_cast<int>(b));
      ASSERT_EQ(static_cast<int>(counts.size()), world);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), buffer.value.numel());
      int64_t largest = 0;
      for (const Param* p : buffer.params) largest = std::max(largest, p->value.numel());
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(shards[static_cast<size_t>(r)].counts(static_cast<int>(b)), counts) << "ranks must agree";
        EXPECT_LE(counts[static_cast<size_t>(r)], buffer.value.numel() / world + largest + ParamStore::kAlignment)
            << "world " << world << ", buffer " << b << ", rank " << r;
      }
      for (const Param* p : buffer.params) {
        const int owner = shards[0].owner(*p);
        const StoreShard& mine = shards[static_cast<size_t>(owner)];
        EXPECT_TRUE(mine.owns(*p));
        EXPECT_GE(p->offset, mine.begin(static_cast<int>(b))) << p->name;
        EXPECT_LE(p->offset + p->value.numel(), mine.end(static_cast<int>(b))) << p->name << " is split";
      }
    }
  }
}

TEST(StoreShard, OneRankGathersAndScattersOntoItself) {
  const LanguageModel model(testing::tiny_model(), DType::f32, Device::cpu(), DType::f32);
  const StoreShard shard(model.store(), 0, 1);
  const auto comm = single_process_communicator();
  const Tensor grad = model.store().buffers()[0].grad;
  grad.data<float>()[3] = 2.5f;
  shard.reduce_scatter_gradients(*comm);
  shard.all_gather_weights(*comm);
  EXPECT_EQ(grad.item(3), 2.5);
}

}  // namespace
}  // namespace amber::dist
