// Helpers shared by the trainer tests: a tiny model, a learnable token corpus written as
// shards, a small CPU run over it, and the "train" records its metrics.jsonl holds.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "amber/core/random.h"
#include "amber/data/shard.h"
#include "amber/train/run_config.h"
#include "amber/train/trainer.h"
#include "data/testing.h"
#include "tiny_model.h"

namespace amber::run_testing {
namespace fs = std::filesystem;

using testing::tiny_model;

// Documents whose tokens follow a learnable pattern (each token predicts the next).
inline std::vector<std::vector<int32_t>> make_documents(int count, uint64_t seed) {
  Tensor u = Tensor::empty({count * 2}, DType::f64);
  fill_uniform(u, seed, 0);
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < count; ++d) {
    const int length = 5 + static_cast<int>(u.item(2 * d) * 40);
    int32_t token = static_cast<int32_t>(u.item(2 * d + 1) * 60);
    std::vector<int32_t> doc;
    for (int i = 0; i < length; ++i) doc.push_back(token = (token * 7 + 3) % 61);
    docs.push_back(doc);
  }
  return docs;
}

// A tokenized-corpus folder the loader reads, at `dir`: shards (of a `vocab`-token
// vocabulary) and their manifest.
inline std::string write_corpus_at(const fs::path& dir, int vocab = 64) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* split : {"train", "val"}) {
    const auto docs = make_documents(split[0] == 't' ? 120 : 20, split[0] == 't' ? 5 : 6);
    std::vector<int32_t> tokens;
    std::vector<uint64_t> offsets = {0};
    for (const auto& d : docs) {
      tokens.insert(tokens.end(), d.begin(), d.end());
      offsets.push_back(tokens.size());
    }
    data::write_shard((dir / (std::string(split) + "-00000.bin")).string(), tokens, offsets, vocab);
  }
  std::ofstream(dir / "manifest.json")
      << R"({"train": [{"file": "train-00000.bin"}], "val": [{"file": "val-00000.bin"}]})";
  return dir.string();
}

// The same under the system's temporary folder, named after `name` and the process, so
// that test runs of several checkouts on one machine never share a folder.
inline std::string write_corpus(const std::string& name, int vocab = 64) {
  return write_corpus_at(
      fs::temp_directory_path() / ("amber_trainer_" + name + "_" + std::to_string(::getpid())), vocab);
}

inline RunConfig small_run(const std::string& corpus, const std::string& out) {
  RunConfig c;
  c.model = tiny_model();
  c.train.steps = 6;
  c.train.micro_batch_tokens = 256;
  c.train.grad_accum = 2;
  c.train.eval_every = 3;
  c.train.checkpoint_every = 3;
  c.train.keep_checkpoints = 5;
  c.train.out_dir = out;
  c.train.device = "cpu";  // the CPU oracle; the GPU step has its own tests (gpu_step_test.cpp)
  c.optimizer.name = "muon";
  c.optimizer.lr = 3e-3;
  c.data.dir = corpus;
  c.data.max_seq_len = 64;
  c.validate();
  return c;
}

// The records of one type ("train", "eval") of a run's metrics.jsonl, in order.
inline std::vector<nlohmann::json> metrics_records(const std::string& out, const std::string& type) {
  std::ifstream in(fs::path(out) / "metrics.jsonl");
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) records.push_back(std::move(j));
  }
  return records;
}

inline std::vector<nlohmann::json> train_records(const std::string& out) { return metrics_records(out, "train"); }

// Runs the trainer (by default fresh, with its progress lines on) and returns what it
// printed. A run that throws hands stdout back first, so that the test's report is seen.
inline std::string printed_by(const RunConfig& c, TrainOptions options = {false, "", true}) {
  ::testing::internal::CaptureStdout();
  try {
    Trainer(c, std::move(options)).run();
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  return ::testing::internal::GetCapturedStdout();
}

// A corpus (of `vocab` tokens) and a small CPU run over it, in the test's own temporary
// folder, which goes when the test ends.
struct SmallRun {
  explicit SmallRun(int vocab = 64)
      : corpus(write_corpus_at(dir.path() / "corpus", vocab)), config(small_run(corpus, dir.file("run"))) {}
  std::string checkpoints() const { return dir.file("run") + "/checkpoints"; }
  const data::testing::TempDir dir;
  const std::string corpus;
  RunConfig config;
};

// One step of `model` (no optimizer) over `batches`: its norm, which adds up the squares
// that the MoE layer's expert weight-gradient products left, against the norm read from
// every gradient, within `relative`.
inline void expect_norm_from_product_squares(LanguageModel& model, const std::vector<data::Batch>& batches,
                                             double relative) {
  TrainStep step(model, nullptr, {});
  step.run(batches, 1.0);
  const double from_products = step.read().grad_norm;
  int written = 0;
  for (const auto& p : model.params()) written += p->grad_squares_written;
  EXPECT_EQ(written, 2) << "the MoE layer's gate/up and down weights";
  global_grad_norm(model, step.stats(), /*product_squares=*/false);
  EXPECT_NEAR(step.stats().read().grad_norm, from_products, relative * from_products);
}

}  // namespace amber::run_testing
