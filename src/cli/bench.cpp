// `amber bench step` (the whole training step) and `amber bench kernel` (memory-bound
// kernels against the measured copy bandwidth; attention against a float64 reference;
// MoE grouped products against both roofline limits).
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <set>

#include "amber/ops/gemm.h"
#include "amber/ops/grouped_gemm.h"
#include "amber/train/device_peaks.h"
#include "amber/train/run_config.h"
#include "bench/attention_bench.h"
#include "bench/grouped_bench.h"
#include "bench/kernel_bench.h"
#include "bench/op_repeat.h"
#include "bench/step_bench.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> overrides;
  StepBenchOptions options;
  std::string doc_lengths = "2048";
  bool heuristic_gemm = false;
  std::string gemm_tuning;
};

void run(BenchArgs& a) {
  const RunConfig config = load_run_config(a.config, a.overrides);
  set_gemm_tuning({.measured = !a.heuristic_gemm, .file = a.gemm_tuning});
  a.options.model = config.model;
  a.options.optimizer = config.optimizer;
  a.options.grad_clip = config.train.grad_clip;
  const size_t dash = a.doc_lengths.find('-');
  a.options.doc_min = std::stoi(a.doc_lengths.substr(0, dash));
  a.options.doc_max = dash == std::string::npos ? a.options.doc_min : std::stoi(a.doc_lengths.substr(dash + 1));
  // MFU against --peak-tflops, else as a training run would measure it.
  MfuPeak peak{a.options.peak_tflops, ""};
  if (peak.tflops == 0) {
    TrainConfig train = config.train;
    train.compute_dtype = a.options.compute_dtype;
    peak = mfu_peak(train, device_from_name(a.options.device));
    a.options.peak_tflops = peak.tflops;
  }
  const StepBenchResult r = run_step_bench(a.options);
  std::cout << std::fixed << std::setprecision(2) << "config " << a.config << " | " << a.options.tokens
            << " tokens in " << r.lengths.size() << " documents (" << a.doc_lengths << ") | " << a.options.device
            << " " << a.options.compute_dtype << " | optimizer " << a.options.optimizer.name;
  if (a.options.grad_clip > 0) std::cout << ", gradient norm clipped at " << a.options.grad_clip;
  if (a.options.communicator) std::cout << " | communicator " << r.backend;
  std::cout << (r.replayed ? " | CUDA graph" : " | eager") << " | " << a.options.steps << " steps timed after "
            << r.warmup_steps;
  if (!a.options.twice.empty())
    std::cout << " | " << a.options.twice << " run twice (" << r.twice_calls << " calls a step)";
  std::cout << "\n";
  if (!r.routing.empty()) {
    // The expert products' times depend on it: the weight gradients' reductions are the
    // experts' rows (docs/perf/moe.md). Printed before the step's line, which scripts
    // read as the output's last line.
    const RoutingSummary s = summarize_routing(r.routing);
    std::cout << "routing of the last step: busiest expert " << std::setprecision(2) << s.worst_max_over_mean
              << "x the mean rows (" << s.worst_layer << "), " << s.mean_max_over_mean << "x averaged over the "
              << r.routing.size() << " MoE layers | dead experts " << s.dead_experts << "\n";
  }
  std::cout << "step " << r.step_ms << " ms | " << std::setprecision(0) << r.tokens_per_s << " tokens/s | ";
  if (a.options.peak_tflops > 0)
    std::cout << "MFU " << std::setprecision(1) << 100 * r.mfu << "% HFU " << 100 * r.hfu << "% of "
              << std::setprecision(0) << a.options.peak_tflops << " TFLOP/s";
  else
    std::cout << peak.note;
  if (r.gemm_tflops > 0)
    std::cout << " | measured GEMM peak " << r.gemm_tflops << " TFLOP/s (MFU " << std::setprecision(1)
              << 100 * r.mfu_vs_gemm << "% of it) | peak memory " << std::setprecision(2) << r.peak_memory_gib
              << " GiB";
  // Every step trains on the same batch and warm-up runs for a time, not a count: the
  // loss is the last step's, after however many steps this process ran.
  std::cout << " | loss " << std::setprecision(4) << r.loss << " at step " << r.warmup_steps + a.options.steps;
  // A card at its power limit runs below its boost clock (docs/perf/step.md, fc5f14d).
  if (r.card.available)
    std::cout << " | SM clock " << std::setprecision(0) << r.card.sm_mhz << " MHz, " << r.card.watts << " W of "
              << r.card.limit_watts << " W";
  std::cout << "\n";
  if (r.op_ms.empty()) return;
  // With events around every op (and, replaying a graph, a host wait after each step to
  // read them) the step runs a little slower than unprofiled.
  double total = 0;
  for (const auto& [op, ms] : r.op_ms) total += ms;
  const char* source = r.replayed ? "GPU time per step by op, mean of the timed graph replays"
                       : r.on_gpu  ? "GPU time per step by op, eager steps"
                                   : "CPU time per step by op, host clock around each op";
  std::cout << source << " ("
            << std::setprecision(2) << total << " ms of " << r.step_ms << " ms):\n| op | ms | share |\n|---|---|---|\n";
  for (const auto& [op, ms] : r.op_ms)
    std::cout << "| " << op << " | " << std::setprecision(3) << ms << " | " << std::setprecision(1)
              << 100 * ms / r.step_ms << "% |\n";
}

