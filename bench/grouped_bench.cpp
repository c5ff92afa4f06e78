#include "bench/grouped_bench.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include <nlohmann/json.hpp>

#include "amber/core/philox.h"
#include "amber/core/random.h"
#include "amber/core/tensor.h"
#include "amber/ops/gemm.h"
#include "amber/ops/moe.h"
#include "amber/ops/quant.h"
#include "bench/kernel_bench.h"

namespace amber {
namespace {

// Uniform in (0, 1) with 53 random bits: two Philox words, so -log(-log(u)) is finite.
double open_uniform(uint64_t seed, uint64_t index) {
  const uint64_t hi = philox::bits(seed, 2 * index) >> 5, lo = philox::bits(seed, 2 * index + 1) >> 6;
  return (static_cast<double>((hi << 26) | lo) + 0.5) * 0x1p-53;
}

Tensor random(Shape shape, Device device, uint64_t seed, float std = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::bf16, device);
  fill_normal(t, seed, 0, 0.0f, std);
  return t;
}

}  // namespace

std::vector<GroupedBenchShape> grouped_bench_shapes(const std::string& which) {
  const std::vector<int64_t> mm1_tokens = {128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  const std::vector<GroupedBenchShape> all = {
      {"mm1", "gpt-oss-120b MM1: E128 top-4, 2880 -> 5760", 128, 4, 2880, 5760, mm1_tokens},
      {"kohaku768", "Kohaku MoE: E64 top-8, 768 -> 2 x 384", 64, 8, 768, 768, {16384}},
      {"kohaku896", "Kohaku MoE: E64 top-8, 896 -> 2 x 512", 64, 8, 896, 1024, {16384}},
      {"kohaku768-down", "Kohaku MoE down projection: E64 top-8, 384 -> 768", 64, 8, 384, 768, {16384}, false},
      {"kohaku896-down", "Kohaku MoE down projection: E64 top-8, 512 -> 896", 64, 8, 512, 896, {16384}, false},
  };
  if (which == "all") return all;
  if (which == "kohaku") return {all.begin() + 1, all.end()};
  if (which == "tiny") return {{"tiny", "CPU sanity: E8 top-2, 256 -> 512", 8, 2, 256, 512, {64}}};
  for (const GroupedBenchShape& s : all)
    if (s.name == which) return {s};
  fail("bench kernel grouped: unknown shape '", which, "'; valid: mm1, kohaku768, kohaku896, kohaku768-down, "
       "kohaku896-down, kohaku, all, tiny");
}

GroupedRouting route_tokens(int64_t tokens, int64_t experts, int64_t topk, const std::string& routing,
                            uint64_t seed) {
  AMBER_CHECK(routing == "uniform" || routing == "skewed", "bench kernel grouped: unknown routing '", routing,
              "'; valid: uniform, skewed");
  AMBER_CHECK(tokens > 0 && experts > 0 && topk > 0 && topk <= experts,
              "bench kernel grouped: need tokens > 0 and 0 < topk <= experts, got tokens ", tokens, ", experts ",
              experts, ", topk ", topk);
  const auto e_count = static_cast<size_t>(experts);
  // log(weight) per expert. Skewed: a seeded shuffle ranks the experts, so the popular
  // ones are not always the first (the order a kernel's scheduler walks).
  std::vector<double> log_weight(e_count, 0.0);
  if (routing == "skewed") {
    std::vector<int64_t> rank(e_count);
    std::iota(rank.begin(), rank.end(), 0);
    for (int64_t i = experts - 1; i > 0; --i) {  // Fisher-Yates from the stream's first words
      const uint64_t j = philox::bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1);
      std::swap(rank[static_cast<size_t>(i)], rank[static_cast<size_t>(j)]);
    }
    for (size_t e = 0; e < e_count; ++e)
      log_weight[e] = -kSkewedZipfExponent * std::log(static_cast<double>(rank[e] + 1));
  }
  GroupedRouting r;
  r.choices.resize(static_cast<size_t>(tokens * topk));
  r.counts.assign(e_count, 0);
  std::vector<std::pair<double, int32_t>> keys(e_count);
  const uint64_t draws = static_cast<uint64_t>(experts);  // open_uniform's words start past the shuffle's
  for (int64_t t = 0; t < tokens; ++t) {
    for (size_t e = 0; e < e_count; ++e) {
      const double u = open_uniform(seed, draws + static_cast<uint64_t>(t) * e_count + e);
      keys[e] = {log_weight[e] - std::log(-std::log(u)), static_cast<int32_t>(e)};
    }
    // The k largest keys; ties (measure zero) fall to the lower expert.
    std::partial_sort(keys.begin(), keys.begin() + topk, keys.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t e = keys[static_cast<size_t>(j)].second;
      r.choices[static_cast<size_t>(t * topk + j)] = e;
      ++r.counts[static_cast<size_t>(e)];
    }
  }
  r.offsets.assign(e_count + 1, 0);
  std::partial_sum(r.counts.begin(), r.counts.end(), r.offsets.begin() + 1);
  return r;
}

