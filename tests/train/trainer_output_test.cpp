// What a training run prints, and what it checks of its tokenizer before it starts: the
// progress lines, sample previews, skipped steps, and the data section's token errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "amber/data/bpe_trainer.h"
#include "amber/data/shard.h"
#include "amber/data/token_counts.h"
#include "amber/data/tokenize_corpus.h"
#include "amber/data/tokenizer_json.h"
#include "amber/train/trainer.h"
#include "data/testing.h"
#include "train/run_testing.h"

namespace amber {
namespace {
using namespace run_testing;
using data::testing::expect_error;
using data::testing::TempDir;

constexpr auto npos = std::string::npos;

// A byte-level BPE tokenizer of 262 tokens (256 bytes, 3 merges, bos/eos/pad), saved in
// `dir`; returns its path.
std::string write_tokenizer(const TempDir& dir) {
  data::BpeTrainerOptions o;
  o.vocab_size = 262;
  data::BpeTrainer bpe(o);
  bpe.add_documents({"the cat the cat the cat", "abab abab abab"});
  const std::string path = dir.file("tokenizer.json");
  data::save_tokenizer_json(bpe.train(), path);
  return path;
}

// Without a terminal each logged step (the first, every log_every-th, the last) gets
// a line of its own: progress bar, loss, lr, norm, tokens/s, MFU when a peak is set,
// peak memory (on the CPU, the process's resident set) and the time left.
TEST(TrainerOutput, ProgressLinesNameEachLoggedStep) {
  SmallRun run;
  RunConfig& c = run.config;
  c.train.log_every = 2;
  c.train.peak_tflops = 1;
  const std::string out = printed_by(c);
  for (const char* logged : {"step      1/6 [====                    ] loss ", "step      2/6 [========  ",
                             "step      4/6 [================  ", "step      6/6 [========================] loss "})
    EXPECT_NE(out.find(logged), npos) << logged << " is missing from:\n" << out;
  for (const char* quiet : {"step      3/6", "step      5/6"}) EXPECT_EQ(out.find(quiet), npos) << out;
  for (const char* part : {" | lr 3.00e-03", " | gnorm ", " tok/s | MFU ", "% | mem "})
    EXPECT_NE(out.find(part), npos) << part << " is missing from:\n" << out;
  EXPECT_TRUE(out.find(" MiB | ETA ") != npos || out.find(" GiB | ETA ") != npos) << out;
  EXPECT_NE(out.find("| ETA 0m00s\n"), npos) << "the last step has no time left:\n" << out;
  EXPECT_NE(out.find("eval @ step 3: val loss "), npos) << out;
  EXPECT_NE(out.find("checkpoint: " + run.dir.file("run") + "/checkpoints/step-00000006"), npos) << out;
}

// A step whose loss or gradient norm is not finite updates nothing, says so with a
// running count, and is marked in metrics.jsonl; the run goes on to its last step.
// A z-loss weight of 1e38 overflows every token's loss to infinity.
TEST(TrainerOutput, NonFiniteStepsAreSkippedCountedAndLogged) {
  SmallRun run;
  RunConfig& c = run.config;
  c.model.z_loss_weight = 1e38;
  c.train.eval_every = 0;
  const std::string out = printed_by(c);
  for (int step = 1; step <= 6; ++step) {
    const std::string line = "step " + std::to_string(step) + ": non-finite loss or gradient norm, update skipped (" +
                             std::to_string(step) + " skipped so far)\n";
    EXPECT_NE(out.find(line), npos) << line << " is missing from:\n" << out;
  }
  const std::vector<nlohmann::json> records = train_records(run.dir.file("run"));
  ASSERT_EQ(records.size(), 6u);
  for (const nlohmann::json& r : records) EXPECT_TRUE(r["skipped"].get<bool>()) << r.dump();
}

// With a tokenizer, sample_every previews a continuation of each prompt from the
// model being trained, at its steps and at the last, printed and recorded.
TEST(TrainerOutput, SamplePreviewsContinueEachPrompt) {
  SmallRun run(272);
  RunConfig& c = run.config;
  c.model.vocab_size = 272;
  c.data.tokenizer = write_tokenizer(run.dir);
  c.data.bos = "<|bos|>";
  c.data.eos = "<|eos|>";
  c.train.sample_every = 4;
  c.train.sample_prompts = {"the cat", "ab"};
  c.train.sample_tokens = 5;
  const std::string out = printed_by(c);
  for (const char* at : {"samples @ step 4:\n  [the cat]", "samples @ step 6:\n  [the cat]"})
    EXPECT_NE(out.find(at), npos) << at << " is missing from:\n" << out;
  EXPECT_NE(out.find("\n  [ab]"), npos) << out;
  EXPECT_EQ(out.find("samples @ step 3"), npos) << out;
  // metrics.jsonl records each preview: its step, and each prompt with its continuation.
  const std::vector<nlohmann::json> records = metrics_records(c.train.out_dir, "sample");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["step"], 4);
  EXPECT_EQ(records[1]["step"], 6);
  for (const nlohmann::json& r : records) {
    ASSERT_EQ(r["samples"].size(), 2u) << r.dump();
    EXPECT_EQ(r["samples"][0]["prompt"], "the cat");
    EXPECT_EQ(r["samples"][1]["prompt"], "ab");
    const std::string text = r["samples"][0]["text"].get<std::string>();
    // Bytes that are no UTF-8 (an untrained byte-level model emits them) are recorded as U+FFFD.
    if (text.find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_NE(out.find("  [the cat]" + text + "\n"), npos) << "the record's text is the printed one: " << text;
    }
  }
}

// A corpus tokenized without a validation split (--val-fraction 0) trains, and says
// that nothing is evaluated.
TEST(TrainerOutput, CorpusWithoutValidationSplitTrainsUnevaluated) {
  SmallRun run;
  std::ofstream(std::filesystem::path(run.corpus) / "manifest.json")
      << R"({"train": [{"file": "train-00000.bin"}], "val": []})";
  const std::string out = printed_by(run.config);
  EXPECT_NE(out.find("has no validation split, so nothing is evaluated"), npos) << out;
  EXPECT_EQ(out.find("eval @"), npos) << out;
  EXPECT_EQ(train_records(run.dir.file("run")).size(), 6u);
}

// A warm-up as long as the run is allowed (a short test run may want it), and noted.
TEST(TrainerOutput, WarmupThatOutlastsTheRunIsNoted) {
  SmallRun run;
  RunConfig& c = run.config;
  c.schedule.warmup_steps = 6;
  const std::string out = printed_by(c);
  EXPECT_NE(out.find("note: schedule.warmup_steps (6) is not below train.steps (6)"), npos) << out;
}

// A run resumed at or past train.steps says there is nothing to train.
TEST(TrainerOutput, ResumingAFinishedRunSaysSo) {
  SmallRun run;
  RunConfig& c = run.config;
  Trainer(c, {false, "", false}).run();
  ::testing::internal::CaptureStdout();
  Trainer(c, {true, "", true}).run();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("nothing to train: the run is at step 6 and train.steps is 6"), npos) << out;
  EXPECT_EQ(train_records(run.dir.file("run")).size(), 6u);
}