// The products of one block's linear layers (forward, input gradient, weight
// gradient) and of one LM-head chunk, at `tokens` rows.
std::vector<GemmBenchShape> model_gemm_shapes(const ModelConfig& m, int64_t tokens, int64_t chunk) {
  const int64_t dim = m.dim, q = int64_t{m.heads} * m.resolved_head_dim();
  const int64_t kv = int64_t{m.resolved_kv_heads()} * m.resolved_head_dim(), hidden = m.resolved_mlp_hidden();
  const int64_t up = m.mlp_is_gated() ? 2 * hidden : hidden;
  std::vector<GemmBenchShape> shapes;
  const auto linear = [&](const std::string& name, int64_t in, int64_t out, int64_t rows) {
    shapes.push_back({name + ", forward", rows, out, in, false, true, false, 0.0});
    shapes.push_back({name + ", input grad", rows, in, out, false, false, false, 0.0});
    shapes.push_back({name + ", weight grad", out, in, rows, true, false, true, 1.0});
  };
  linear("qkv_proj (q, k, v stacked)", dim, q + 2 * kv, tokens);
  linear("o_proj", q, dim, tokens);
  linear("mlp up", dim, up, tokens);
  linear("mlp down", hidden, dim, tokens);
  shapes.push_back({"head chunk, logits", chunk, m.vocab_size, dim, false, true, false, 0.0});  // in w's dtype
  shapes.push_back({"head chunk, input grad", chunk, dim, m.vocab_size, false, false, false, 0.0});
  shapes.push_back({"head chunk, weight grad", m.vocab_size, dim, chunk, true, false, true, 1.0});
  return shapes;
}

void print_gemm_bench(const ModelConfig& m, int64_t tokens, int64_t chunk, Device device, int candidates,
                      int repeats) {
  const std::vector<GemmBenchRow> rows = run_gemm_bench(model_gemm_shapes(m, tokens, chunk), device, candidates,
                                                        repeats);
  std::cout << "cuBLASLt products of one block and one head chunk, " << tokens << " tokens, bf16 operands; "
            << "heuristic: cuBLASLt's first answer (amber's with train.gemm_tuning off); best: the fastest of the first "
            << candidates << " (tuning, on by default, times the first 16)\n"
            << "| product | m x n x k | heuristic ms | TFLOP/s | best ms | rank | TFLOP/s | heuristic / best |\n"
            << "|---|---|---|---|---|---|---|---|\n" << std::fixed;
  double block_heuristic = 0, block_best = 0;
  for (const GemmBenchRow& r : rows) {
    if (r.ms.empty() || r.ms[0] < 0) continue;
    size_t best = 0;
    for (size_t i = 1; i < r.ms.size(); ++i)
      if (r.ms[i] > 0 && r.ms[i] < r.ms[best]) best = i;
    const double flop = 2.0 * static_cast<double>(r.shape.m) * static_cast<double>(r.shape.n) *
                        static_cast<double>(r.shape.k);
    const auto tflops = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };
    std::cout << "| " << r.shape.name << " | " << r.shape.m << " x " << r.shape.n << " x " << r.shape.k << " | "
              << std::setprecision(3) << r.ms[0] << " | " << std::setprecision(0) << tflops(r.ms[0]) << " | "
              << std::setprecision(3) << r.ms[best] << " | " << best << " | " << std::setprecision(0)
              << tflops(r.ms[best]) << " | " << std::setprecision(3) << r.ms[0] / r.ms[best] << " |\n";
    if (r.shape.name.rfind("head", 0) != 0) {
      block_heuristic += r.ms[0];
      block_best += r.ms[best];
    }
  }
  std::cout << "one block: heuristic " << std::setprecision(3) << block_heuristic << " ms, best " << block_best
            << " ms; x " << m.depth << " blocks: " << block_heuristic * m.depth << " against "
            << block_best * m.depth << " ms\n";
}

