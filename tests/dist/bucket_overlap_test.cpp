// The overlapped bucket sums of data parallel, in one process through a communicator
// that records what it is asked: the last micro-batch's backward starts every bucket
// exactly once, in the order the backward finishes their parameters, each at a moment
// when its gradients are already the step's final ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "amber/core/error.h"
#include "amber/data/batch.h"
#include "amber/dist/bucket_overlap.h"
#include "amber/train/step.h"
#include "tiny_model.h"

namespace amber::dist {
namespace {

// A world of one that keeps, for every all_reduce_sum_start, where the tensor lies and
// the values it held then.
class RecordingCommunicator final : public Communicator {
 public:
  struct Start {
    const void* data;
    int64_t numel;
    std::vector<double> values;
  };
  std::vector<Start> starts;
  int waits = 0;
  int waited_starts = 0;  // starts that a wait completed

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "recording"; }
  void all_reduce_sum(Tensor&) override {}
  void all_reduce_sum_start(Tensor& t) override { starts.push_back({t.raw(), t.numel(), t.to_doubles()}); }
  void all_reduce_sum_wait() override {
    ++waits;
    waited_starts = static_cast<int>(starts.size());
  }
  void reduce_scatter_sum(const Tensor&, Tensor&, std::span<const int64_t>) override { fail("not recorded"); }
  void all_gather(const Tensor&, Tensor&, std::span<const int64_t>) override { fail("not recorded"); }
  void broadcast(Tensor&, int) override {}
  void all_to_all(const Tensor&, Tensor&) override { fail("not recorded"); }
  void barrier() override {}
};

std::vector<data::Batch> micro_batches(int count, int vocab) {
  std::vector<data::Batch> out;
  for (int m = 0; m < count; ++m) {
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 5; ++d) {
      std::vector<int32_t> doc;
      for (int i = 0; i < 9 + 7 * d; ++i) doc.push_back((m * 31 + d * 17 + i * 5) % vocab);
      docs.push_back(doc);
    }
    out.push_back(data::pack_documents(docs));
  }
  return out;
}

// Where the backward finishes a parameter, from its name alone: the head first, then
// the final norm, the blocks from the last, the embedding last.
int backward_stage(const std::string& name, int depth) {
  if (name.starts_with("lm_head.")) return 0;
  if (name.starts_with("norm.")) return 1;
  if (name.starts_with("layers.")) return 2 + (depth - 1 - std::stoi(name.substr(7)));
  if (name.starts_with("embed_tokens.")) return depth + 2;
  fail("unexpected parameter ", name);
}

// The buckets in the order the backward must start them: by the stage of the last
// finished parameter each holds, ties in bucket order.
std::vector<size_t> expected_order(const LanguageModel& model, const GradientBuckets& buckets) {
  std::vector<int> stage;
  for (const Tensor& b : buckets.buckets()) {
    const char* begin = static_cast<const char*>(b.raw());
    const char* end = begin + b.bytes();
    int last = 0;
    for (const auto& p : model.params()) {
      const char* pb = static_cast<const char*>(p->grad.raw());
      if (pb < end && pb + p->grad.bytes() > begin)
        last = std::max(last, backward_stage(p->name, model.config().depth));
    }
    stage.push_back(last);
  }
  std::vector<size_t> order(stage.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return stage[a] < stage[b]; });
  return order;
}

void expect_every_bucket_once_in_backward_order(const ModelConfig& config) {
  LanguageModel model(config);
  model.init_weights(5);
  RecordingCommunicator comm;
  // Small buckets, so that buffers split into several and some straddle two blocks.
  const int64_t bucket_elements = 700;
  TrainStep step(model, nullptr, {.communicator = &comm, .bucket_elements = bucket_elements});
  const GradientBuckets buckets(model.store(), bucket_elements);
  ASSERT_GT(buckets.buckets().size(), static_cast<size_t>(config.depth) + 3);
  for (int run = 0; run < 2; ++run) {  // the second step reuses the armed hook
    comm.starts.clear();
    const std::vector<data::Batch> batches = micro_batches(3, config.vocab_size);
    int64_t trained = 0;
    for (const data::Batch& b : batches) trained += b.trained_tokens;
    step.run(batches, 1.0, trained);
    std::map<const void*, size_t> index;
    for (size_t i = 0; i < buckets.buckets().size(); ++i) index[buckets.buckets()[i].raw()] = i;
    std::vector<size_t> started;
    for (const auto& s : comm.starts) {
      ASSERT_TRUE(index.contains(s.data)) << "a start outside the buckets";
      started.push_back(index.at(s.data));
    }
    // Three micro-batches, yet one start per bucket: only the last backward reports.
    EXPECT_EQ(started, expected_order(model, buckets)) << "run " << run;
    EXPECT_EQ(comm.waited_starts, static_cast<int>(comm.starts.size())) << "a start left unwaited";
    // Each bucket held its final gradient when it started (the step has no optimizer,
    // so the gradients stay as the backward left them).
    for (const auto& s : comm.starts) {
      const Tensor& b = buckets.buckets()[index.at(s.data)];
      EXPECT_EQ(s.values, b.to_doubles()) << "bucket " << index.at(s.data) << " started before its gradient was final";
    }
  }
}

TEST(OverlappedBuckets, EveryBucketStartsOnceInBackwardOrderWithItsFinalGradient) {
  ModelConfig c = testing::tiny_model();
  c.depth = 3;
  expect_every_bucket_once_in_backward_order(c);
}

TEST(OverlappedBuckets, TiedHeadAndExpertsStartEveryBucketOnce) {
  ModelConfig c = testing::tiny_model();
  c.depth = 3;
  c.tie_embeddings = true;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 16;
  c.moe_first_dense = 1;
  expect_every_bucket_once_in_backward_order(c);
}

// A backward that never reports leaves the buckets unsummed: finish refuses to let the
// update read them.
TEST(OverlappedBuckets, FinishWithoutTheBackwardsReportsIsAnError) {
  LanguageModel model(testing::tiny_model());
  RecordingCommunicator comm;
  const GradientBuckets buckets(model.store(), 500);
  OverlappedBuckets overlap(buckets, comm);
  overlap.arm();
  overlap.gradients_final(model.params().size() - 1);
  EXPECT_THROW(overlap.finish(), Error);
  overlap.arm();
  overlap.gradients_final(0);
  EXPECT_NO_THROW(overlap.finish());
  EXPECT_EQ(overlap.started().size(), buckets.buckets().size());
}

}  // namespace
}  // namespace amber::dist
