#include "bench/attention_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "amber/core/random.h"
#include "amber/core/seq_info.h"
#include "amber/ops/attention.h"
#include "bench/kernel_bench.h"

namespace amber {
namespace {

int64_t count_non_finite(const Tensor& t) {
  int64_t n = 0;
  for (double x : t.to(Device::cpu()).to_doubles()) n += !std::isfinite(x);
  return n;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.bytes() == y.bytes() && std::memcmp(x.raw(), y.raw(), x.bytes()) == 0;
}

// Rows [0, tokens) and heads [0, heads) of a [T, H, D] tensor, on the CPU in f64.
Tensor head_slice(const Tensor& t, int64_t tokens, int64_t heads) {
  return t.to(Device::cpu()).slice(0, 0, tokens).slice(1, 0, heads).contiguous().to(DType::f64);
}

Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  return Tensor::full(shape, NAN, dtype).to(device);
}

}  // namespace

void save_attention_inputs(const std::string& dir, const AttentionBenchShape& shape, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& dout) {
  for (const Tensor* t : {&q, &k, &v, &dout})
    AMBER_CHECK(t->dtype() == DType::bf16, "save_attention_inputs: the files hold bf16, got ",
                dtype_name(t->dtype()), " ", t->shape());
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  AMBER_CHECK(!made, "bench kernel attention: cannot create --inputs-dir '", dir, "': ", made.message());
  const std::filesystem::path base = std::filesystem::path(dir) / shape.name;
  const nlohmann::json geometry = {{"lengths", shape.lengths},     {"heads", shape.heads},
                                   {"kv_heads", shape.kv_heads},   {"head_dim", shape.head_dim},
                                   {"window", shape.window}};
  std::ofstream json(base.string() + ".json");
  json << geometry.dump() << "\n";
  AMBER_CHECK(json.good(), "bench kernel attention: cannot write ", base.string(),
              ".json; check that --inputs-dir is writable");
  const std::pair<const char*, const Tensor*> tensors[] = {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}};
  for (const auto& [name, t] : tensors) {
    const Tensor host = t->to(Device::cpu());
    std::ofstream out(base.string() + "." + name + ".bf16", std::ios::binary);
    out.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.bytes()));
    AMBER_CHECK(out.good(), "bench kernel attention: cannot write ", base.string(), ".", name,
                ".bf16; check that --inputs-dir is writable");
  }
}

std::vector<int32_t> spread_lengths(int64_t tokens, int lo, int hi) {
  std::vector<int32_t> lengths;
  int64_t left = tokens;
  for (int64_t i = 0; left > 0; ++i) {
    const int64_t l = std::min<int64_t>(left, lo + (i * 7919 + 13) % (hi - lo + 1));
    lengths.push_back(static_cast<int32_t>(l));
    left -= l;
  }
  return lengths;
}

std::vector<AttentionBenchShape> attention_bench_shapes(const std::string& which) {
  const std::vector<int32_t> eight_2048(8, 2048), four_8192(4, 8192);
  const std::vector<AttentionBenchShape> all = {
      {"A", "h20/4 d64, 8 x 2048", 20, 4, 64, 0, eight_2048},
      {"B", "h16/4 d128, 8 x 2048", 16, 4, 128, 0, eight_2048},
      {"C", "h20/4 d64, 50-600", 20, 4, 64, 0, spread_lengths(16384, 50, 600)},
      {"D", "h16/16 d128, 4 x 8192", 16, 16, 128, 0, four_8192},
      {"E", "h16/16 d128, 4 x 8192, window 1024", 16, 16, 128, 1024, four_8192},
      // Beyond issue 6's list: documents shorter than a tile, packed several to one.
      {"F", "h20/4 d64, 20-100", 20, 4, 64, 0, spread_lengths(16384, 20, 100)},
  };
  if (which == "all") return all;
  for (const AttentionBenchShape& s : all)
    if (s.name == which) return {s};
  fail("bench kernel attention: unknown shape '", which, "'; valid: A, B, C, D, E, F, all");
}

