#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "amber/core/random.h"
#include "amber/data/shard.h"
#include "amber/io/safetensors.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/optim.h"
#include "amber/train/checkpoint.h"
#include "amber/train/trainer.h"
#include "data/testing.h"
#include "ops/testing.h"
#include "train/run_testing.h"

namespace amber {
namespace {
namespace fs = std::filesystem;
using namespace run_testing;

TEST(Trainer, TokenExactAccumulationMatchesOneBigBatch) {
  // 8192 tokens in documents of uneven length, once as one micro-batch and once as
  // four micro-batches of 2048 tokens: trained tokens per micro-batch differ, so a
  // mean of per-micro-batch means would not match.
  std::vector<std::vector<int32_t>> docs;
  const std::vector<int> lengths = {7, 100, 33, 64, 1, 251, 20, 36};  // 512 tokens, 8 documents
  for (int copy = 0; copy < 16; ++copy)
    for (int length : lengths) {
      std::vector<int32_t> doc;
      for (int i = 0; i < length; ++i) doc.push_back((copy * 13 + i * 7 + length) % 61);
      docs.push_back(doc);
    }
  LanguageModel one(tiny_model()), four(tiny_model());
  one.init_weights(3);
  four.init_weights(3);
  const std::vector<data::Batch> whole = {data::pack_documents(docs)};
  ASSERT_EQ(whole[0].tokens.numel(), 8192);
  std::vector<data::Batch> parts;
  for (int p = 0; p < 4; ++p)
    parts.push_back(data::pack_documents(std::vector<std::vector<int32_t>>(docs.begin() + 32 * p, docs.begin() + 32 * p + 32)));
  for (const data::Batch& b : parts) ASSERT_EQ(b.tokens.numel(), 2048);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  auto opt_one = build_optimizer(oc, one.store()), opt_four = build_optimizer(oc, four.store());
  std::vector<Tensor> initial;
  for (const auto& p : one.params()) initial.push_back(p->value.clone());
  TrainStep step_one(one, opt_one.get(), {}), step_four(four, opt_four.get(), {});
  step_one.run(whole, 1.0);
  step_four.run(parts, 1.0);
  const AccumulatedStep a = step_one.read(), b = step_four.read();
  EXPECT_TRUE(a.applied);
  EXPECT_TRUE(b.applied);
  int64_t trained = 0;
  for (const data::Batch& p : parts) trained += p.trained_tokens;
  EXPECT_EQ(a.trained_tokens, whole[0].trained_tokens);
  EXPECT_EQ(b.trained_tokens, trained);
  EXPECT_EQ(a.trained_tokens, b.trained_tokens);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-9 * a.loss_sum);
  for (size_t i = 0; i < one.params().size(); ++i) {
    EXPECT_LT(testing::relative_error(four.params()[i]->grad, one.params()[i]->grad), 1e-6) << one.params()[i]->name;
    // The AdamW update itself: m / sqrt(v) normalises each coordinate, so compare
    // the applied deltas rather than the (much larger) weights.
    Tensor delta_one = one.params()[i]->value.clone(), delta_four = four.params()[i]->value.clone();
    add_scaled(delta_one, initial[i], -1.0);
    add_scaled(delta_four, initial[i], -1.0);
    EXPECT_LT(testing::relative_error(delta_four, delta_one), 1e-3) << one.params()[i]->name;
  }
}

// The step's statistics on the model's device: the loss matches an evaluation of the
// same batch, the norm is the float64 root of every squared gradient entry, clipping
// sets the gradient scale that brings it to the bound, and a NaN gradient gives a NaN
// norm (the trainer's signal to skip the update).
TEST(Trainer, StepStatsHoldLossNormAndNonFiniteSignal) {
  LanguageModel model(tiny_model());
  model.init_weights(4);
  const std::vector<data::Batch> batch = {data::pack_documents(make_documents(6, 8))};
  const LMHead::Loss eval = model.evaluate(batch[0].tokens, batch[0].targets, batch[0].seq);
  TrainStep step(model, nullptr, {});
  step.run(batch, 1.0);
  StepStats& stats = step.stats();
  const AccumulatedStep a = step.read();
  EXPECT_FALSE(a.applied);  // no optimizer: gradients only
  EXPECT_EQ(a.loss_sum, eval.sum);
  EXPECT_EQ(a.z_loss_sum, eval.z_loss_sum);
  EXPECT_EQ(a.trained_tokens, batch[0].trained_tokens);
  EXPECT_EQ(eval.tokens, batch[0].trained_tokens);
  double want = 0;
  for (const auto& p : model.params())
    for (double g : p->grad.to_doubles()) want += g * g;
  want = std::sqrt(want);
  EXPECT_NEAR(a.grad_norm, want, 1e-12 * want);
  EXPECT_EQ(a.grad_scale, 1.0);  // no clipping asked
  clip_gradients(stats, 2 * a.grad_norm);
  EXPECT_EQ(stats.read().grad_scale, 1.0);  // within the bound
  clip_gradients(stats, a.grad_norm / 2);
  EXPECT_EQ(stats.read().grad_scale, 0.5);
  model.params()[0]->grad.data<float>()[0] = NAN;
  global_grad_norm(model, stats, /*product_squares=*/false);
  const AccumulatedStep bad = stats.read();
  EXPECT_TRUE(std::isnan(bad.grad_norm));
  EXPECT_EQ(bad.loss_sum, a.loss_sum);
}

// An MoE layer's expert weight gradients leave the squares of their blocks from their
// products; over two micro-batches (the second accumulating) the step's norm from them is
// the norm a pass over every gradient gives.
TEST(Trainer, MoeGradNormFromTheProductsSquaresIsTheGradientsNorm) {
  LanguageModel model(testing::with_small_moe(tiny_model()));
  model.init_weights(4);
  const std::vector<data::Batch> batches = {data::pack_documents(make_documents(6, 8)),
                                            data::pack_documents(make_documents(5, 9))};
  expect_norm_from_product_squares(model, batches, 1e-12);
}

// A step carries this process's stop signal into its statistics (summed over the ranks
// under data parallel; here a world of one), alongside the step's previous() copy.
TEST(Trainer, StepStatsCarryTheStopVote) {
  LanguageModel model(tiny_model());
  model.init_weights(4);
  const std::vector<data::Batch> batch = {data::pack_documents(make_documents(6, 8))};
  TrainStep step(model, nullptr, {});
  step.run(batch, 1.0);
  EXPECT_EQ(step.read().stop_votes, 0);
  step.run(batch, 1.0, std::nullopt, 15);
  EXPECT_EQ(step.read().stop_votes, 15);
  EXPECT_EQ(step.previous().stop_votes, 0);
  step.run(batch, 1.0);
  EXPECT_EQ(step.previous().stop_votes, 15);
}

// The tiny model (weights from seed 4) under AdamW at its defaults, in a step that
// clips the gradient norm at 1.0.
struct TinyTrainStep {
  LanguageModel model{tiny_model()};
  std::unique_ptr<Optimizer> optimizer = [this] {
    model.init_weights(4);
    return build_optimizer({}, model.store());
  }();
  TrainStep step{model, optimizer.get(), {.grad_clip = 1.0}};
};

// A step first keeps the statistics of the step before it, so the host can read them
// (previous()) while that step runs: each run's previous() is the last run's read(),
// a step without trained tokens included.
TEST(Trainer, PreviousIsTheStepBeforeTheLastRun) {
  TinyTrainStep tiny;
  TrainStep& step = tiny.step;
  // One-token documents have no targets: the third step trains nothing.
  const std::vector<data::Batch> batches[] = {{data::pack_documents(make_documents(6, 8))},
                                              {data::pack_documents(make_documents(4, 9))},
                                              {data::pack_documents({{5}, {7}})},
                                              {data::pack_documents(make_documents(5, 10))}};
  ASSERT_EQ(batches[2][0].trained_tokens, 0);
  std::optional<AccumulatedStep> before;
  for (const auto& batch : batches) {
    step.run(batch, 1.0);
    const AccumulatedStep previous = step.previous(), now = step.read();
    if (before) {
      EXPECT_EQ(previous.loss_sum, before->loss_sum);
      EXPECT_EQ(previous.z_loss_sum, before->z_loss_sum);
      EXPECT_EQ(previous.trained_tokens, before->trained_tokens);
      EXPECT_TRUE(previous.grad_norm == before->grad_norm ||
                  (std::isnan(previous.grad_norm) && std::isnan(before->grad_norm)));
      EXPECT_EQ(previous.grad_scale, before->grad_scale);
      EXPECT_EQ(previous.applied, before->applied);
    }
    before = now;
  }
  EXPECT_EQ(step.previous().trained_tokens, 0) << "the step before the last trained nothing";
  EXPECT_GT(step.read().trained_tokens, 0);
}

// Clipping scales the gradients as the update reads them: clipped steps give the
// weights and optimizer state of unclipped steps on gradients scaled by the clip factor
// first (AdamW bit for bit; Muon's momentum may fuse the product into a multiply-add),
// over three steps, so momentum and Nesterov's look-ahead see scaled gradients too; the
// gradients themselves stay as computed.
TEST(Trainer, ClippedStepsEqualStepsOnScaledGradients) {
  for (const char* name : {"adamw", "muon"}) {
    const bool exact = std::string(name) == "adamw";
    LanguageModel clipped(tiny_model()), scaled(tiny_model());
    clipped.init_weights(4);
    scaled.init_weights(4);
    OptimizerConfig oc;
    oc.name = name;
    auto clipped_opt = build_optimizer(oc, clipped.store()), scaled_opt = build_optimizer(oc, scaled.store());
    TrainStep gradients_only(scaled, nullptr, {});
    std::unique_ptr<TrainStep> step;
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE(std::string(name) + " step " + std::to_string(s + 1));
      const std::vector<data::Batch> batch = {data::pack_documents(make_documents(6, 8 + s))};
      gradients_only.run(batch, 1.0);
      const double norm = gradients_only.read().grad_norm;
      if (!step) step = std::make_unique<TrainStep>(clipped, clipped_opt.get(), StepOptions{.grad_clip = norm / 3});
      step->run(batch, 1.0);
      const AccumulatedStep a = step->read();
      ASSERT_TRUE(a.applied);
      ASSERT_LT(a.grad_scale, 1.0);  // every step clips
      if (exact) {
        EXPECT_EQ(a.grad_norm, norm);
      }
      std::vector<std::vector<double>> computed;
      for (const auto& p : scaled.params()) {
        computed.push_back(p->grad.to_doubles());
        scale_(p->grad, a.grad_scale);
      }
      scaled_opt->step(always_apply(1.0, Device::cpu()));
      for (size_t i = 0; i < clipped.params().size(); ++i) {
        const Param &c = *clipped.params()[i], &d = *scaled.params()[i];
        if (exact) {
          EXPECT_EQ(c.value.to_doubles(), d.value.to_doubles()) << c.name;
          EXPECT_EQ(c.grad.to_doubles(), computed[i]) << c.name;
        } else {
          EXPECT_LT(testing::relative_error(c.value, d.value), 1e-5) << c.name;
          EXPECT_LT(testing::relative_error(c.grad, Tensor::from_vector(computed[i], c.grad.shape())), 1e-4) << c.name;
        }
      }
      const std::vector<StateTensor> clipped_state = clipped_opt->state(), scaled_state = scaled_opt->state();
      for (size_t i = 0; i < clipped_state.size(); ++i) {
        const StateTensor &c = clipped_state[i], &d = scaled_state[i];
        if (exact)
          EXPECT_EQ(c.tensor->to_doubles(), d.tensor->to_doubles()) << c.name;
        else
          EXPECT_LT(testing::relative_error(*c.tensor, *d.tensor), 1e-5) << c.name;
      }
    }
  }
}

