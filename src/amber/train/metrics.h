// MetricsSink: where a run reports: metrics.jsonl (one record per step, evaluation and
// sample preview, each with its wall-clock time), the console (a progress line per
// logged step and the run's notes, copied with timestamps into train.log) and, on a GPU,
// the card's telemetry (SM clock, board power, the device pool's peak memory).
// Only the process whose RunRole writes metrics writes any of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "amber/core/cuda_runtime.h"
#include "amber/io/tensorboard.h"
#include "amber/core/device.h"
#include "amber/model/mlp.h"
#include "amber/train/run_config.h"
#include "amber/train/run_log.h"
#include "amber/train/run_role.h"
#include "amber/train/step.h"

namespace amber {

// 950.0, 12.5k, 3.2M, 1.1G: counts and rates on the console.
std::string format_count(double x);

// On a GPU, samples the card's SM clock and board power from construction until
// destruction, reported per stretch between logged steps: a card at its power limit
// runs below its boost clock, which explains tokens/s that sink over the first minute
// (docs/perf/step.md). However a run ends, no sampling thread outlives this object.
class CardTelemetry {
 public:
  explicit CardTelemetry(Device device);
  // The card's means since the last take (or the start); sampling goes on when `again`.
  // Not available on the CPU.
  cuda::CardState take(bool again);
  ~CardTelemetry();
  CardTelemetry(const CardTelemetry&) = delete;
  CardTelemetry& operator=(const CardTelemetry&) = delete;

 private:
  Device device_;
};

// A step the device has finished, as the sink reports it.
struct FinishedStep {
  int64_t step = 0;                   // its number, from 1
  AccumulatedStep stats;              // as the device left them
  double lr = 0;                      // the base learning rate times the schedule's multiplier
  // Each parameter group's rate (Optimizer::learning_rates) times the multiplier.
  std::vector<std::pair<std::string, double>> lr_groups;
  double seconds = 0;                 // from its issue (or its predecessor's end) to its end
  std::vector<int32_t> lengths;       // of its documents, over its micro-batches
  bool replayed = false;              // whether it ran from the captured CUDA graph
  int64_t tokens_seen = 0;            // trained tokens of the run so far, this step's included
  int64_t skipped_steps = 0;          // of the run so far, this step's included
  std::vector<RoutingStats> routing;  // its MoE layers' expert use (none for a dense model)
};

class MetricsSink {
 public:
  // progress: print a progress line at logged steps; peak_tflops: MFU's denominator
  // (0: no MFU; device_peaks.h). The run's clock (elapsed_s) starts here.
  MetricsSink(const RunConfig& config, RunRole role, bool progress, double peak_tflops);
  // Once the run is known to start: opens <out_dir>/metrics.jsonl and train.log and
  // writes the resolved config to <out_dir>/config.toml. A run resumed at
  // `resumed_step` keeps the records up to that step (those after it are the
  // interrupted process's, which this one logs again) and appends; its elapsed_s goes
  // on from the last record kept. A fresh run starts both files anew.
  void open(bool resumed, int64_t resumed_step);

  // For the run's notes: std::cout (and train.log) where this process reports, else a
  // stream that drops them. line() first clears a terminal's progress line.
  std::ostream& console() { return role_.writes_metrics() ? console_ : dropped_; }
  std::ostream& line() { return console() << line_start_; }

  // Starts the clock of the progress line's time estimate at the run's first step.
  void begin_run(int64_t first_step);
  // A step's record, its skip notice and, at logged steps, its progress line.
  void log_step(const FinishedStep& step, Device device, CardTelemetry& cards);
  void log_eval(int64_t step, double val_loss, double unigram_loss, int64_t val_tokens);
  // The previews' continuations of their prompts, printed and recorded.
  void log_samples(int64_t step, const std::vector<std::string>& prompts, const std::vector<std::string>& texts);

 private:
  // Writes `record` with its wall-clock time and the run's elapsed seconds.
  void log_json(nlohmann::json record);
  void print_progress(const FinishedStep& step, const nlohmann::json& record, const cuda::CardState& card);

  const RunConfig& config_;
  RunRole role_;
  bool progress_;
  double peak_tflops_;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // with train.tensorboard
  RunLogBuffer log_buffer_{std::cout};
  std::ostream console_{&log_buffer_};
  std::ostream dropped_{nullptr};
  // A terminal gets one self-overwriting progress line; a log file gets plain lines.
  bool terminal_;
  const char* line_start_;
  std::chrono::steady_clock::time_point run_start_;  // of the progress line's time estimate
  std::chrono::steady_clock::time_point process_start_;
  double elapsed_before_ = 0;  // seconds the run had run in earlier processes, for a resumed run
  int64_t first_step_ = 0;
};

}  // namespace amber
