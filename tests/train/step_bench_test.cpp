// `amber bench step`: the batch it times has the document lengths
// bench/compare/step_torch.py uses (spread_lengths), so the two arms of the step
// comparison see the same document boundaries; its options act as they say (on the CPU,
// and on a GPU where only a GPU shows it).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include "amber/core/device.h"
#include "bench/attention_bench.h"
#include "bench/op_repeat.h"
#include "bench/step_bench.h"
#include "tiny_model.h"

namespace amber {
namespace {

StepBenchOptions tiny_cpu_bench() {
  StepBenchOptions o;
  o.model = testing::tiny_model();
  o.model.depth = 1;
  o.device = "cpu";
  o.compute_dtype = "f32";
  o.tokens = 256;
  o.doc_min = 5;
  o.doc_max = 40;
  o.warmup = 0;
  o.warmup_seconds = 0;
  o.steps = 1;
  return o;
}

TEST(StepBench, BatchHasTheComparisonsDocumentLengths) {
  const StepBenchResult r = run_step_bench(tiny_cpu_bench());
  EXPECT_EQ(r.lengths, spread_lengths(256, 5, 40));
  EXPECT_GT(r.tokens_per_s, 0.0);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_EQ(r.warmup_steps, 0);
}

// An MoE model reports its last step's routing per MoE layer (which the expert products'
// times depend on); a dense one reports none.
TEST(StepBench, MoeModelReportsItsRouting) {
  EXPECT_TRUE(run_step_bench(tiny_cpu_bench()).routing.empty());
  StepBenchOptions o = tiny_cpu_bench();
  o.model.depth = 2;
  o.model.moe_experts = 4;
  o.model.moe_top_k = 2;
  o.model.moe_hidden = 16;
  const StepBenchResult r = run_step_bench(o);
  ASSERT_EQ(r.routing.size(), 2u);
  for (const RoutingStats& s : r.routing) {
    EXPECT_GE(s.max_over_mean, 1.0) << s.layer;  // the busiest expert has at least the mean
    EXPECT_LE(s.max_over_mean, 2.0) << s.layer;  // top-2 of 4: no expert holds more than every token
    EXPECT_GE(s.dead_experts, 0) << s.layer;
    EXPECT_LE(s.dead_experts, 2) << s.layer;  // every token's two distinct experts got rows
  }
  EXPECT_EQ(r.routing[0].layer, "layers.0.mlp");
}

// The warm-up runs its steps and then as many more as fill its time (a step of this
// model takes milliseconds).
TEST(StepBench, WarmUpLastsItsStepsAndItsTime) {
  StepBenchOptions o = tiny_cpu_bench();
  o.warmup = 2;
  EXPECT_EQ(run_step_bench(o).warmup_steps, 2);
  o.warmup_seconds = 0.3;
  const auto start = std::chrono::steady_clock::now();
  const StepBenchResult r = run_step_bench(o);
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.3);
  EXPECT_GT(r.warmup_steps, 2);
  o.warmup_seconds = -1;
  try {
    run_step_bench(o);
    FAIL() << "a negative warm-up time was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warm-up time"), std::string::npos) << e.what();
  }
}

// The step clips as grad_clip asks (train.grad_clip's default unless set). A bound far
// above the norm changes nothing; one far below it leaves the first update almost
// nothing (the gradients scaled to ~1e-9 sit under AdamW's eps), so the second step's
// loss stays near the first's, where unclipped it moves.
TEST(StepBench, ClipsAsAsked) {
  StepBenchOptions o = tiny_cpu_bench();
  EXPECT_EQ(o.grad_clip, TrainConfig{}.grad_clip);
  const double first = run_step_bench(o).loss;  // one step: the loss before any update
  o.steps = 2;
  o.grad_clip = 0;
  const double unclipped = run_step_bench(o).loss;
  o.grad_clip = 1e6;
  EXPECT_EQ(run_step_bench(o).loss, unclipped);
  o.grad_clip = 1e-9;
  const double clipped = run_step_bench(o).loss;
  EXPECT_LT(std::fabs(clipped - first), std::fabs(unclipped - first) / 10) << first << " " << unclipped << " "
                                                                             << clipped;
}