// A non-finite loss closes the gate on the device: no weight, optimizer state or step
// count changes, and the host learns it from the step's one read.
TEST(Trainer, NonFiniteStepLeavesWeightsAlone) {
  TinyTrainStep tiny;
  LanguageModel& model = tiny.model;
  TrainStep& step = tiny.step;
  const std::vector<data::Batch> batch = {data::pack_documents(make_documents(6, 8))};
  step.run(batch, 1.0);
  ASSERT_TRUE(step.read().applied);
  ASSERT_EQ(tiny.optimizer->steps(), 1);
  // A norm weight reaches every token's loss.
  for (const auto& p : model.params())
    if (p->name.find("norm.weight") != std::string::npos) {
      p->value.data<float>()[0] = NAN;
      break;
    }
  model.refresh_working_copies();
  std::vector<std::vector<double>> before;
  for (const auto& p : model.params()) before.push_back(p->value.to_doubles());
  step.run(batch, 1.0);
  const AccumulatedStep bad = step.read();
  EXPECT_FALSE(bad.applied);
  EXPECT_FALSE(std::isfinite(bad.loss_sum) && std::isfinite(bad.grad_norm));
  EXPECT_EQ(tiny.optimizer->steps(), 1);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const std::vector<double> after = model.params()[i]->value.to_doubles();
    for (size_t j = 0; j < after.size(); ++j)
      ASSERT_TRUE(after[j] == before[i][j] || (std::isnan(after[j]) && std::isnan(before[i][j])))
          << model.params()[i]->name;
  }
}

