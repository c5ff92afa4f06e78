// What a run does with its out_dir: it owns it while it runs (a second run is refused),
// resumes from the newest checkpoint that loads when `latest` is gone, never starts
// afresh over an earlier run's checkpoints, and reports a folder or trainer state it
// cannot use as an amber::Error naming it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "amber/train/trainer.h"
#include "data/testing.h"
#include "train/run_testing.h"

namespace amber {
namespace {
using namespace run_testing;
using data::testing::expect_error;

// The step-N folders under <out>/checkpoints.
size_t checkpoint_count(const std::string& out) {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(out) / "checkpoints"))
    n += entry.is_directory() && entry.path().filename().string().rfind("step-", 0) == 0;
  return n;
}

TEST(RunFolder, SecondRunIntoAnOutDirInUseIsRefusedNamingItsHolder) {
  SmallRun run;
  {
    Trainer first(run.config, {});
    expect_error([&] { Trainer(run.config, {}); },
                 {run.config.train.out_dir, "in use by another amber train (pid " + std::to_string(::getpid()) + ")"});
    expect_error([&] { Trainer(run.config, {true, "", false}); }, {"in use"});
  }
  // Released when the first run ends: the folder is free again.
  Trainer(run.config, {}).run();
  EXPECT_EQ(train_records(run.config.train.out_dir).size(), 6u);
}

// `latest` removed or naming nothing: --resume continues from the newest step-N folder
// that loads, says so, and keeps metrics.jsonl and the older checkpoints.
TEST(RunFolder, ResumeWithoutLatestContinuesFromTheNewestCheckpointThatLoads) {
  SmallRun run;
  RunConfig& c = run.config;
  Trainer(c, {}).run();  // checkpoints at steps 3 and 6
  fs::remove(run.checkpoints() + "/latest");
  c.train.steps = 9;
  std::string out = printed_by(c, {true, "", true});
  EXPECT_NE(out.find("latest is missing"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + run.checkpoints() + "/step-00000006 at step 6"), std::string::npos) << out;
  std::vector<nlohmann::json> records = train_records(c.train.out_dir);
  ASSERT_EQ(records.size(), 9u);
  EXPECT_EQ(records.back()["step"], 9);
  EXPECT_TRUE(fs::exists(run.checkpoints() + "/step-00000003"));

  // `latest` names a folder that is gone, and the newest checkpoint is damaged: step 6.
  std::ofstream(run.checkpoints() + "/latest") << "step-00000042";
  fs::remove(run.checkpoints() + "/step-00000009/model.safetensors");
  out = printed_by(c, {true, "", true});
  EXPECT_NE(out.find("step-00000042"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + run.checkpoints() + "/step-00000006 at step 6"), std::string::npos) << out;
  // The records through step 6 kept, steps 7-9 logged again once.
  std::vector<int64_t> steps;
  for (const nlohmann::json& r : train_records(c.train.out_dir)) steps.push_back(r["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));

  // None loads: an error listing them, and the run folder as it was.
  fs::remove(run.checkpoints() + "/latest");
  for (const char* step : {"step-00000003", "step-00000006", "step-00000009"})
    fs::remove(run.checkpoints() + "/" + step + "/trainer_state.json");
  expect_error([&] { Trainer(c, {true, "", false}); }, {"latest is missing", "no checkpoint under", "step-00000003"});
  EXPECT_EQ(train_records(c.train.out_dir).size(), 9u);
  EXPECT_EQ(checkpoint_count(c.train.out_dir), 3u);
}

// A fresh run (no --resume) into a folder that holds step-N folders is refused, with or
// without `latest`, before it could prune them or truncate metrics.jsonl.
TEST(RunFolder, FreshRunOverCheckpointsWithoutLatestIsRefused) {
  SmallRun run;
  Trainer(run.config, {}).run();
  fs::remove(run.checkpoints() + "/latest");
  expect_error([&] { Trainer(run.config, {}); }, {"already holds checkpoints", "--resume"});
  EXPECT_EQ(train_records(run.config.train.out_dir).size(), 6u);
  EXPECT_EQ(checkpoint_count(run.config.train.out_dir), 2u);
}

TEST(RunFolder, OutDirThatIsAFileIsAnErrorNamingIt) {
  SmallRun run;
  const std::string file = run.dir.file("a_file");
  std::ofstream(file) << "not a folder";
  run.config.train.out_dir = file;
  expect_error([&] { Trainer(run.config, {}); }, {"train.out_dir '" + file + "'"});
  run.config.train.out_dir = file + "/run";
  expect_error([&] { Trainer(run.config, {}); }, {"train.out_dir '" + file + "/run'"});
}

// A checkpoints folder that cannot be written stops the run with an error naming it.
TEST(RunFolder, CheckpointsThatCannotBeWrittenAreAnErrorNamingThem) {
  SmallRun run;
  fs::create_directories(run.config.train.out_dir);
  std::ofstream(run.checkpoints()) << "a file where the checkpoints folder goes";
  expect_error([&] { Trainer(run.config, {}).run(); },
               {"cannot write the checkpoint of step 3 under " + run.checkpoints()});
}

// Wrong types and missing keys in trainer_state.json: errors that name the file and the key.
TEST(RunFolder, MalformedTrainerStateNamesTheFileAndKey) {
  SmallRun run;
  Trainer(run.config, {}).run();
  const std::string dir = run.checkpoints() + "/step-00000006";
  const std::string path = dir + "/trainer_state.json";
  nlohmann::json good;
  std::ifstream(path) >> good;
  RunConfig c = run.config;
  c.train.steps = 9;
  const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json state = good;
    edit(state);
    std::ofstream(path, std::ios::trunc) << state.dump();
  };
  with([](nlohmann::json& s) { s["format_version"] = "1"; });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "\"format_version\" must be an integer"});
  with([](nlohmann::json& s) { s["step"] = "six"; });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "\"step\" must be an integer"});
  with([](nlohmann::json& s) { s.erase("tokens_seen"); });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "\"tokens_seen\" is missing"});
  with([](nlohmann::json& s) { s["optimizer_steps"] = nullptr; });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "\"optimizer_steps\""});
  with([](nlohmann::json& s) { s.erase("loader"); });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "\"loader\" is missing"});
  with([](nlohmann::json& s) { s["loader"] = 7; });
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "loader state"});
  std::ofstream(path, std::ios::trunc) << "[1, 2]";
  expect_error([&] { Trainer(c, {true, "", false}); }, {path, "is not a JSON object"});
  with([](nlohmann::json&) {});
  Trainer(c, {true, "", false}).run();  // the repaired state resumes
  EXPECT_EQ(train_records(c.train.out_dir).size(), 9u);
}