// data.bos and data.eos name tokens of data.tokenizer, whose vocabulary must fit the
// model's; sample previews need the tokenizer and their prompts; validation tokens must be
// ids of the model.
TEST(TrainerOutput, TokenizerSettingsThatCannotWorkAreRefused) {
  SmallRun run(272);
  RunConfig& c = run.config;
  c.data.bos = "<|bos|>";
  expect_error([&] { Trainer(c, {}); }, {"data.bos = '<|bos|>'", "needs data.tokenizer"});
  c.data.tokenizer = write_tokenizer(run.dir);
  c.model.vocab_size = 272;
  c.data.eos = "<|end|>";
  expect_error([&] { Trainer(c, {}); }, {"data.eos = '<|end|>'", "is not a token of the tokenizer"});
  c.data.eos = "<|eos|>";
  c.model.vocab_size = 64;
  expect_error([&] { Trainer(c, {}); }, {"the tokenizer has 262 tokens", "raise model.vocab_size"});
  c.model.vocab_size = 272;
  c.train.sample_every = 2;  // and no prompts
  expect_error([&] { Trainer(c, {}); }, {"train.sample_every = 2 needs", "train.sample_prompts"});
  c.data.bos.clear();
  c.train.sample_prompts = {"the", ""};  // "" has no bos to start from: refused before any step
  expect_error([&] { Trainer(c, {}); }, {"train.sample_prompts: '' encodes to no tokens"});
  c.data.tokenizer.clear();
  c.data.bos.clear();
  c.data.eos.clear();
  c.train.sample_prompts = {"the"};
  expect_error([&] { Trainer(c, {}); }, {"train.sample_every = 2 needs data.tokenizer"});
  // A validation shard from a larger tokenizer is refused before the first step too.
  c.train.sample_every = 0;
  const std::vector<int32_t> tokens = {5, 9, 300, 7};
  const std::vector<uint64_t> offsets = {0, 4};
  data::write_shard((std::filesystem::path(run.corpus) / "val-00000.bin").string(), tokens, offsets, 512);
  expect_error([&] { Trainer(c, {}); }, {"validation token id 300 is outside model.vocab_size 272"});
}