// --twice runs one op's entry point twice in every call: each op it may name is called
// in the step, and its second run writes the first's bits, so the loss after an update
// is the plain step's. It holds for that benchmark only, and other names are refused.
TEST(StepBench, TwiceRepeatsAnOpWithoutChangingTheStep) {
  StepBenchOptions o = tiny_cpu_bench();
  o.steps = 2;
  const double plain = run_step_bench(o).loss;
  for (const std::string_view op : profile::repeatable_ops()) {
    o.twice = op;
    const StepBenchResult r = run_step_bench(o);
    EXPECT_EQ(r.loss, plain) << op;
    EXPECT_GT(r.twice_calls, 0) << op << " is never called in the step";
    EXPECT_EQ(profile::runs(op), 1) << op << " still runs twice after the benchmark";
  }
  o.twice = "adamw_step";
  try {
    run_step_bench(o);
    FAIL() << "an op whose second run would change the step was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'adamw_step' cannot run twice"), std::string::npos) << message;
    EXPECT_NE(message.find("glu_linear_backward_input"), std::string::npos) << message;
  }
}

// --profile on the CPU times each op with the host clock: the step's big ops have rows,
// the step's own work outside them too, and together they account for the step.
TEST(StepBench, ProfilesTheCpuStep) {
  StepBenchOptions o = tiny_cpu_bench();
  o.profile = true;
  const StepBenchResult r = run_step_bench(o);
  std::set<std::string> names;
  double total = 0;
  for (const auto& [op, ms] : r.op_ms) {
    EXPECT_GE(ms, 0.0) << op;
    names.insert(op);
    total += ms;
  }
  for (const char* op : {"attention_forward", "attention_backward", "gemm", "gradient_restart"})
    EXPECT_TRUE(names.contains(op)) << op;
  // No lower bound against the step: in a 3 ms step, time between ops (threads waking)
  // grows with whatever else the machine runs.
  EXPECT_LT(total, 1.05 * r.step_ms) << "the ops take more than the step";
  EXPECT_GT(total, 0.0);
}

// --profile on a GPU: with the step's CUDA graph, the ops are timed at its replays (their
// mean); with --no-graph, summed over the eager steps. Both see the same ops, and the graph's
// per-op times add up to no more than its step.
TEST(StepBenchGpu, ProfilesTheGraphStepAndTheEagerOne) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  StepBenchOptions o = tiny_cpu_bench();
  o.model.dim = 128;  // heads of 64, which the Hopper attention takes
  o.model.heads = 2;
  o.model.kv_heads = 1;
  o.model.mlp_hidden = 256;
  o.device = "cuda";
  o.compute_dtype = "bf16";
  o.tokens = 1024;
  o.warmup = 3;
  o.steps = 4;
  o.profile = true;
  const auto ops = [](const StepBenchResult& r) {
    std::set<std::string> names;
    double total = 0;
    for (const auto& [op, ms] : r.op_ms) {
      EXPECT_GT(ms, 0.0) << op;
      names.insert(op);
      total += ms;
    }
    return std::make_pair(names, total);
  };
  const StepBenchResult graph = run_step_bench(o);
  ASSERT_TRUE(graph.replayed);
  const auto [graph_ops, graph_total] = ops(graph);
  EXPECT_TRUE(graph_ops.contains("attention_forward"));
  // The step's work outside the ops has rows of its own.
  EXPECT_TRUE(graph_ops.contains("statistics_keep"));
  EXPECT_TRUE(graph_ops.contains("batch_upload"));
  EXPECT_TRUE(graph_ops.contains("gradient_restart"));
  EXPECT_LT(graph_total, graph.step_ms) << "the graph's op times are more than one step";
  o.cuda_graph = false;
  const StepBenchResult eager = run_step_bench(o);
  ASSERT_FALSE(eager.replayed);
  const auto [eager_ops, eager_total] = ops(eager);
  EXPECT_EQ(graph_ops, eager_ops);
  EXPECT_LT(eager_total, eager.step_ms) << "the eager op times are more than one step";
}

}  // namespace
}  // namespace amber