std::vector<double> train_losses(const std::string& out) {
  std::vector<double> losses;
  for (const nlohmann::json& r : train_records(out)) losses.push_back(r["loss"].get<double>());
  return losses;
}

TEST(Trainer, ResumeContinuesBitForBit) {
  const std::string corpus = write_corpus("resume");
  const std::string straight = corpus + "_straight", resumed = corpus + "_resumed";
  fs::remove_all(straight);
  fs::remove_all(resumed);
  Trainer(small_run(corpus, straight), {false, "", false}).run();
  const std::vector<double> full = train_losses(straight);
  ASSERT_EQ(full.size(), 6u);
  EXPECT_LT(full.back(), full.front());  // it learns
  int clipped = 0;
  for (const nlohmann::json& r : train_records(straight)) {
    EXPECT_FALSE(r.contains("device_peak_memory_mb") || r.contains("sm_mhz")) << "a CPU run has no card to report";
    // The clip factor the update applied (train.grad_clip 1.0).
    const double norm = r["grad_norm"].get<double>();
    EXPECT_EQ(r["grad_scale"].get<double>(), norm > 1.0 ? 1.0 / norm : 1.0) << r.dump();
    clipped += norm > 1.0;
  }
  EXPECT_GT(clipped, 0) << "no step was clipped, so the factor went untested";
  // Resume from the step-3 checkpoint of the first run into a fresh folder.
  Trainer(small_run(corpus, resumed), {false, straight + "/checkpoints/step-00000003", false}).run();
  const std::vector<double> tail = train_losses(resumed);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tail[i], full[3 + i]) << "step " << 4 + i;
  // Starting afresh in a folder that holds checkpoints would mix two runs: refused.
  try {
    Trainer(small_run(corpus, straight), {false, "", false});
    FAIL() << "a fresh run into a used out_dir must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
  const SafetensorsFile a = load_safetensors(straight + "/checkpoints/step-00000006/model.safetensors");
  const SafetensorsFile b = load_safetensors(resumed + "/checkpoints/step-00000006/model.safetensors");
  for (const auto& [name, tensor] : a.tensors) EXPECT_EQ(tensor.to_doubles(), b.tensors.at(name).to_doubles()) << name;
  fs::remove_all(straight);
  fs::remove_all(resumed);
  fs::remove_all(corpus);
}

