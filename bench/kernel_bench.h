// Kernel benchmarks behind `amber bench kernel`: memory-bound ops timed forward and
// backward on one device, reported as achieved TB/s beside the device's measured
// copy bandwidth (both measured in the same run).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "amber/core/device.h"
#include "amber/core/tensor.h"

namespace amber {

struct KernelBenchRow {
  std::string name;      // e.g. "rmsnorm forward"
  std::string shape;
  double ms = 0;
  double bytes = 0;      // fewest bytes the op must move (each input read once, output written once)
  double tb_per_s = 0;
  double of_copy = 0;    // tb_per_s / measured copy bandwidth
};

struct KernelBenchResult {
  double copy_tb_per_s = 0;  // device-to-device copy, bytes read + written
  std::vector<KernelBenchRow> rows;
};

// Milliseconds per call of fn: one warm-up call, then the best of `repeats` timings of
// `calls` back-to-back calls, each closed by a device synchronisation.
double best_ms(Device device, int repeats, int calls, const std::function<void()>& fn);

// ||got - ref|| / ||ref|| in double (CPU tensors of one size); anything not finite in
// got (an output never written) gives inf.
double relative_error(const Tensor& got, const Tensor& ref);

// `name`: rmsnorm, swiglu, rope, quant (the FP8 quantizers, and the SwiGLU backward
// quantized as it is computed) or all. tokens x width is the activation shape
// (width = 2048 at 65536 tokens in issue 5's acceptance).
KernelBenchResult run_kernel_bench(const std::string& name, Device device, int64_t tokens, int64_t width,
                                   int repeats);

// The LM head of issue 5 (linear cross-entropy forward + backward, bf16 operands, f32
// weight gradient): the chunked op against the naive path that materialises every
// logit (the same op with one chunk of all tokens), timed in one run, each with the
// device memory it needs beyond its inputs and outputs; a third row times training's
// one-pass call (forward and backward from one logits product per chunk).
struct LmHeadBenchRow {
  std::string arm;       // "chunked (2048 tokens)", "naive (...)" or "chunked, one pass (training)"
  double ms = 0;
  double extra_gib = 0;  // peak pool bytes above the inputs/outputs
};

std::vector<LmHeadBenchRow> run_lm_head_bench(Device device, int64_t tokens, int64_t vocab, int64_t dim,
                                              int64_t chunk_tokens, int repeats);

// `amber bench kernel glu`: a gated MLP's two products that meet its activation, each
// timed as the product plus the activation's pass and as the one call of
// ops/glu_linear.h (the GLU in the product's epilogue where the device has it), at
// tokens x dim in and hidden out, bf16, GEMM algorithms measured.
struct GluBenchRow {
  std::string arm;  // e.g. "forward: product + pass"
  double ms = 0;
};
std::vector<GluBenchRow> run_glu_bench(Device device, int64_t tokens, int64_t dim, int64_t hidden, int repeats);

// One product of `amber bench kernel gemm`: c [m, n] = op(a) op(b) + beta c with
// a [m, k] (or [k, m] when ta), b [k, n] (or [n, k] when tb), bf16 operands.
struct GemmBenchShape {
  std::string name;  // e.g. "mlp up, forward"
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  bool f32_out = false;  // parameter gradients accumulate into f32
  double beta = 0;
};

struct GemmBenchRow {
  GemmBenchShape shape;
  std::vector<double> ms;  // per heuristic answer, best first by cuBLASLt's estimate; -1: did not run
};

// Each product timed with cuBLASLt's first `candidates` heuristic answers: how far
// the answer gemm() runs (the first) is from the fastest measured one.
std::vector<GemmBenchRow> run_gemm_bench(const std::vector<GemmBenchShape>& shapes, Device device, int candidates,
                                         int repeats);

}  // namespace amber
