// What a run leaves to read afterwards: metrics.jsonl records with their wall-clock time,
// the run's elapsed seconds, perplexity and per-group learning rates; each step once
// after an interrupted run resumes; and train.log, the console with timestamps.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "amber/train/run_log.h"
#include "amber/train/trainer.h"
#include "train/run_testing.h"

namespace amber {
namespace {
using namespace run_testing;

const std::regex kTimestamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");

std::vector<nlohmann::json> all_records(const std::string& out) {
  std::ifstream in(std::filesystem::path(out) / "metrics.jsonl");
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(RunRecords, TimestampsAreUtcWithMilliseconds) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764959661007));
  EXPECT_EQ(utc_timestamp(t), "2025-12-05T18:34:21.007Z");
}

// Every record (train and eval) carries the UTC time it was written and the seconds
// since the run started, which never go back; the times lie within the test's span.
TEST(RunRecords, EveryRecordCarriesItsTimeAndTheRunsElapsedSeconds) {
  SmallRun run;
  const std::string before = utc_timestamp(std::chrono::system_clock::now());
  Trainer(run.config, {false, "", false}).run();
  const std::string after = utc_timestamp(std::chrono::system_clock::now());
  const std::vector<nlohmann::json> records = all_records(run.config.train.out_dir);
  ASSERT_EQ(records.size(), 6u + 2u) << "6 steps and 2 evaluations";
  double previous = 0;
  for (const nlohmann::json& r : records) {
    const std::string time = r.at("time").get<std::string>();
    EXPECT_TRUE(std::regex_match(time, kTimestamp)) << time;
    // ISO 8601 at one precision orders as text.
    EXPECT_LE(before, time);
    EXPECT_LE(time, after);
    const double elapsed = r.at("elapsed_s").get<double>();
    EXPECT_GE(elapsed, previous) << r.dump();
    previous = elapsed;
  }
}

// An evaluation records the held-out perplexity, exp of its loss.
TEST(RunRecords, EvaluationsRecordPerplexity) {
  SmallRun run;
  Trainer(run.config, {false, "", false}).run();
  const std::vector<nlohmann::json> evals = metrics_records(run.config.train.out_dir, "eval");
  ASSERT_EQ(evals.size(), 2u);
  for (const nlohmann::json& e : evals)
    EXPECT_DOUBLE_EQ(e.at("perplexity").get<double>(), std::exp(e.at("val_loss").get<double>())) << e.dump();
}

// Each parameter group's rate follows the schedule: Muon's matrices at muon_lr, the
// rest at lr, the embedding at embed_lr when it has its own; lr is AdamW's.
TEST(RunRecords, StepsRecordEachParameterGroupsLearningRate) {
  SmallRun run;
  RunConfig& c = run.config;
  c.optimizer.muon_lr = 0.02;
  c.optimizer.embed_lr = 0.01;
  c.schedule.warmup_steps = 3;
  Trainer(c, {false, "", false}).run();
  for (const nlohmann::json& r : train_records(c.train.out_dir)) {
    const double multiplier = r.at("lr").get<double>() / c.optimizer.lr;
    const nlohmann::json& groups = r.at("lr_groups");
    ASSERT_EQ(groups.size(), 3u) << r.dump();
    EXPECT_DOUBLE_EQ(groups.at("adamw").get<double>(), r.at("lr").get<double>());
    EXPECT_DOUBLE_EQ(groups.at("muon").get<double>(), 0.02 * multiplier);
    EXPECT_DOUBLE_EQ(groups.at("embedding").get<double>(), 0.01 * multiplier);
  }
  EXPECT_LT(train_records(c.train.out_dir).front().at("lr").get<double>(), c.optimizer.lr) << "warming up";
}

// A run that got past its last checkpoint (step 4) before it was interrupted logged
// steps 5 and 6; resumed from that checkpoint it logs them again. metrics.jsonl then
// holds each step (and each evaluation) once, in order, and the elapsed seconds go on
// from the last record kept instead of starting again from 0.
TEST(RunRecords, AResumedRunLeavesEachStepOnce) {
  SmallRun run;
  RunConfig& c = run.config;
  c.train.checkpoint_every = 4;
  c.train.eval_every = 2;
  Trainer(c, {false, "", false}).run();
  // A line cut short by the interruption, past the checkpoint's records.
  std::ofstream(std::filesystem::path(c.train.out_dir) / "metrics.jsonl", std::ios::app) << R"({"type": "tr)";
  Trainer(c, {false, run.checkpoints() + "/step-00000004", false}).run();
  std::vector<int64_t> steps, evals;
  double elapsed_at_4 = -1, elapsed_at_5 = -1;
  for (const nlohmann::json& r : all_records(c.train.out_dir)) {
    (r["type"] == "train" ? steps : evals).push_back(r["step"].get<int64_t>());
    if (r["type"] == "train" && r["step"] == 4) elapsed_at_4 = r["elapsed_s"].get<double>();
    if (r["type"] == "train" && r["step"] == 5) elapsed_at_5 = r["elapsed_s"].get<double>();
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(evals, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_GT(elapsed_at_5, elapsed_at_4);
  for (const auto& entry : std::filesystem::directory_iterator(c.train.out_dir))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
}

// train.log holds what the console printed, every line opened by its UTC time: the
// run header, each logged step's progress line, evaluations and checkpoints. A resumed
// run appends to it.
TEST(RunRecords, TrainLogHoldsTheConsoleWithTimestamps) {
  SmallRun run;
  RunConfig& c = run.config;
  c.train.log_every = 2;
  const std::string printed = printed_by(c);
  Trainer(c, {false, run.checkpoints() + "/step-00000003", false}).run();
  std::ifstream in(std::filesystem::path(c.train.out_dir) / "train.log");
  std::string line, text;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    ASSERT_GE(line.size(), 24u) << line;
    EXPECT_TRUE(std::regex_match(line.substr(0, 24), kTimestamp)) << line;
    EXPECT_EQ(line.find('\033'), std::string::npos) << "no terminal escapes: " << line;
    text += (line.size() > 25 ? line.substr(25) : "") + "\n";  // an empty console line has the time alone
  }
  EXPECT_GT(lines, 5);
  for (const char* part : {"model: ", "data: ", "MFU not reported", "step      2/6 [", "step      6/6 [", "eval @ step 3: val loss ",
                           "checkpoint: ", "resumed from "})
    EXPECT_NE(text.find(part), std::string::npos) << part << " is missing from train.log:\n" << text;
  EXPECT_NE(printed.find("step      2/6 ["), std::string::npos) << "the console still gets it:\n" << printed;
}

}  // namespace
}  // namespace amber
