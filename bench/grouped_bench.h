// The grouped GEMM benchmark behind `amber bench kernel grouped` (issue 40, item 5): the
// expert products of gpt-oss-120b's first MoE matmul and of Kohaku's MoE shapes, under
// uniform and skewed routing, beside both roofline limits measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amber/core/device.h"
#include "amber/ops/grouped_gemm.h"

namespace amber {

// One MoE layer's expert product: tokens pick `topk` of `experts`; each expert maps k
// to n. The first product (gate_up) maps the model width to the gate and up rows (2 x
// the expert width), which the SwiGLU forward pairs; the down projection maps the
// expert width back to the model width, and has no SwiGLU forward.
struct GroupedBenchShape {
  std::string name;     // "mm1", "kohaku768", "kohaku768-down", ..., "tiny"
  std::string summary;  // e.g. "gpt-oss-120b MM1: E128 top-4, 2880 -> 5760"
  int64_t experts = 0, topk = 0, k = 0, n = 0;
  std::vector<int64_t> tokens;  // the token counts timed by default
  bool gate_up = true;          // n is gate and up rows (the SwiGLU forward is timed)
};

// `which`: mm1, kohaku768, kohaku896 (the first products), kohaku768-down,
// kohaku896-down (the down projections), kohaku (all four Kohaku shapes), all (mm1 and
// the Kohaku shapes), or tiny (8 experts, top-2, 256 -> 512: the --device cpu sanity
// shape).
std::vector<GroupedBenchShape> grouped_bench_shapes(const std::string& which);

// A routing of `tokens` tokens: token t chose experts choices[t * topk .. t * topk +
// topk - 1] (distinct); counts[e] rows went to expert e; offsets [E + 1] are their
// prefix sums, the rows sorted by expert as the grouped products take them.
struct GroupedRouting {
  std::vector<int32_t> choices, counts, offsets;
};

// `routing`: "uniform" (every expert equally likely) or "skewed" (expert popularity
// follows a Zipf law with exponent kSkewedZipfExponent over a seeded ranking of the
// experts: the expert of rank r, from 1, has weight r^-s). Each token draws its top-k
// without replacement in proportion to the weights (Gumbel top-k: the k largest
// log(weight) + Gumbel noise), as a router's softmax would pick them. The draws are
// Philox's, so a seed gives one routing (up to the C library's last bit of log).
constexpr double kSkewedZipfExponent = 0.5;
GroupedRouting route_tokens(int64_t tokens, int64_t experts, int64_t topk, const std::string& routing,
                            uint64_t seed);

struct GroupedBenchRow {
  // "forward", "swiglu forward", "backward input", "backward weight"; a kernel variant
  // other than the default adds its name (", tile256")
  std::string product;
  double error = -1;    // relative, vs float64 over the first experts' rows; -1: not measured
  double ms = 0;
  double flops = 0;     // 2 * rows * n * k
  double bytes = 0;     // see run_grouped_bench
  double tflops = 0, tb_per_s = 0;
  double memory_ms = 0, compute_ms = 0;  // the time each roofline limit allows
  double of_bound = 0;  // max(memory_ms, compute_ms) / ms
};

struct GroupedBenchCase {
  GroupedBenchShape shape;
  int64_t tokens = 0;
  std::string routing;
  GroupedRouting route;
  std::vector<GroupedBenchRow> rows;
};

// The roofs every case is measured against: a device-to-device copy (bytes read +
// written per second) and amber's dense bf16 gemm() on gemm_size^3 (measured cuBLASLt
// algorithms on the GPU).
struct GroupedRoofs {
  double copy_tb_per_s = 0, gemm_tflops = 0;
  int64_t gemm_size = 0;
};
GroupedRoofs measure_grouped_roofs(Device device, int64_t gemm_size, int repeats);

struct GroupedBenchOptions {
  int repeats = 20;
  // Each product's first call writes into NaN-filled outputs, and the rows of the first
  // (at most 8) experts are compared with the float64 CPU products (on the host).
  bool check_errors = false;
  // The m-grouped products (forward, swiglu forward, backward input) are timed under each
  // of these kernel variants (grouped_variant), for the A/Bs of docs/perf/grouped_gemm.md.
  std::vector<std::string> variants = {"default"};
};

// A variant's name as `--variants` takes it: default (what the kernels choose), math-stores
// (the store partition off: the math warps store their results themselves), tile128 or
// tile256 (tiles of that many columns whatever the shape; SwiGLU stays 128 wide).
GroupedGemmVariant grouped_variant(const std::string& name);

// Times the four products of ops/grouped_gemm.h on one case (bf16 operands drawn from
// the normal distribution, f32 weight gradient, overwritten). Bytes are the fewest each
// product must move: its activations read and written once, plus the weights of the
// experts that own at least one row (forward, swiglu forward, backward input; the
// swiglu forward writes both the gate/up products and h), or every expert's f32
// weight gradient (backward weight, which writes zeros where an expert has no rows).
void run_grouped_bench(GroupedBenchCase& c, Device device, const GroupedRoofs& roofs,
                       const GroupedBenchOptions& options);

// The cases and (when run) their rows as JSON, for bench/compare/grouped_torch.py
// --inputs-dir: shapes, counts and offsets, the roofs, each product's ms.
void save_grouped_cases(const std::string& path, const std::vector<GroupedBenchCase>& cases,
                        const GroupedRoofs& roofs, const std::string& device_name);

}  // namespace amber