double attention_forward_flops(const AttentionBenchShape& shape) {
  double pairs = 0;
  for (int32_t n : shape.lengths)
    for (int64_t i = 0; i < n; ++i) pairs += shape.window > 0 ? std::min<int64_t>(i + 1, shape.window) : i + 1;
  return 4.0 * pairs * shape.heads * shape.head_dim;
}

AttentionBenchRow run_attention_bench(const AttentionBenchShape& shape, Device device, int repeats,
                                      const std::string& inputs_dir, bool portable) {
  AttentionBenchRow row;
  row.shape = shape;
  const SeqInfo seq = SeqInfo::from_lengths(shape.lengths, device);
  const int64_t t = seq.total_tokens, h = shape.heads, kvh = shape.kv_heads, d = shape.head_dim;
  const DType dt = DType::bf16;
  const auto random = [&](Shape s, uint64_t seed) {
    Tensor x = Tensor::empty(s, dt, device);
    fill_normal(x, seed, 0);
    return x;
  };
  const Tensor q = random({t, h, d}, 1), k = random({t, kvh, d}, 2), v = random({t, kvh, d}, 3);
  const Tensor dout = random({t, h, d}, 4);
  if (!inputs_dir.empty()) save_attention_inputs(inputs_dir, shape, q, k, v, dout);
  AttentionOptions options;
  options.window = shape.window;
  options.portable_kernels = portable;
  Tensor out = poisoned(q.shape(), dt, device), lse = poisoned({t, h}, DType::f32, device);
  Tensor dq = poisoned(q.shape(), dt, device), dk = poisoned(k.shape(), dt, device);
  Tensor dv = poisoned(v.shape(), dt, device), none;
  const auto forward = [&] { attention_forward(q, k, v, seq, options, none, out, lse); };
  const auto backward = [&] { attention_backward(dout, q, k, v, out, lse, seq, options, none, dq, dk, dv, none); };
  forward();
  backward();
  row.non_finite = count_non_finite(out) + count_non_finite(dq) + count_non_finite(dk) + count_non_finite(dv);
  const Tensor dq1 = dq.to(Device::cpu()), dk1 = dk.to(Device::cpu()), dv1 = dv.to(Device::cpu());
  backward();
  row.repeat_identical = same_bits(dq1, dq) && same_bits(dk1, dk) && same_bits(dv1, dv);

  // float64 reference: the first document and the heads of the first KV head, which
  // see nothing else (dK/dV of KV head 0 sum over exactly those query heads).
  const int64_t n = shape.lengths[0], group = h / kvh;
  const SeqInfo one = SeqInfo::from_lengths({shape.lengths[0]});
  const Tensor rq = head_slice(q, n, group), rk = head_slice(k, n, 1), rv = head_slice(v, n, 1);
  const Tensor rdo = head_slice(dout, n, group);
  Tensor rout = Tensor::empty(rq.shape(), DType::f64), rlse = Tensor::empty({n, group}, DType::f64);
  Tensor rdq = Tensor::empty(rq.shape(), DType::f64), rdk = Tensor::empty(rk.shape(), DType::f64);
  Tensor rdv = Tensor::empty(rv.shape(), DType::f64);
  attention_forward(rq, rk, rv, one, options, none, rout, rlse);
  attention_backward(rdo, rq, rk, rv, rout, rlse, one, options, none, rdq, rdk, rdv, none);
  row.error_out = relative_error(head_slice(out, n, group), rout);
  row.error_dq = relative_error(head_slice(dq, n, group), rdq);
  row.error_dk = relative_error(head_slice(dk, n, 1), rdk);
  row.error_dv = relative_error(head_slice(dv, n, 1), rdv);

  const double flops = attention_forward_flops(shape);
  row.forward_ms = best_ms(device, repeats, 5, forward);
  row.backward_ms = best_ms(device, repeats, 5, backward);
  row.forward_tflops = flops / (row.forward_ms * 1e-3) / 1e12;
  row.total_tflops = 3.5 * flops / ((row.forward_ms + row.backward_ms) * 1e-3) / 1e12;
  return row;
}

}  // namespace amber