// A model with an MoE layer (experts through Muon as stacks of matrices, the router
// through AdamW, the auxiliary-loss-free balance bias after each step) learns, and a
// resumed run continues it bit for bit, bias included.
TEST(Trainer, MoeRunLearnsAndResumesBitForBit) {
  const std::string corpus = write_corpus("moe");
  const std::string straight = corpus + "_straight", resumed = corpus + "_resumed";
  const auto moe_run = [&](const std::string& out) {
    RunConfig c = small_run(corpus, out);
    c.model.moe_experts = 4;
    c.model.moe_top_k = 2;
    c.model.moe_hidden = 32;
    c.model.moe_shared_experts = 1;
    c.model.moe_first_dense = 1;
    c.model.moe_bias_update_rate = 0.01;
    c.validate();
    return c;
  };
  Trainer(moe_run(straight), {false, "", false}).run();
  const std::vector<double> full = train_losses(straight);
  ASSERT_EQ(full.size(), 6u);
  EXPECT_LT(full.back(), full.front());
  for (const nlohmann::json& r : train_records(straight)) {
    ASSERT_TRUE(r.contains("moe_layers")) << r.dump();
    ASSERT_EQ(r["moe_layers"].size(), 1u) << "one sparse layer";
    EXPECT_EQ(r["moe_layers"][0]["layer"], "layers.1.mlp");
    EXPECT_GE(r["moe_load_max_over_mean"].get<double>(), 1.0);
    EXPECT_LE(r["moe_load_max_over_mean"].get<double>(), 4.0) << "4 experts: at most all rows on one";
    EXPECT_GE(r["moe_dead_experts"].get<int>(), 0);
  }
  Trainer(moe_run(resumed), {false, straight + "/checkpoints/step-00000003", false}).run();
  const std::vector<double> tail = train_losses(resumed);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tail[i], full[3 + i]) << "step " << 4 + i;
  const SafetensorsFile a = load_safetensors(straight + "/checkpoints/step-00000006/model.safetensors");
  const SafetensorsFile b = load_safetensors(resumed + "/checkpoints/step-00000006/model.safetensors");
  EXPECT_TRUE(a.tensors.count("layers.1.mlp.experts.gate_up_proj")) << "the experts are checkpointed as one stack";
  // The model config travels in the weights' metadata.
  ASSERT_TRUE(a.metadata.count("amber.model_config"));
  EXPECT_EQ(model_config_from_toml_string(a.metadata.at("amber.model_config")).moe_experts, 4);
  ASSERT_TRUE(a.tensors.count("layers.1.mlp.router.balance_bias")) << "the balance bias is model state";
  // Sign steps of 0.01 can return to zero after an even number of steps; after three
  // (uneven load every step) they cannot all have.
  const SafetensorsFile third = load_safetensors(straight + "/checkpoints/step-00000003/model.safetensors");
  double moved = 0;
  for (double b : third.tensors.at("layers.1.mlp.router.balance_bias").to_doubles()) moved += std::fabs(b);
  EXPECT_GT(moved, 0) << "three steps of uneven load left the balance bias at zero";
  for (const auto& [name, tensor] : a.tensors) EXPECT_EQ(tensor.to_doubles(), b.tensors.at(name).to_doubles()) << name;
  fs::remove_all(straight);
  fs::remove_all(resumed);
  fs::remove_all(corpus);
}