GroupedGemmVariant grouped_variant(const std::string& name) {
  if (name == "default") return {};
  if (name == "math-stores") return {.store_partition = false, .tile_n = 0};
  if (name == "tile128") return {.store_partition = true, .tile_n = 128};
  if (name == "tile256") return {.store_partition = true, .tile_n = 256};
  if (name == "loader-scales") return {.store_partition = true, .split_scales = false, .tile_n = 0};
  fail("bench kernel grouped: unknown variant '", name,
       "'; valid: default, math-stores, tile128, tile256, loader-scales");
}

GroupedRoofs measure_grouped_roofs(Device device, int64_t gemm_size, int repeats) {
  GroupedRoofs roofs;
  roofs.gemm_size = gemm_size;
  {
    const int64_t elements = device.is_cuda() ? int64_t{1} << 28 : int64_t{1} << 24;  // 512 MiB / 32 MiB of bf16
    const Tensor a = random({elements}, device, 1);
    Tensor b = Tensor::empty({elements}, DType::bf16, device);
    const double ms = best_ms(device, repeats, 1, [&] { b.copy_from(a); });
    roofs.copy_tb_per_s = 2.0 * static_cast<double>(a.bytes()) / (ms * 1e-3) / 1e12;
  }
  // The best of cuBLASLt's first answers, as training runs it: the compute roof is the
  // fastest dense product amber has, not its first heuristic guess.
  set_gemm_tuning({.measured = true, .file = ""});
  const Tensor a = random({gemm_size, gemm_size}, device, 2), b = random({gemm_size, gemm_size}, device, 3);
  Tensor c = Tensor::empty({gemm_size, gemm_size}, DType::bf16, device);
  const double ms = best_ms(device, repeats, 1, [&] { gemm(a, false, b, true, c); });
  set_gemm_tuning({});
  const double n = static_cast<double>(gemm_size);
  roofs.gemm_tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  return roofs;
}

