// The attention benchmark behind `amber bench kernel attention`: issue 6's shapes
// (A-E) and F (documents of 20-100 tokens, which the Hopper forward packs), each timed
// forward and forward+backward on one device and checked against a float64 CPU run of
// its first document and first KV-head group, with a repeat-run bit check and
// NaN-poisoned outputs.
#pragma once

#include <string>
#include <vector>

#include "amber/core/device.h"
#include "amber/core/tensor.h"

namespace amber {

struct AttentionBenchShape {
  std::string name;     // "A" .. "E"
  std::string summary;  // e.g. "h20/4 d64, 8 x 2048"
  int heads = 0, kv_heads = 0, head_dim = 0, window = 0;
  std::vector<int32_t> lengths;
};

struct AttentionBenchRow {
  AttentionBenchShape shape;
  double error_out = 0, error_dq = 0, error_dk = 0, error_dv = 0;  // relative, vs float64
  bool repeat_identical = false;  // two backward runs gave the same bits
  int64_t non_finite = 0;         // NaN/inf left anywhere in out, dq, dk, dv
  double forward_ms = 0, backward_ms = 0;
  double forward_tflops = 0, total_tflops = 0;  // total: forward + backward
};

// Document lengths uniform-looking in [lo, hi], filling `tokens` exactly, from a fixed
// integer sequence (bench/compare/doc_lengths.py generates the same lengths; the
// attention and step benches of both arms use it).
std::vector<int32_t> spread_lengths(int64_t tokens, int lo, int hi);

// `which`: one of A, B, C, D, E, F (documents of 20-100 tokens), or all.
std::vector<AttentionBenchShape> attention_bench_shapes(const std::string& which);

// FLOPs of one causal forward (4 per visible query-key pair per head_dim; the backward
// counts 2.5x this), per document, with the window.
double attention_forward_flops(const AttentionBenchShape& shape);

// Writes a shape's inputs for bench/compare/attention_torch.py --inputs-dir, which then
// measures PyTorch's error on the same inputs: <dir>/<name>.json (lengths, heads,
// kv_heads, head_dim, window) and <dir>/<name>.{q,k,v,dout}.bf16, raw little-endian.
void save_attention_inputs(const std::string& dir, const AttentionBenchShape& shape, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& dout);

// With `inputs_dir`, the shape's bf16 inputs are also saved there (save_attention_inputs);
// `portable` runs the mma.sync kernels even where the Hopper path exists.
AttentionBenchRow run_attention_bench(const AttentionBenchShape& shape, Device device, int repeats,
                                      const std::string& inputs_dir, bool portable);

}  // namespace amber
