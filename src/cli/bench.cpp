// `amber bench step` (the whole training step) and `amber bench kernel` (memory-bound
// kernels against the measured copy bandwidth; attention against a float64 reference).
#include <iomanip>
#include <iostream>

#include "amber/ops/attention_bench.h"
#include "amber/ops/kernel_bench.h"
#include "amber/train/run_config.h"
#include "amber/train/step_bench.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> overrides;
  StepBenchOptions options;
  std::string doc_lengths = "2048";
};

void run(BenchArgs& a) {
  const RunConfig config = load_run_config(a.config, a.overrides);
  a.options.model = config.model;
  a.options.optimizer = config.optimizer;
  const size_t dash = a.doc_lengths.find('-');
  a.options.doc_min = std::stoi(a.doc_lengths.substr(0, dash));
  a.options.doc_max = dash == std::string::npos ? a.options.doc_min : std::stoi(a.doc_lengths.substr(dash + 1));
  const StepBenchResult r = run_step_bench(a.options);
  std::cout << std::fixed << std::setprecision(2) << "config " << a.config << " | " << a.options.tokens
            << " tokens in " << r.lengths.size() << " documents (" << a.doc_lengths << ") | " << a.options.device
            << " " << a.options.compute_dtype << " | optimizer " << a.options.optimizer.name << "\n"
            << "step " << r.step_ms << " ms | " << std::setprecision(0) << r.tokens_per_s << " tokens/s | MFU "
            << std::setprecision(1) << 100 * r.mfu << "% HFU " << 100 * r.hfu << "% of " << std::setprecision(0)
            << a.options.peak_tflops << " TFLOP/s";
  if (r.gemm_tflops > 0)
    std::cout << " | measured GEMM peak " << r.gemm_tflops << " TFLOP/s (MFU " << std::setprecision(1)
              << 100 * r.mfu_vs_gemm << "% of it) | peak memory " << std::setprecision(2) << r.peak_memory_gib
              << " GiB";
  std::cout << " | loss " << std::setprecision(4) << r.loss << "\n";
}

void print_attention_bench(const std::string& which, Device device, int repeats) {
  std::cout << "| shape | heads, documents | error out / dq / dk / dv vs f64 | repeat | forward ms | forward "
               "TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n|---|---|---|---|---|---|---|---|\n";
  for (const AttentionBenchShape& shape : attention_bench_shapes(which)) {
    const AttentionBenchRow r = run_attention_bench(shape, device, repeats);
    std::cout << std::scientific << std::setprecision(1) << "| " << shape.name << " | " << shape.summary << " | "
              << r.error_out << " / " << r.error_dq << " / " << r.error_dk << " / " << r.error_dv << " | "
              << (r.repeat_identical ? "identical" : "DIFFERS")
              << (r.non_finite ? " NaN:" + std::to_string(r.non_finite) : "") << std::fixed << std::setprecision(3)
              << " | " << r.forward_ms << " | " << std::setprecision(1) << r.forward_tflops << " | "
              << std::setprecision(3) << r.forward_ms + r.backward_ms << " | " << std::setprecision(1)
              << r.total_tflops << " |" << std::endl;
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* step = bench->add_subcommand("step", "Time the whole training step (forward, backward, optimizer)");
  step->add_option("--config", a->config, "Config with a [model] table (e.g. configs/presets/kohaku-500m.toml)")
      ->required()
      ->check(CLI::ExistingFile);
  step->add_option("--set", a->overrides, "Override a config value (repeatable)");
  step->add_option("--device", a->options.device, "cpu, cuda or cuda:N")->capture_default_str();
  step->add_option("--dtype", a->options.compute_dtype, "Compute dtype: f32, bf16")->capture_default_str();
  step->add_option("--tokens", a->options.tokens, "Tokens per micro-batch")->capture_default_str();
  step->add_option("--doc-len", a->doc_lengths, "Document length, or a range MIN-MAX drawn uniformly")
      ->capture_default_str();
  step->add_option("--steps", a->options.steps, "Timed steps")->capture_default_str();
  step->add_option("--warmup", a->options.warmup, "Untimed steps first")->capture_default_str();
  step->add_option("--peak-tflops", a->options.peak_tflops, "Stated peak for MFU (H100/H200 SXM: 989)")
      ->capture_default_str();
  step->callback([a] { run(*a); });

  struct KernelArgs {
    std::string name = "all";
    std::string device = "cuda";
    int64_t tokens = 65536, width = 2048;
    int repeats = 20;
    std::string shape = "all";
  };
  auto k = std::make_shared<KernelArgs>();
  auto* kernel = bench->add_subcommand("kernel", "Time memory-bound kernels (TB/s beside the measured copy bandwidth)");
  kernel->add_option("name", k->name, "rmsnorm, swiglu, rope, all (the memory-bound ones) or attention")
      ->capture_default_str();
  kernel->add_option("--shape", k->shape, "attention only: issue 6's shape A, B, C, D, E or all")
      ->capture_default_str();
  kernel->add_option("--device", k->device, "cuda, cuda:N or cpu")->capture_default_str();
  kernel->add_option("--tokens", k->tokens, "Rows of the activation")->capture_default_str();
  kernel->add_option("--width", k->width, "Columns of the activation")->capture_default_str();
  kernel->add_option("--repeats", k->repeats, "Timed calls (best is kept)")->capture_default_str();
  kernel->callback([k] {
    if (k->name == "attention") return print_attention_bench(k->shape, device_from_name(k->device), k->repeats);
    const KernelBenchResult r = run_kernel_bench(k->name, device_from_name(k->device), k->tokens, k->width, k->repeats);
    std::cout << std::fixed << std::setprecision(3) << "device copy bandwidth (read + write): " << r.copy_tb_per_s
              << " TB/s\n| kernel | shape | ms | TB/s | of copy |\n|---|---|---|---|---|\n";
    for (const KernelBenchRow& row : r.rows)
      std::cout << "| " << row.name << " | " << row.shape << " | " << row.ms << " | " << row.tb_per_s << " | "
                << std::setprecision(1) << 100 * row.of_copy << "% |\n" << std::setprecision(3);
  });
}

}  // namespace amber::cli