void run_grouped_bench(GroupedBenchCase& c, Device device, const GroupedRoofs& roofs,
                       const GroupedBenchOptions& options) {
  const GroupedBenchShape& s = c.shape;
  AMBER_CHECK(!s.gate_up || s.n % 2 == 0, "bench kernel grouped: n (gate and up rows) must be even, got ", s.n);
  const int64_t rows = c.tokens * s.topk, half = s.n / 2;
  AMBER_CHECK(static_cast<int64_t>(c.route.offsets.size()) == s.experts + 1 && c.route.offsets.back() == rows,
              "bench kernel grouped: routing does not match ", c.tokens, " tokens x top-", s.topk);
  const Tensor offsets = Tensor::from_vector(c.route.offsets, {s.experts + 1}).to(device);
  const int64_t active = std::count_if(c.route.counts.begin(), c.route.counts.end(), [](int32_t n) { return n > 0; });
  const Tensor x = random({rows, s.k}, device, 11);
  const Tensor w = random({s.experts, s.n, s.k}, device, 12, 1.0f / std::sqrt(static_cast<float>(s.k)));
  const Tensor dy = random({rows, s.n}, device, 13);
  Tensor y = Tensor::empty({rows, s.n}, DType::bf16, device), gate_up = Tensor::empty({rows, s.n}, DType::bf16, device);
  Tensor h = Tensor::empty({rows, half}, DType::bf16, device), dx = Tensor::empty({rows, s.k}, DType::bf16, device);
  Tensor dw = Tensor::empty({s.experts, s.n, s.k}, DType::f32, device);

  // The float64 reference of the first experts' rows, on the host: experts [0, ce)
  // own rows [0, cr), so it is the same call on slices with offsets[0 .. ce]. Eight
  // experts, or more until they hold a row.
  int64_t ce = std::min<int64_t>(s.experts, 8);
  while (ce < s.experts && c.route.offsets[static_cast<size_t>(ce)] == 0) ++ce;
  const int64_t cr = c.route.offsets[static_cast<size_t>(ce)];
  const auto host64 = [](const Tensor& t, int64_t n) { return t.slice(0, 0, n).to(Device::cpu()).to(DType::f64); };
  Tensor ry, rh, rdx, rdw;
  if (options.check_errors) {
    const Tensor ro = Tensor::from_vector(
        std::vector<int32_t>(c.route.offsets.begin(), c.route.offsets.begin() + ce + 1), {ce + 1});
    const Tensor rx = host64(x, cr), rw = host64(w, ce), rdy = host64(dy, cr);
    ry = Tensor::empty({cr, s.n}, DType::f64);
    rh = Tensor::empty({cr, half}, DType::f64);
    rdx = Tensor::empty({cr, s.k}, DType::f64);
    rdw = Tensor::empty({ce, s.n, s.k}, DType::f64);
    Tensor rgu = Tensor::empty({cr, s.n}, DType::f64);
    grouped_gemm_forward(rx, rw, ro, ry);
    if (s.gate_up) grouped_gemm_swiglu_forward(rx, rw, ro, rgu, rh);
    grouped_gemm_backward_input(rdy, rw, ro, rdx);
    grouped_gemm_backward_weight(rdy, rx, ro, rdw, false);
  }

  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(s.n) * static_cast<double>(s.k);
  const double bf16 = 2.0, active_w = bf16 * static_cast<double>(active * s.n * s.k);
  const double act_k = bf16 * static_cast<double>(rows * s.k), act_n = bf16 * static_cast<double>(rows * s.n);
  constexpr int kCalls = 5;  // back to back, as a step issues them: the host's setup hides behind the device
  // Times fn into a row; when checking, its first call writes over NaN in `out`'s first
  // ref_rows rows (those compared with `ref`; the rest keeps the host's copy small).
  const auto add = [&](const std::string& product, double bytes, const std::function<void()>& fn,
                       const Tensor& out, const Tensor& ref, int64_t ref_rows) {
    GroupedBenchRow r;
    r.product = product;
    if (options.check_errors) {
      Tensor checked = out.slice(0, 0, ref_rows);
      checked.copy_from(Tensor::full(checked.shape(), NAN, checked.dtype()));
      fn();
      r.error = relative_error(host64(out, ref_rows), ref);
    }
    r.ms = best_ms(device, options.repeats, kCalls, fn);
    r.flops = flops;
    r.bytes = bytes;
    r.tflops = flops / (r.ms * 1e-3) / 1e12;
    r.tb_per_s = bytes / (r.ms * 1e-3) / 1e12;
    r.memory_ms = bytes / (roofs.copy_tb_per_s * 1e12) * 1e3;
    r.compute_ms = flops / (roofs.gemm_tflops * 1e12) * 1e3;
    r.of_bound = std::max(r.memory_ms, r.compute_ms) / r.ms;
    c.rows.push_back(r);
  };
  // An m-grouped product, under each variant asked for (loader-scales only changes FP8).
  const auto add_m = [&](const std::string& product, double bytes, const std::function<void()>& fn,
                         const Tensor& out, const Tensor& ref, bool fp8 = false) {
    for (const std::string& v : options.variants) {
      if (v == "loader-scales" && !fp8) continue;
      set_grouped_gemm_variant(grouped_variant(v));
      add(v == "default" ? product : product + ", " + v, bytes, fn, out, ref, cr);
    }
    set_grouped_gemm_variant({});
  };
  add_m("forward", act_k + active_w + act_n, [&] { grouped_gemm_forward(x, w, offsets, y); }, y, ry);
  if (s.gate_up)
    add_m("swiglu forward", act_k + active_w + act_n + act_n / 2,
          [&] { grouped_gemm_swiglu_forward(x, w, offsets, gate_up, h); }, h, rh);
  add_m("backward input", act_n + active_w + act_k, [&] { grouped_gemm_backward_input(dy, w, offsets, dx); }, dx,
        rdx);
  // The down projection's input gradient with the MoE SwiGLU's backward in its epilogue
  // (ops/moe.h, moe_down_backward_swiglu): k is the expert width H, each copy its own
  // row; the bytes are dy, the weights, gate_up read and dgate_up and act_w written.
  if (!s.gate_up && grouped_gemm_available(device) && s.k % 128 == 0) {
    std::vector<int32_t> identity(static_cast<size_t>(rows));
    std::iota(identity.begin(), identity.end(), 0);
    const Tensor slot_rows = Tensor::from_vector(identity, {rows}).to(device);
    const Tensor glu_in = random({rows, 2 * s.k}, device, 14), row_weights = random({rows}, device, 15).to(DType::f32);
    Tensor scratch = Tensor::empty({rows, s.k}, DType::bf16, device);
    Tensor dgate_up = Tensor::empty({rows, 2 * s.k}, DType::bf16, device), act_w = Tensor::empty({rows, s.k}, DType::bf16, device);
    Tensor dweights = Tensor::empty({rows}, DType::f32, device);
    Tensor rdgu;
    if (options.check_errors) {
      const Tensor rslots = Tensor::from_vector(std::vector<int32_t>(identity.begin(), identity.begin() + cr), {cr});
      rdgu = Tensor::empty({cr, 2 * s.k}, DType::f64);
      Tensor ract = Tensor::empty({cr, s.k}, DType::f64), rdwts = Tensor::empty({cr}, DType::f64);
      moe_swiglu_backward(rdx, host64(glu_in, cr), host64(row_weights, cr), rslots, rdgu, ract, rdwts);
    }
    // One kernel whatever the variant (128-wide tiles, stores of its own).
    add("backward input + swiglu backward", act_n + active_w + 5.0 * act_k,
        [&] {
          moe_down_backward_swiglu(dy, w, offsets, glu_in, row_weights, slot_rows, scratch, dgate_up, act_w,
                                   dweights);
        },
        dgate_up, rdgu, cr);
  }
  // The weight gradient's kernel has no store partition or scales: only the tile width varies.
  for (const std::string& v : options.variants) {
    if (v != "default" && v != "tile128" && v != "tile256") continue;
    set_grouped_gemm_variant(grouped_variant(v));
    add(v == "default" ? "backward weight" : "backward weight, " + v,
        act_n + act_k + 4.0 * static_cast<double>(s.experts * s.n * s.k),
        [&] { grouped_gemm_backward_weight(dy, x, offsets, dw, false); }, dw, rdw, ce);
  }
  set_grouped_gemm_variant({});

  // FP8 (e4m3, 1x128 activation and 128x128 weight scales), quantized outside the
  // timing; its error is against the same float64 product of the bf16 operands, so it
  // includes the quantization, as the PyTorch arm's does.
  if (!grouped_gemm_available(device) || s.k % 16 != 0) return;
  Tensor xq = Tensor::empty(x.shape(), DType::f8e4m3, device), xs = Tensor::empty(fp8_rows_scales_shape(x.shape()), DType::f32, device);
  Tensor wq = Tensor::empty(w.shape(), DType::f8e4m3, device), ws = Tensor::empty(fp8_blocks_scales_shape(w.shape()), DType::f32, device);
  quantize_fp8_rows(x, xq, xs);
  quantize_fp8_blocks(w, wq, ws);
  const double scale_bytes = 4.0 * static_cast<double>(xs.numel() + ws.numel());
  add_m("forward fp8", act_k / 2 + active_w / 2 + act_n + scale_bytes,
        [&] { grouped_gemm_forward_fp8(xq, xs, wq, ws, offsets, y); }, y, ry, true);

  // MXFP4 weights (e2m1 pairs, an e8m0 scale per 32 along K) beside the bf16
  // activations, quantized outside the timing; the error includes the quantization.
  if (s.k % kMxBlock != 0 || s.n % 64 != 0) return;
  Tensor wc = Tensor::empty(mxfp4_values_shape(w.shape()), DType::u8, device);
  Tensor wsc = Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0, device);
  quantize_mxfp4(w, wc, wsc);
  const double mx_w = static_cast<double>(active * s.n * (s.k / 2 + s.k / kMxBlock));
  add("forward mxfp4", act_k + mx_w + act_n, [&] { grouped_gemm_forward_mxfp4(x, wc, wsc, offsets, y); }, y, ry, cr);
  if (s.gate_up)
    add("swiglu forward mxfp4", act_k + mx_w + act_n + act_n / 2,
        [&] { grouped_gemm_swiglu_forward_mxfp4(x, wc, wsc, offsets, gate_up, h); }, h, rh, cr);
}

