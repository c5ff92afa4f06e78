// `amber bench step` on the CPU: the batch it times has the document lengths
// bench/compare/step_torch.py uses (spread_lengths), so the two arms of the step
// comparison see the same document boundaries.
#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/attention_bench.h"
#include "amber/train/step_bench.h"

namespace amber {
namespace {

TEST(StepBench, BatchHasTheComparisonsDocumentLengths) {
  StepBenchOptions o;
  o.model.vocab_size = 64;
  o.model.dim = 32;
  o.model.depth = 1;
  o.model.heads = 4;
  o.model.kv_heads = 2;
  o.model.mlp_hidden = 64;
  o.device = "cpu";
  o.compute_dtype = "f32";
  o.tokens = 256;
  o.doc_min = 5;
  o.doc_max = 40;
  o.warmup = 0;
  o.steps = 1;
  const StepBenchResult r = run_step_bench(o);
  EXPECT_EQ(r.lengths, spread_lengths(256, 5, 40));
  EXPECT_GT(r.tokens_per_s, 0.0);
  EXPECT_TRUE(std::isfinite(r.loss));
}

}  // namespace
}  // namespace amber