// SIGTERM (a scheduler taking the machine back) mid-run: the run ends the step in
// flight, checkpoints it and returns; resumed, it continues bit for bit as a run that
// was never stopped. The signal comes from another thread once the first step is logged.
TEST(Trainer, SignalStopsAtAStepWithACheckpointThatResumes) {
  const std::string corpus = write_corpus("signal");
  const std::string straight = corpus + "_straight", stopped = corpus + "_stopped";
  fs::remove_all(straight);
  fs::remove_all(stopped);
  RunConfig c = small_run(corpus, straight);
  c.train.steps = 200;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  Trainer(c, {false, "", false}).run();
  c.train.out_dir = stopped;
  Trainer first(c, {false, "", false});
  std::thread sender([&] {
    while (train_records(stopped).empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    kill(getpid(), SIGTERM);
  });
  first.run();
  sender.join();
  EXPECT_EQ(first.stopped_by(), SIGTERM);
  const size_t stop_step = train_records(stopped).size();
  ASSERT_GE(stop_step, 1u);
  ASSERT_LT(stop_step, 200u) << "the run ended before the signal came";
  char name[32];
  std::snprintf(name, sizeof name, "step-%08zu", stop_step);
  EXPECT_EQ(latest_checkpoint(stopped), stopped + "/checkpoints/" + name);
  Trainer resumed(c, {true, "", false});
  resumed.run();
  EXPECT_EQ(resumed.stopped_by(), 0);
  EXPECT_EQ(train_losses(stopped), train_losses(straight)) << "stopped after step " << stop_step;
  fs::remove_all(straight);
  fs::remove_all(stopped);
  fs::remove_all(corpus);
}

// The trainer logs step k while step k + 1 runs, except where it acts on the model
// after step k. A run that evaluates after every step, and so waits for each step's
// end, logs the same statistics step for step as one that evaluates only at its end.
void expect_logs_match_a_run_that_waits(RunConfig c, const std::string& name) {
  const std::string corpus = write_corpus(name);
  const std::string waits = corpus + "_waits", overlaps = corpus + "_overlaps";
  fs::remove_all(waits);
  fs::remove_all(overlaps);
  c.data.dir = corpus;
  c.train.steps = 7;
  c.train.checkpoint_every = 0;
  c.train.eval_every = 1;
  c.train.out_dir = waits;
  Trainer(c, {false, "", false}).run();
  c.train.eval_every = 0;
  c.train.out_dir = overlaps;
  Trainer(c, {false, "", false}).run();
  const std::vector<nlohmann::json> a = train_records(waits), b = train_records(overlaps);
  ASSERT_EQ(a.size(), 7u);
  ASSERT_EQ(b.size(), 7u);
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"step", "loss", "z_loss", "lr", "grad_norm", "grad_scale", "tokens_seen", "skipped"})
      EXPECT_EQ(a[i][key], b[i][key]) << key << " at step " << i + 1;
    const double tokens_per_s = b[i]["tokens_per_s"].get<double>();
    EXPECT_TRUE(std::isfinite(tokens_per_s) && tokens_per_s > 0) << b[i].dump();
  }
  EXPECT_NE(a[0]["loss"], a[1]["loss"]) << "steps that log the same numbers could hide an off-by-one";
  // On a GPU the overlapping run replays its captured graph from its third step on.
  if (c.train.device == "cuda" && c.train.cuda_graph) {
    for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i]["graph_replay"].get<bool>(), i >= 2) << b[i].dump();
  }
  fs::remove_all(waits);
  fs::remove_all(overlaps);
  fs::remove_all(corpus);
}