void print_attention_bench(const std::string& which, Device device, int repeats, const std::string& inputs_dir,
                           bool portable) {
  std::cout << "amber attention, " << (portable ? "portable mma.sync kernels" : "fastest kernels for this card")
            << "\n";
  std::cout << "| shape | heads, documents | error out / dq / dk / dv vs f64 | repeat | forward ms | forward "
               "TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n|---|---|---|---|---|---|---|---|\n";
  for (const AttentionBenchShape& shape : attention_bench_shapes(which)) {
    const AttentionBenchRow r = run_attention_bench(shape, device, repeats, inputs_dir, portable);
    std::cout << std::scientific << std::setprecision(1) << "| " << shape.name << " | " << shape.summary << " | "
              << r.error_out << " / " << r.error_dq << " / " << r.error_dk << " / " << r.error_dv << " | "
              << (r.repeat_identical ? "identical" : "DIFFERS")
              << (r.non_finite ? " NaN:" + std::to_string(r.non_finite) : "") << std::fixed << std::setprecision(3)
              << " | " << r.forward_ms << " | " << std::setprecision(1) << r.forward_tflops << " | "
              << std::setprecision(3) << r.forward_ms + r.backward_ms << " | " << std::setprecision(1)
              << r.total_tflops << " |" << std::endl;
  }
}

