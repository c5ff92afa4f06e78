#include "bench/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <sstream>

#include "amber/core/cuda_runtime.h"
#include "amber/core/random.h"
#include "amber/core/seq_info.h"
#include "amber/ops/activation.h"
#include "amber/ops/gemm.h"
#include "amber/ops/glu_linear.h"
#include "amber/ops/loss.h"
#include "amber/ops/norm.h"
#include "amber/ops/quant.h"
#include "amber/ops/rope.h"

namespace amber {
namespace {

Tensor random(Shape shape, Device device, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::bf16, device);
  fill_normal(t, seed, 0);
  return t;
}

}  // namespace

double relative_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> a = got.to_doubles(), b = ref.to_doubles();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double best_ms(Device device, int repeats, int calls, const std::function<void()>& fn) {
  const auto wait = [&] {
    if (device.is_cuda()) cuda::synchronize();
  };
  fn();
  wait();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) fn();
    wait();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best / calls;
}

KernelBenchResult run_kernel_bench(const std::string& name, Device device, int64_t tokens, int64_t width,
                                   int repeats) {
  AMBER_CHECK(name == "all" || name == "rmsnorm" || name == "swiglu" || name == "rope" || name == "quant",
              "unknown kernel '", name, "'; valid: rmsnorm, swiglu, rope, quant, all");
  AMBER_CHECK(tokens > 0 && width > 0 && width % 128 == 0, "bench kernel: width must be a positive multiple of 128");
  KernelBenchResult result;
  {
    Tensor a = random({tokens, width}, device, 1), b = Tensor::empty({tokens, width}, DType::bf16, device);
    const double ms = best_ms(device, repeats, 1, [&] { b.copy_from(a); });
    result.copy_tb_per_s = 2.0 * static_cast<double>(a.bytes()) / (ms * 1e-3) / 1e12;
  }
  std::ostringstream shape_text;
  shape_text << tokens << " x " << width << " bf16";
  auto add = [&](const std::string& row, double bytes, double ms) {
    const double tbs = bytes / (ms * 1e-3) / 1e12;
    result.rows.push_back({row, shape_text.str(), ms, bytes, tbs, tbs / result.copy_tb_per_s});
  };
  const double act = static_cast<double>(tokens * width) * 2.0;  // one bf16 activation
  if (name == "all" || name == "rmsnorm") {
    Tensor x = random({tokens, width}, device, 2), dy = random({tokens, width}, device, 3);
    Tensor w = Tensor::full({width}, 1.0, DType::bf16).to(device);
    Tensor y = Tensor::empty(x.shape(), DType::bf16, device), dx = Tensor::empty(x.shape(), DType::bf16, device);
    Tensor rstd = Tensor::empty({tokens}, DType::f32, device), dw = Tensor::zeros({width}, DType::f32, device);
    add("rmsnorm forward", 2 * act + 4.0 * tokens, best_ms(device, repeats, 1, [&] { rmsnorm_forward(x, w, 1e-6, y, rstd); }));
    add("rmsnorm backward", 3 * act + 4.0 * tokens,
        best_ms(device, repeats, 1, [&] { rmsnorm_backward(dy, x, w, rstd, dx, dw); }));
    // The step's case: dx added into the residual stream's gradient (read and written).
    add("rmsnorm backward, adding into dx", 4 * act + 4.0 * tokens,
        best_ms(device, repeats, 1, [&] { rmsnorm_backward(dy, x, w, rstd, dx, dw, true); }));
  }
  if (name == "all" || name == "swiglu") {
    Tensor gu = random({tokens, 2 * width}, device, 4), dh = random({tokens, width}, device, 5);
    Tensor h = Tensor::empty({tokens, width}, DType::bf16, device), dgu = Tensor::empty(gu.shape(), DType::bf16, device);
    add("swiglu forward", 3 * act, best_ms(device, repeats, 1, [&] { swiglu_forward(gu, h); }));
    add("swiglu backward", 5 * act, best_ms(device, repeats, 1, [&] { swiglu_backward(dh, gu, dgu); }));
  }
  if (name == "all" || name == "rope") {
    const int64_t head_dim = 128;
    Tensor x = random({tokens, width / head_dim, head_dim}, device, 6), y = Tensor::empty(x.shape(), DType::bf16, device);
    std::vector<int32_t> lengths(static_cast<size_t>(tokens / 2048), 2048);
    if (tokens % 2048) lengths.push_back(static_cast<int32_t>(tokens % 2048));
    const SeqInfo seq = SeqInfo::from_lengths(lengths, device);
    RopeConfig rc;
    rc.head_dim = static_cast<int>(head_dim);
    const RopeTable table(rc);
    add("rope forward", 2 * act + 4.0 * tokens, best_ms(device, repeats, 1, [&] { rope_forward(x, seq.positions, table, y); }));
    add("rope backward", 2 * act + 4.0 * tokens, best_ms(device, repeats, 1, [&] { rope_backward(x, seq.positions, table, y); }));
    // QK-norm with RoPE as the Kohaku rungs run it: heads of 64, q of width / 64 heads
    // and k of a fifth as many, both read in place from one stacked projection [q k v].
    const int64_t qk_dim = 64, heads = width / qk_dim, kv_heads = heads / 5 > 0 ? heads / 5 : 1;
    RopeConfig qk_rc;
    qk_rc.head_dim = static_cast<int>(qk_dim);
    const RopeTable qk_table(qk_rc);
    const Tensor stack = random({tokens, heads + 2 * kv_heads, qk_dim}, device, 6);
    Tensor dstack = Tensor::empty(stack.shape(), DType::bf16, device);
    const Tensor q = stack.slice(1, 0, heads), k = stack.slice(1, heads, heads + kv_heads);
    Tensor dq = dstack.slice(1, 0, heads), dk = dstack.slice(1, heads, heads + kv_heads);
    Tensor qy = Tensor::empty({tokens, heads, qk_dim}, DType::bf16, device);
    Tensor ky = Tensor::empty({tokens, kv_heads, qk_dim}, DType::bf16, device);
    Tensor w = Tensor::full({qk_dim}, 1.0, DType::bf16).to(device);
    Tensor dy = random(qy.shape(), device, 9), dky = random(ky.shape(), device, 10);
    Tensor rstd = Tensor::empty({tokens * heads}, DType::f32, device);
    Tensor k_rstd = Tensor::empty({tokens * kv_heads}, DType::f32, device);
    Tensor dw = Tensor::zeros({qk_dim}, DType::f32, device), k_dw = Tensor::zeros({qk_dim}, DType::f32, device);
    Tensor qr = Tensor::empty(qy.shape(), DType::bf16, device), kr = Tensor::empty(ky.shape(), DType::bf16, device);
    const double both = act * (1.0 + static_cast<double>(kv_heads) / static_cast<double>(heads));
    const double stats = 4.0 * static_cast<double>(tokens * (heads + kv_heads)) + 4.0 * tokens;
    add("qk-norm + rope forward (q and k of heads of 64), one pass", 2 * both + stats,
        best_ms(device, repeats, 1, [&] {
          qk_norm_rope_forward({q, w, 1e-6, qy, rstd}, {k, w, 1e-6, ky, k_rstd}, seq.positions, qk_table);
        }));
    add("qk-norm + rope forward (q and k of heads of 64), four ops", 2 * both + stats,
        best_ms(device, repeats, 1, [&] {
          rmsnorm_forward(q, w, 1e-6, qy, rstd);
          rmsnorm_forward(k, w, 1e-6, ky, k_rstd);
          rope_forward(qy, seq.positions, qk_table, qy);
          rope_forward(ky, seq.positions, qk_table, ky);
        }));
    add("qk-norm + rope backward (q and k of heads of 64), one pass", 3 * both + stats,
        best_ms(device, repeats, 1, [&] {
          qk_norm_rope_backward({dy, q, w, rstd, dq, dw}, {dky, k, w, k_rstd, dk, k_dw}, seq.positions, qk_table);
        }));
    add("qk-norm + rope backward (q and k of heads of 64), four ops", 3 * both + stats,
        best_ms(device, repeats, 1, [&] {
          rope_backward(dy, seq.positions, qk_table, qr);
          rope_backward(dky, seq.positions, qk_table, kr);
          rmsnorm_backward(qr, q, w, rstd, dq, dw);
          rmsnorm_backward(kr, k, w, k_rstd, dk, k_dw);
        }));
  }
  if (name == "all" || name == "quant") {
    // The FP8 recipe's quantizers (ops/quant.h): bf16 read once, e4m3 codes and fp32
    // scales written, per layout.
    Tensor x = random({tokens, width}, device, 11);
    const Shape flipped{width, tokens};
    Tensor values = Tensor::empty(x.shape(), DType::f8e4m3, device);
    Tensor t_values = Tensor::empty(flipped, DType::f8e4m3, device);
    Tensor scales = Tensor::empty(fp8_rows_scales_shape(x.shape()), DType::f32, device);
    Tensor t_scales = Tensor::empty(fp8_rows_scales_shape(flipped), DType::f32, device);
    Tensor tile_scales = Tensor::empty(fp8_blocks_scales_shape(x.shape()), DType::f32, device);
    const double codes = act / 2, row_scales = 4.0 * static_cast<double>(scales.numel());
    add("fp8 rows (1x128 blocks)", act + codes + row_scales,
        best_ms(device, repeats, 1, [&] { quantize_fp8_rows(x, values, scales); }));
    add("fp8 columns (1x128 blocks of x^T)", act + codes + row_scales,
        best_ms(device, repeats, 1, [&] { quantize_fp8_columns(x, t_values, t_scales); }));
    add("fp8 rows and columns, one pass", act + 2 * codes + 2 * row_scales,
        best_ms(device, repeats, 1, [&] { quantize_fp8_rows_and_columns(x, values, scales, t_values, t_scales); }));
    add("fp8 rows, then columns (two passes)", act + 2 * codes + 2 * row_scales,
        best_ms(device, repeats, 1, [&] {
          quantize_fp8_rows(x, values, scales);
          quantize_fp8_columns(x, t_values, t_scales);
        }));
    add("fp8 128x128 tiles and their transpose", act + 2 * codes,
        best_ms(device, repeats, 1, [&] { quantize_fp8_blocks(x, values, tile_scales, &t_values); }));
    // The MLP's dgate_up (gate_up [tokens, 2 width]) from dh and gate_up into the FP8
    // rows and columns its products read: one pass, or the GLU's backward pass writing
    // dgate_up and the one-pass quantizer reading it.
    Tensor dh = random({tokens, width}, device, 12), gu = random({tokens, 2 * width}, device, 13);
    const Shape wide{tokens, 2 * width}, wide_flipped{2 * width, tokens};
    Tensor dgu = Tensor::empty(wide, DType::bf16, device);
    Tensor g_values = Tensor::empty(wide, DType::f8e4m3, device), g_t_values = Tensor::empty(wide_flipped, DType::f8e4m3, device);
    Tensor g_scales = Tensor::empty(fp8_rows_scales_shape(wide), DType::f32, device);
    Tensor g_t_scales = Tensor::empty(fp8_rows_scales_shape(wide_flipped), DType::f32, device);
    const double glu_bytes = 3 * act + 2 * (2 * codes + 2 * row_scales);
    add("swiglu backward into fp8 rows and columns, one pass", glu_bytes, best_ms(device, repeats, 1, [&] {
          glu_backward_fp8_rows_and_columns(Glu::swiglu, dh, gu, dgu, g_values, g_scales, g_t_values, g_t_scales);
        }));
    add("swiglu backward, then fp8 rows and columns (two passes)", glu_bytes, best_ms(device, repeats, 1, [&] {
          swiglu_backward(dh, gu, dgu);
          quantize_fp8_rows_and_columns(dgu, g_values, g_scales, g_t_values, g_t_scales);
        }));
  }
  return result;
}