// Settings that would stop a run only at its first update or preview, or train on NaN,
// are refused when the config is checked.
TEST(RunConfig, ValuesThatCanOnlyFailLaterAreRefusedUpFront) {
  const RunConfig base = small_run("corpus", "run");
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const auto refused = [&](const std::function<void(RunConfig&)>& edit, const std::string& fragment) {
    RunConfig c = base;
    edit(c);
    expect_error([&] { c.validate(); }, {fragment});
  };
  refused([&](RunConfig& c) { c.optimizer.lr = inf; }, "optimizer.lr must be a finite number");
  refused([&](RunConfig& c) { c.optimizer.lr = -1e-3; }, "optimizer.lr");
  refused([&](RunConfig& c) { c.optimizer.embed_lr = nan; }, "optimizer.embed_lr");
  refused([&](RunConfig& c) { c.optimizer.muon_lr = inf; }, "optimizer.muon_lr");
  refused([&](RunConfig& c) { c.optimizer.weight_decay = -0.1; }, "optimizer.weight_decay");
  refused([&](RunConfig& c) { c.optimizer.eps = 0; }, "optimizer.eps");
  refused([&](RunConfig& c) { c.optimizer.beta2 = 1; }, "optimizer.beta2 must be in [0, 1)");
  refused([&](RunConfig& c) { c.train.grad_clip = inf; }, "train.grad_clip");
  refused([&](RunConfig& c) { c.train.peak_tflops = nan; }, "train.peak_tflops");
  refused(
      [&](RunConfig& c) {
        c.train.sample_every = 2;
        c.train.sample_tokens = -1;
      },
      "train.sample_tokens must be positive");
  RunConfig fine = base;
  fine.optimizer.embed_lr = 0;  // 0 = lr
  fine.optimizer.weight_decay = 0;
  EXPECT_NO_THROW(fine.validate());
}

}  // namespace
}  // namespace amber