void print_grouped_bench(const std::string& which, const std::vector<int64_t>& tokens, const std::string& routing,
                         uint64_t seed, const std::string& device_name, int repeats, const std::string& inputs_dir,
                         const std::vector<std::string>& variants) {
  AMBER_CHECK(routing == "both" || routing == "uniform" || routing == "skewed",
              "bench kernel grouped: unknown --routing '", routing, "'; valid: uniform, skewed, both");
  const Device device = device_from_name(device_name);
  AMBER_CHECK(grouped_gemm_available(device), "bench kernel grouped: ", device_name,
              " has no grouped products (the GPU kernels run on Hopper, sm_90a, in builds with sm_90a code); "
              "use a Hopper card or --device cpu --shape tiny");
  for (const std::string& v : variants) grouped_variant(v);  // a bad name stops the run before any timing
  const std::vector<std::string> routings =
      routing == "both" ? std::vector<std::string>{"uniform", "skewed"} : std::vector<std::string>{routing};
  std::vector<GroupedBenchCase> cases;
  for (const GroupedBenchShape& shape : grouped_bench_shapes(which)) {
    std::cout << "shape " << shape.name << ": " << shape.summary << "\n";
    for (int64_t t : tokens.empty() ? shape.tokens : tokens)
      for (const std::string& r : routings)
        cases.push_back({shape, t, r, route_tokens(t, shape.experts, shape.topk, r, seed), {}});
  }
  std::cout << "routing (seed " << seed << "; skewed: Zipf popularity, exponent " << kSkewedZipfExponent
            << ", top-k drawn without replacement)\n| shape | tokens | routing | rows | rows per expert max / mean / "
               "min | max / mean | empty experts |\n|---|---|---|---|---|---|---|\n"
            << std::fixed;
  for (const GroupedBenchCase& c : cases) {
    const auto [lo, hi] = std::minmax_element(c.route.counts.begin(), c.route.counts.end());
    const double mean = static_cast<double>(c.route.offsets.back()) / static_cast<double>(c.shape.experts);
    std::cout << "| " << c.shape.name << " | " << c.tokens << " | " << c.routing << " | " << c.route.offsets.back()
              << " | " << *hi << " / " << std::setprecision(1) << mean << " / " << *lo << " | "
              << std::setprecision(2) << *hi / mean << " | "
              << std::count(c.route.counts.begin(), c.route.counts.end(), 0) << " |\n";
  }
  const std::string cases_file = inputs_dir.empty() ? "" : inputs_dir + "/grouped_cases.json";
  const GroupedRoofs roofs = measure_grouped_roofs(device, device.is_cuda() ? 8192 : 512, repeats);
  // The routing is on disk before any timing, so a crashed run still leaves it.
  if (!cases_file.empty()) save_grouped_cases(cases_file, cases, roofs, device_name);
  std::cout << "roofs: device copy " << std::setprecision(3) << roofs.copy_tb_per_s << " TB/s (read + write); dense "
            << "bf16 gemm() " << roofs.gemm_size << "^3 " << std::setprecision(1) << roofs.gemm_tflops
            << " TFLOP/s\nbf16 operands, f32 weight gradient; TFLOP/s counts 2 x rows x n x k; bytes: activations "
               "in and out, weights of experts with rows (every expert's f32 gradient); error: each shape's first "
               "case, its first 8 experts' rows against float64 on the host\n"
            << "| shape | tokens | routing | product | error vs f64 | ms | TFLOP/s | TB/s | memory limit ms | compute "
               "limit ms | nearer limit | of it |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::set<std::string> checked;  // shapes whose first case (their smallest) measured its errors
  for (GroupedBenchCase& c : cases) {
    run_grouped_bench(c, device, roofs, {repeats, checked.insert(c.shape.name).second, variants});
    for (const GroupedBenchRow& r : c.rows) {
      std::cout << "| " << c.shape.name << " | " << c.tokens << " | " << c.routing << " | " << r.product << " | ";
      if (r.error >= 0)
        std::cout << std::scientific << std::setprecision(1) << r.error << std::fixed;
      else
        std::cout << "-";
      std::cout << " | " << std::setprecision(4) << r.ms << " | " << std::setprecision(1) << r.tflops << " | "
                << std::setprecision(3) << r.tb_per_s << " | " << std::setprecision(4) << r.memory_ms << " | "
                << r.compute_ms << " | " << (r.memory_ms > r.compute_ms ? "memory" : "compute") << " | "
                << std::setprecision(1) << 100 * r.of_bound << "% |" << std::endl;
    }
    if (!cases_file.empty()) save_grouped_cases(cases_file, cases, roofs, device_name);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* step = bench->add_subcommand("step", "Time the whole training step (forward, backward, optimizer)");
  step->add_option("--config", a->config,
                   "Config with a [model] table (e.g. configs/presets/kohaku-500m.toml); its [optimizer] and "
                   "train.grad_clip (default 1.0; --set train.grad_clip=0 for none) shape the step as in training")
      ->required()
      ->check(CLI::ExistingFile);
  step->add_option("--set", a->overrides, "Override a config value (repeatable)");
  step->add_option("--device", a->options.device, "cpu, cuda or cuda:N")->capture_default_str();
  step->add_option("--dtype", a->options.compute_dtype, "Compute dtype: f32, bf16")->capture_default_str();
  step->add_option("--tokens", a->options.tokens, "Tokens per micro-batch")->capture_default_str();
  step->add_option("--doc-len", a->doc_lengths, "Document length, or a range MIN-MAX drawn uniformly")
      ->capture_default_str();
  step->add_option("--steps", a->options.steps, "Timed steps")->capture_default_str();
  step->add_option("--warmup", a->options.warmup,
                   "Untimed steps first (on a GPU the third step is captured as a CUDA graph, so keep at least 3)")
      ->capture_default_str();
  step->add_option("--warmup-seconds", a->options.warmup_seconds,
                   "After the --warmup steps, keep warming up for this long: a GPU under training load reaches "
                   "its power cap and its steady clocks within a second or two (0: the --warmup steps alone)")
      ->capture_default_str();
  step->add_option("--peak-tflops", a->options.peak_tflops, "Stated peak for MFU in TFLOP/s; by default train.peak_tflops, else the card's "
                  "stated dense bf16 peak where known (H100/H200 SXM: 989; docs/training.md)");
  step->add_flag("--profile", a->options.profile,
                 "Also print the time per op. On a GPU: CUDA events around every op entry point, recorded as nodes "
                 "of the step's CUDA graph (the mean over the timed replays) or, with --no-graph, summed over the "
                 "eager steps. On the CPU: the host clock around every op entry point, summed over the timed steps");
  step->add_option("--twice", a->options.twice,
                   "Run this op's entry point twice in every call, so the step's time shows what the op costs inside "
                   "it (on a GPU at its power cap that is its energy, not its eager time; docs/perf/step.md). "
                   "One of: " + profile::repeatable_op_list());
  step->add_flag("!--no-graph", a->options.cuda_graph,
                 "Issue every step's kernels from the host instead of replaying a captured CUDA graph");
  step->add_flag("--communicator", a->options.communicator,
                 "Step through the communicator the launcher's environment gives, as `amber train` does; at a "
                 "world of one (e.g. RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500) it "
                 "measures what the data-parallel path costs against a run without it");
  step->add_flag("--heuristic-gemm", a->heuristic_gemm,
                 "GPU: run cuBLASLt's first heuristic algorithm for every product, instead of timing its first 16 "
                 "for each new product shape and keeping the fastest (as training does by default)");
  step->add_option("--gemm-tuning", a->gemm_tuning,
                   "GPU: keep the measured algorithms in this file, and reuse the choices it already holds "
                   "(a later run that names it times nothing)")
      ->excludes("--heuristic-gemm");
  step->callback([a] { run(*a); });

  struct KernelArgs {
    std::string name = "all";
    std::string device = "cuda";
    std::vector<int64_t> tokens;
    int64_t width = 2048;
    int repeats = 20;
    std::string shape = "all";
    std::string inputs_dir;
    bool portable = false;
    int64_t vocab = 65536, dim = 1280, chunk = 2048;
    std::string config;
    int candidates = 8;
    std::string routing = "both";
    uint64_t seed = 1;
    std::vector<std::string> variants = {"default"};
  };
  auto k = std::make_shared<KernelArgs>();
  auto* kernel = bench->add_subcommand("kernel", "Time kernels: memory-bound ones in TB/s beside the measured copy bandwidth, attention against PyTorch's shapes, the LM head against materialised logits, MoE grouped products against both roofline limits");
  kernel->add_option("name", k->name,
                     "rmsnorm, swiglu, rope, quant (the FP8 quantizers), all (the memory-bound ones), attention, "
                     "lmhead (chunked linear cross-entropy against materialised logits), gemm (a model's products against "
                     "cuBLASLt's other algorithms), glu (the MLP's products with SwiGLU in their epilogues "
                     "against the product and the pass) or grouped (MoE expert products, ops/grouped_gemm.h, "
                     "against the copy-bandwidth and dense-GEMM limits)")
      ->capture_default_str();
  kernel->add_option("--shape", k->shape,
                     "attention: issue 6's shape A, B, C, D or E, F (20-100-token documents), or all; grouped: mm1 "
                     "(gpt-oss-120b MM1: 128 experts, top-4, 2880 -> 5760, 128 to 32768 tokens), kohaku768 / "
                     "kohaku896 (64 experts, top-8, dim 768 / 896, expert width 384 / 512, 16384 tokens), "
                     "kohaku768-down / kohaku896-down (their down projections: 384 / 512 -> 768 / 896), kohaku "
                     "(all four), all, or tiny (8 experts, top-2, 256 -> 512, 64 tokens: for --device cpu)")
      ->capture_default_str();
  kernel->add_option("--device", k->device, "cuda, cuda:N or cpu")->capture_default_str();
  kernel->add_option("--tokens", k->tokens,
                     "Rows of the activation (default 65536; 16384 for lmhead, gemm and glu); grouped: tokens "
                     "before top-k, one count or a comma-separated list (default: the shape's list)")
      ->delimiter(',');
  kernel->add_option("--width", k->width, "Columns of the activation")->capture_default_str();
  kernel->add_option("--repeats", k->repeats, "Timed calls (best is kept)")->capture_default_str();
  kernel->add_option("--inputs-dir", k->inputs_dir,
                     "attention: also write each shape's bf16 inputs here, for bench/compare/attention_torch.py "
                     "--inputs-dir (PyTorch's error on the same inputs); grouped: write grouped_cases.json here "
                     "(each case's per-expert counts and offsets, then amber's times), which "
                     "bench/compare/grouped_torch.py --inputs-dir runs PyTorch on");
  kernel->add_option("--routing", k->routing,
                     "grouped only: uniform (top-k distinct experts, all equally likely), skewed (expert "
                     "popularity a Zipf law over a seeded ranking) or both")
      ->capture_default_str();
  kernel->add_option("--seed", k->seed, "grouped only: the routing's seed")->capture_default_str();
  kernel->add_option("--variants", k->variants,
                     "grouped only: time each m-grouped product (forward, swiglu forward, backward input) under "
                     "each of these Hopper kernel variants, comma-separated: default (as the kernels choose), "
                     "math-stores (store partition off: the math warps store their results), tile128, tile256 "
                     "(tiles that many columns wide whatever the shape), loader-scales (FP8 only: the tiles' loader "
                     "copies the scales, no scale loader of its own); every variant gives the same bits")
      ->delimiter(',')
      ->capture_default_str();
  kernel->add_flag("--portable", k->portable,
                   "attention only: the portable mma.sync kernels even on a Hopper card (to compare the paths)");
  kernel->add_option("--vocab", k->vocab, "lmhead only: vocabulary size")->capture_default_str();
  kernel->add_option("--dim", k->dim, "lmhead only: model width")->capture_default_str();
  kernel->add_option("--chunk", k->chunk, "lmhead and gemm: tokens per logits chunk")->capture_default_str();
  kernel->add_option("--config", k->config,
                     "gemm and glu: config whose [model] gives the products (gemm: one block and the head; glu: "
                     "the MLP's dim and hidden width)")
      ->check(CLI::ExistingFile);
  kernel->add_option("--candidates", k->candidates, "gemm only: cuBLASLt heuristic answers timed per product")
      ->capture_default_str();
  kernel->callback([k] {
    // Every kernel but grouped times one token count.
    const auto tokens_or = [&](int64_t fallback) {
      AMBER_CHECK(k->tokens.size() <= 1, "bench kernel ", k->name,
                  ": --tokens takes one count here (a list is for grouped)");
      return k->tokens.empty() || k->tokens[0] <= 0 ? fallback : k->tokens[0];
    };
    if (k->name == "grouped")
      return print_grouped_bench(k->shape, k->tokens, k->routing, k->seed, k->device, k->repeats, k->inputs_dir,
                                 k->variants);
    if (k->name == "attention")
      return print_attention_bench(k->shape, device_from_name(k->device), k->repeats, k->inputs_dir, k->portable);
    if (k->name == "gemm") {
      AMBER_CHECK(!k->config.empty(), "bench kernel gemm needs --config (e.g. configs/presets/kohaku-500m.toml)");
      return print_gemm_bench(load_run_config(k->config, {}).model, tokens_or(16384), k->chunk,
                              device_from_name(k->device), k->candidates, k->repeats);
    }
    if (k->name == "glu") {
      AMBER_CHECK(!k->config.empty(), "bench kernel glu needs --config (e.g. configs/presets/kohaku-200m.toml)");
      const ModelConfig m = load_run_config(k->config, {}).model;
      const int64_t tokens = tokens_or(16384);
      const auto rows = run_glu_bench(device_from_name(k->device), tokens, m.dim, m.resolved_mlp_hidden(), k->repeats);
      std::cout << "MLP products beside SwiGLU, " << tokens << " tokens, dim " << m.dim << ", hidden "
                << m.resolved_mlp_hidden() << ", bf16, measured GEMM algorithms\n| arm | ms |\n|---|---|\n"
                << std::fixed << std::setprecision(4);
      for (const GluBenchRow& r : rows) std::cout << "| " << r.arm << " | " << r.ms << " |\n";
      return;
    }
    if (k->name == "lmhead") {
      const int64_t tokens = tokens_or(16384);
      const auto rows = run_lm_head_bench(device_from_name(k->device), tokens, k->vocab, k->dim, k->chunk, k->repeats);
      std::cout << "LM head forward + backward, " << tokens << " tokens, vocab " << k->vocab << ", dim " << k->dim
                << ", bf16\n| arm | ms | extra memory GiB |\n|---|---|---|\n" << std::fixed;
      for (const LmHeadBenchRow& r : rows)
        std::cout << "| " << r.arm << " | " << std::setprecision(3) << r.ms << " | " << r.extra_gib << " |\n";
      std::cout << "chunked / naive time: " << std::setprecision(3) << rows[0].ms / rows[1].ms << "\n";
      return;
    }
    const KernelBenchResult r = run_kernel_bench(k->name, device_from_name(k->device), tokens_or(65536),
                                                 k->width, k->repeats);
    std::cout << std::fixed << std::setprecision(3) << "device copy bandwidth (read + write): " << r.copy_tb_per_s
              << " TB/s\n| kernel | shape | ms | TB/s | of copy |\n|---|---|---|---|---|\n";
    for (const KernelBenchRow& row : r.rows)
      std::cout << "| " << row.name << " | " << row.shape << " | " << row.ms << " | " << row.tb_per_s << " | "
                << std::setprecision(1) << 100 * row.of_copy << "% |\n" << std::setprecision(3);
  });
}

}  // namespace amber::cli