std::vector<LmHeadBenchRow> run_lm_head_bench(Device device, int64_t tokens, int64_t vocab, int64_t dim,
                                              int64_t chunk_tokens, int repeats) {
  AMBER_CHECK(device.is_cuda(), "bench kernel lmhead: memory is measured on the GPU pool; use --device cuda");
  AMBER_CHECK(tokens > 0 && vocab > 0 && dim > 0 && chunk_tokens > 0, "bench kernel lmhead: sizes must be positive");
  Tensor x = random({tokens, dim}, device, 7), w = random({vocab, dim}, device, 8);
  fill_normal(w, 8, 0, 0.0f, 0.02f);
  Tensor u = Tensor::empty({tokens}, DType::f64);
  fill_uniform(u, 9, 0);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>(u.item(t) * vocab) % vocab;
  const Tensor targets = Tensor::from_vector(ids, {tokens}).to(device);
  Tensor losses = Tensor::empty({tokens}, DType::f32, device), lse = Tensor::empty({tokens}, DType::f32, device);
  Tensor dlosses = Tensor::full({tokens}, 1.0 / static_cast<double>(tokens), DType::f32).to(device);
  Tensor dx = Tensor::empty(x.shape(), DType::bf16, device), dw = Tensor::zeros(w.shape(), DType::f32, device);
  std::vector<LmHeadBenchRow> rows;
  // one_pass: training's call, which takes each chunk's logits from one product.
  const auto measure = [&](const std::string& arm, int64_t chunk, bool one_pass) {
    CrossEntropyOptions o;
    o.chunk_tokens = chunk;
    const auto step = [&] {
      if (one_pass) {
        linear_cross_entropy_forward_backward(dlosses, x, w, targets, o, losses, lse, dx, dw);
        return;
      }
      linear_cross_entropy_forward(x, w, targets, o, losses, lse);
      linear_cross_entropy_backward(dlosses, x, w, targets, lse, o, dx, dw);
    };
    step();
    cuda::synchronize();
    cuda::reset_pool_peak(device.index);
    const size_t held = cuda::pool_peak_bytes(device.index);  // inputs and outputs
    step();
    cuda::synchronize();
    const double extra = static_cast<double>(cuda::pool_peak_bytes(device.index) - held) / (1u << 30);
    rows.push_back({arm, best_ms(device, repeats, 1, step), extra});
  };
  measure("chunked (" + std::to_string(chunk_tokens) + " tokens)", chunk_tokens, false);
  measure("naive (all " + std::to_string(tokens) + " tokens' logits)", tokens, false);
  measure("chunked, one pass (training)", chunk_tokens, true);
  return rows;
}