TEST(Trainer, LogsEachStepWhileTheNextRuns) {
  expect_logs_match_a_run_that_waits(small_run("", ""), "overlap");
}

TEST(TrainerGpu, LogsEachStepWhileTheNextRuns) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  RunConfig c = small_run("", "");
  c.model.dim = 64;  // head_dim 32: the smallest the CUDA attention takes
  c.model.heads = 2;
  c.model.kv_heads = 1;
  c.train.device = "cuda";
  c.train.compute_dtype = "bf16";
  c.train.gemm_tuning = false;  // both runs multiply with the same algorithms
  c.validate();
  expect_logs_match_a_run_that_waits(c, "overlap_gpu");
}

// On a GPU, training measures its GEMM algorithms by default (train.gemm_tuning) and
// keeps them in out_dir/gemm_algorithms.tsv. A run that finds the file there multiplies
// with the algorithms it holds: resumed beside a copy of the first run's file, it
// continues that run bit for bit.
TEST(TrainerGpu, MeasuredGemmAlgorithmsAreKeptAndReused) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string corpus = write_corpus("gemm_tuning");
  const std::string straight = corpus + "_straight", resumed = corpus + "_resumed";
  fs::remove_all(straight);
  fs::remove_all(resumed);
  RunConfig c = small_run(corpus, straight);
  c.model.dim = 64;  // head_dim 32: the smallest the CUDA attention takes
  c.model.heads = 2;
  c.model.kv_heads = 1;
  c.train.device = "cuda";
  c.train.compute_dtype = "bf16";
  c.validate();
  ASSERT_TRUE(c.train.gemm_tuning) << "measured algorithms are the default";
  Trainer(c, {false, "", false}).run();
  const fs::path table = fs::path(straight) / "gemm_algorithms.tsv";
  ASSERT_TRUE(fs::exists(table)) << "a GPU run keeps its measured algorithms beside its checkpoints";
  const std::string measured = data::testing::read_file(table.string());
  EXPECT_EQ(measured.rfind("amber-gemm-algorithms-3 ", 0), 0u) << measured.substr(0, 80);
  EXPECT_GE(std::count(measured.begin(), measured.end(), '\n'), 4) << "the header and the products' choices";

  fs::create_directories(resumed);
  fs::copy_file(table, fs::path(resumed) / "gemm_algorithms.tsv");
  c.train.out_dir = resumed;
  Trainer(c, {false, straight + "/checkpoints/step-00000003", false}).run();
  // The step's buffers hold the loader's token budget whatever the first batch, so the
  // resumed run multiplies at the first run's shapes: it times nothing and appends
  // nothing.
  EXPECT_EQ(data::testing::read_file((fs::path(resumed) / "gemm_algorithms.tsv").string()), measured)
      << "a product was timed again";
  const std::vector<double> full = train_losses(straight), tail = train_losses(resumed);
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tail[i], full[3 + i]) << "step " << 4 + i;
  // A GPU run reports the card's memory every step, and its clock and power (where the
  // driver's NVML answers) at logged steps.
  for (const nlohmann::json& r : train_records(straight)) {
    EXPECT_GT(r.value("device_peak_memory_mb", 0.0), 0.0) << r.dump();
    for (const char* key : {"sm_mhz", "board_watts"}) {
      if (r.contains(key)) {
        EXPECT_GT(r[key].get<double>(), 0.0) << r.dump();
      }
    }
  }
  fs::remove_all(straight);
  fs::remove_all(resumed);
  fs::remove_all(corpus);
}