void save_grouped_cases(const std::string& path, const std::vector<GroupedBenchCase>& cases,
                        const GroupedRoofs& roofs, const std::string& device_name) {
  nlohmann::json out = {{"device", device_name},
                        {"copy_tb_per_s", roofs.copy_tb_per_s},
                        {"gemm_tflops", roofs.gemm_tflops},
                        {"gemm_size", roofs.gemm_size},
                        {"cases", nlohmann::json::array()}};
  for (const GroupedBenchCase& c : cases) {
    nlohmann::json rows = nlohmann::json::object();
    for (const GroupedBenchRow& r : c.rows) rows[r.product] = {{"ms", r.ms}, {"tflops", r.tflops}, {"error", r.error}};
    out["cases"].push_back({{"shape", c.shape.name},
                            {"experts", c.shape.experts},
                            {"topk", c.shape.topk},
                            {"k", c.shape.k},
                            {"n", c.shape.n},
                            {"gate_up", c.shape.gate_up},
                            {"tokens", c.tokens},
                            {"routing", c.routing},
                            {"counts", c.route.counts},
                            {"offsets", c.route.offsets},
                            {"amber", rows}});
  }
  const std::filesystem::path file(path);
  std::error_code made;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), made);
  AMBER_CHECK(!made, "bench kernel grouped: cannot create the folder of '", path, "': ", made.message());
  // Written whole to a neighbour, then renamed: a reader never sees half a file.
  const std::string partial = path + ".partial";
  {
    std::ofstream f(partial);
    f << out.dump() << "\n";
    AMBER_CHECK(f.good(), "bench kernel grouped: cannot write ", partial, "; check that --inputs-dir is writable");
  }
  std::filesystem::rename(partial, path);
}

}  // namespace amber
