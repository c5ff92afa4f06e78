// The whole-step benchmark behind `amber bench step`: one model, one synthetic packed
// batch, warm-up then timed optimizer steps; reports tokens/s, MFU and HFU against
// the stated peak and against the measured dense GEMM rate, step time, peak memory and,
// for an MoE model, how evenly its last step routed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/model/config.h"
#include "amber/model/mlp.h"
#include "amber/train/optimizer.h"
#include "amber/train/run_config.h"

namespace amber {

struct StepBenchOptions {
  ModelConfig model;
  OptimizerConfig optimizer;
  double grad_clip = TrainConfig{}.grad_clip;  // global-norm clip, as train.grad_clip (0: off)
  std::string device = "cuda";
  std::string compute_dtype = "bf16";
  int64_t tokens = 16384;
  int doc_min = 2048, doc_max = 2048;  // document lengths uniform in [min, max]
  int warmup = 3, steps = 10;
  // After the warm-up steps, more until this much time has passed: under a training
  // step an H200 reaches its 700 W cap and lowers its clocks within a second or two,
  // and steps timed before that read boost clocks (Kohaku-200M: 35.5 ms over 10 steps
  // after 3, 36.9 over 80; docs/perf/step.md, fc5f14d). 0: the warm-up steps alone.
  double warmup_seconds = 2.0;
  double peak_tflops = 0;  // MFU's denominator; 0: no MFU (`amber bench step` fills in train/device_peaks.h's)
  uint64_t seed = 1;
  bool profile = false;    // GPU milliseconds per op and step (with a graph: mean of the timed replays)
  bool cuda_graph = true;  // replay the step from a captured CUDA graph (GPU)
  // Connect the launcher's communicator (as `amber train` does) and step through it: at
  // a world of one (RANK=0 WORLD_SIZE=1 ...) what the data-parallel path costs.
  bool communicator = false;
  // An op whose entry point runs twice in every call (bench/op_repeat.h), or "".
  std::string twice;
};

struct StepBenchResult {
  double step_ms = 0, tokens_per_s = 0, mfu = 0, hfu = 0;
  double gemm_tflops = 0;  // measured 8192^3 GEMM in the compute dtype (0 on the CPU)
  double mfu_vs_gemm = 0;
  double peak_memory_gib = 0;
  double loss = 0;
  std::vector<int32_t> lengths;
  std::vector<std::pair<std::string, double>> op_ms;  // per step, largest first (--profile)
  // The last step's routing, per MoE layer (empty for a dense model): how even the
  // experts' loads were that the expert products' times reflect.
  std::vector<RoutingStats> routing;
  bool on_gpu = false;    // the step ran on a GPU
  bool replayed = false;  // the timed steps replayed a captured CUDA graph
  std::string backend;    // the communicator's ("none" without --communicator)
  int64_t twice_calls = 0;  // calls of options.twice that ran twice in the first step
  int warmup_steps = 0;   // untimed steps run (warmup, or more to fill warmup_seconds)
  cuda::CardState card;   // the GPU's SM clock and power over the timed steps
};

StepBenchResult run_step_bench(const StepBenchOptions& options);

}  // namespace amber