TEST(Checkpoint, KillDuringWriteLeavesThePreviousCheckpointLoadable) {
  const std::string out = (fs::temp_directory_path() / "amber_kill_test").string();
  fs::remove_all(out);
  ModelConfig big = tiny_model();
  big.vocab_size = 20000;  // ~10 MB of weights, so a write takes long enough to interrupt
  big.dim = 128;
  big.heads = 4;
  // Everything that uses OpenMP happens before fork(): a forked child must not enter
  // a parallel region its parent's thread pool served.
  LanguageModel model(big);
  model.init_weights(1);
  auto opt = build_optimizer({}, model.store());
  for (int round = 0; round < 4; ++round) {
    fs::remove_all(out);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int64_t step = 1;; ++step) {
        // Stamp every tensor with the step, so a torn checkpoint would show.
        for (const auto& p : model.params()) p->value.data<float>()[0] = static_cast<float>(step);
        save_checkpoint(out, step, model, *opt, {{"tokens_seen", step}}, 2);
      }
    }
    // Let it finish at least one checkpoint, then kill it at an arbitrary moment.
    for (int waited = 0; waited < 2000 && latest_checkpoint(out).empty(); ++waited) usleep(5000);
    usleep(static_cast<useconds_t>(7000 * (round + 1)));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    const std::string latest = latest_checkpoint(out);
    ASSERT_FALSE(latest.empty());
    LanguageModel loaded(big);
    auto loaded_opt = build_optimizer({}, loaded.store());
    const nlohmann::json state = load_checkpoint(latest, loaded, loaded_opt.get());
    const double step = static_cast<double>(state.at("step").get<int64_t>());
    for (const auto& p : loaded.params()) EXPECT_EQ(p->value.item(0), step) << p->name;
    EXPECT_EQ(loaded.params()[3]->value.item(5), model.params()[3]->value.item(5));
  }
  fs::remove_all(out);
}

TEST(Checkpoint, CorruptOrMismatchedCheckpointsFailClearly) {
  const std::string out = (fs::temp_directory_path() / "amber_corrupt_test").string();
  fs::remove_all(out);
  LanguageModel model(tiny_model());
  auto opt = build_optimizer({}, model.store());
  const std::string dir = save_checkpoint(out, 1, model, *opt, {{"tokens_seen", 0}}, 1);
  ModelConfig wider = tiny_model();
  wider.dim = 48;
  wider.heads = 4;
  LanguageModel other(wider);
  try {
    load_checkpoint(dir, other, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embed_tokens.weight' has shape [64, 32]"), std::string::npos) << e.what();
  }
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") / 2);
  try {
    load_checkpoint(dir, model, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_checkpoint(out + "/nowhere", model, nullptr), Error);
  fs::remove_all(out);
}

TEST(RunConfig, UnknownSetKeyAndSectionFailWithSuggestions) {
  const fs::path path = fs::temp_directory_path() / "amber_run_config.toml";
  std::ofstream(path) << "[model]\ndim = 64\nheads = 4\n[train]\nsteps = 10\n[data]\ndir = \"x\"\nmax_seq_len = 128\n";
  try {
    load_run_config(path.string(), {"train.step=5"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean train.steps?"), std::string::npos) << e.what();
  }
  try {
    load_run_config(path.string(), {"trian.steps=5"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean [train]?"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_run_config(path.string(), {"train.steps=5"}).train.steps, 5);
  fs::remove(path);
}

}  // namespace
}  // namespace amber