std::vector<GluBenchRow> run_glu_bench(Device device, int64_t tokens, int64_t dim, int64_t hidden, int repeats) {
  AMBER_CHECK(tokens > 0 && dim > 0 && hidden > 0, "bench kernel glu: sizes must be positive");
  set_gemm_tuning({.measured = true, .file = ""});
  const Tensor x = random({tokens, dim}, device, 11), w = random({2 * hidden, dim}, device, 12);
  const Tensor w_down = random({dim, hidden}, device, 13), dy = random({tokens, dim}, device, 14);
  Tensor gate_up = Tensor::empty({tokens, 2 * hidden}, DType::bf16, device);
  Tensor h = Tensor::empty({tokens, hidden}, DType::bf16, device), dh = Tensor::empty(h.shape(), DType::bf16, device);
  Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::bf16, device);
  const bool epilogues = glu_epilogues(device);
  constexpr int kCalls = 10;  // back to back, as a step issues them: the host's setup hides behind the GPU
  const std::string fused =
      epilogues ? "one call (SwiGLU in the product's epilogue)" : "one call (no epilogue form here)";
  std::vector<GluBenchRow> rows;
  rows.push_back({"forward: gate/up product + SwiGLU pass", best_ms(device, repeats, kCalls, [&] {
                    gemm(x, false, w, true, gate_up);
                    swiglu_forward(gate_up, h);
                  })});
  rows.push_back({"forward: " + fused, best_ms(device, repeats, kCalls, [&] {
                    glu_linear_forward(Glu::swiglu, x, w, Tensor(), gate_up, h);
                  })});
  rows.push_back({"backward: dh product + SwiGLU backward pass", best_ms(device, repeats, kCalls, [&] {
                    gemm(dy, false, w_down, false, dh);
                    swiglu_backward(dh, gate_up, dgate_up);
                  })});
  rows.push_back({"backward: " + fused, best_ms(device, repeats, kCalls, [&] {
                    glu_linear_backward_input(Glu::swiglu, dy, w_down, gate_up, dgate_up, dh);
                  })});
  set_gemm_tuning({});
  return rows;
}

std::vector<GemmBenchRow> run_gemm_bench(const std::vector<GemmBenchShape>& shapes, Device device, int candidates,
                                         int repeats) {
  AMBER_CHECK(candidates > 0 && repeats > 0, "bench kernel gemm: --candidates and --repeats must be positive");
  std::vector<GemmBenchRow> rows;
  uint64_t seed = 10;
  for (const GemmBenchShape& s : shapes) {
    const Tensor a = random(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, device, seed++);
    const Tensor b = random(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, device, seed++);
    Tensor c = Tensor::zeros({s.m, s.n}, s.f32_out ? DType::f32 : DType::bf16, device);
    rows.push_back({s, gemm_algorithm_times(a, s.ta, b, s.tb, c, s.beta, candidates, repeats)});
  }
  return rows;
}

}  // namespace amber
