// RunConfig: everything one training run reads from its TOML file: [model],
// [train], [optimizer], [schedule] and [data], with `extends` and
// `--set section.key=value` overrides. docs/config.md lists every key.
#pragma once

#include <string>
#include <vector>

#include "amber/model/config.h"
#include "amber/train/optimizer.h"
#include "amber/train/schedule.h"

namespace amber {

struct TrainConfig {
  int64_t steps = 1000;
  int64_t micro_batch_tokens = 8192;  // token budget of one micro-batch
  int grad_accum = 1;                 // micro-batches per optimizer step and process
  uint64_t seed = 1234;               // weights and data order
  std::string device = "auto";         // auto (a GPU when present) | cpu | cuda | cuda:N
  std::string compute_dtype = "f32";  // f32 | bf16 | f16: activations and working copies
  double grad_clip = 1.0;  // global-norm clip; 0 = off
  bool cuda_graph = true;  // GPU: replay each step from a captured CUDA graph
  bool gemm_tuning = true;  // GPU: measured cuBLASLt algorithms, kept in out_dir/gemm_algorithms.tsv
  int log_every = 10;
  int eval_every = 100;  // 0 = at the end only
  int eval_batches = 8;
  int checkpoint_every = 500;  // 0 = at the end only
  int keep_checkpoints = 3;
  int sample_every = 0;  // 0 = no previews
  std::vector<std::string> sample_prompts;
  int sample_tokens = 48;
  std::string out_dir = "runs/run";
  double peak_tflops = 0;  // for MFU/HFU; 0 = unknown (not printed)
  bool tensorboard = true;  // every record also as TensorBoard events in out_dir/tensorboard/
  int zero = 0;  // data parallel: 1 shards the optimizer state across the processes (ZeRO-1)
  double comm_timeout_s = 600;  // data parallel: a collective waiting longer ends the run
  // Data parallel: each gradient bucket's sum starts during the backward; false sums
  // them after it (the same result), to measure the overlap against.
  bool overlap_grad_sums = true;

  template <class Fn>
  void fields(Fn&& v) {
    v("steps", steps);
    v("micro_batch_tokens", micro_batch_tokens);
    v("grad_accum", grad_accum);
    v("seed", seed);
    v("device", device);
    v("compute_dtype", compute_dtype);
    v("grad_clip", grad_clip);
    v("cuda_graph", cuda_graph);
    v("gemm_tuning", gemm_tuning);
    v("log_every", log_every);
    v("eval_every", eval_every);
    v("eval_batches", eval_batches);
    v("checkpoint_every", checkpoint_every);
    v("keep_checkpoints", keep_checkpoints);
    v("sample_every", sample_every);
    v("sample_prompts", sample_prompts);
    v("sample_tokens", sample_tokens);
    v("out_dir", out_dir);
    v("peak_tflops", peak_tflops);
    v("tensorboard", tensorboard);
    v("zero", zero);
    v("comm_timeout_s", comm_timeout_s);
    v("overlap_grad_sums", overlap_grad_sums);
  }
};

struct DataConfig {
  std::string dir;        // output folder of `amber tokenize`
  std::string tokenizer;  // tokenizer.json (ids of bos/eos; decoding samples)
  int max_seq_len = 1024;  // longer documents are split into chunks
  std::string bos = "";    // token put before every document ("" = none)
  std::string eos = "";    // token put after every document ("" = none)

  template <class Fn>
  void fields(Fn&& v) {
    v("dir", dir);
    v("tokenizer", tokenizer);
    v("max_seq_len", max_seq_len);
    v("bos", bos);
    v("eos", eos);
  }
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  DataConfig data;

  void validate() const;
};

// Relative data paths are resolved against the directory the command runs in.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
RunConfig run_config_from_toml(const std::string& text, const std::string& origin);
std::string run_config_to_toml(const RunConfig& config);

}  // namespace amber