// A preview prompt whose tokens and train.sample_tokens pass model.max_position stops
// the run before its first step, not at its first preview.
TEST(TrainerOutput, PreviewsPastTheContextAreRefusedBeforeTheFirstStep) {
  SmallRun run(272);
  RunConfig& c = run.config;
  c.data.tokenizer = write_tokenizer(run.dir);
  c.model.vocab_size = 272;
  c.model.max_position = 30;
  c.train.sample_every = 2;
  const std::string long_prompt = "abab abab abab abab abab abab abab abab";
  c.train.sample_prompts = {"the cat", long_prompt};
  c.train.sample_tokens = 20;
  expect_error([&] { Trainer(c, {}); },
               {"train.sample_prompts: '" + long_prompt + "'", "train.sample_tokens = 20", "model.max_position 30"});
  c.train.sample_tokens = 4;
  EXPECT_NO_THROW(Trainer(c, {}));
}

// Shards from an amber that stored no token counts still train: the trainer counts the
// training split itself and says so once; with the counts stored beside the shards (as
// amber tokenize writes them) it says nothing and reaches the same baseline, bit for bit.
TEST(TrainerOutput, ShardsWithoutStoredTokenCountsTrainOnTheSameBaseline) {
  SmallRun run;  // its manifest names no token counts, as an older amber tokenize wrote it
  RunConfig& c = run.config;
  const std::string note = "has no stored token counts";
  const std::string counted_out = printed_by(c);
  EXPECT_NE(counted_out.find(note), npos) << counted_out;
  EXPECT_EQ(counted_out.find(note), counted_out.rfind(note)) << "said more than once:\n" << counted_out;
  const std::vector<nlohmann::json> counted = metrics_records(c.train.out_dir, "eval");

  const std::filesystem::path corpus(run.corpus);
  const data::TokenCounts counts = data::count_shard_tokens(data::list_shards(run.corpus, "train"));
  std::ofstream(corpus / "train-token-counts.json") << data::token_counts_json(counts).dump();
  std::ofstream(corpus / "manifest.json") << R"({"train": [{"file": "train-00000.bin"}],)"
                                          << R"( "val": [{"file": "val-00000.bin"}],)"
                                          << R"( "train_token_counts": "train-token-counts.json"})";
  c.train.out_dir = run.dir.file("stored");
  const std::string stored_out = printed_by(c);
  EXPECT_EQ(stored_out.find(note), npos) << stored_out;
  const std::vector<nlohmann::json> stored = metrics_records(c.train.out_dir, "eval");
  ASSERT_EQ(stored.size(), counted.size());
  ASSERT_FALSE(stored.empty());
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i]["unigram_loss"].get<double>(), counted[i]["unigram_loss"].get<double>());
    EXPECT_EQ(stored[i]["val_loss"].get<double>(), counted[i]["val_loss"].get<double>());
  }
}

}  // namespace
}  // namespace amber
