// CPU MoE routing: per-token scores, top-k and weights (and their exact derivative), a
// stable counting sort into expert order, and row gathers and slot-ordered sums. The
// router math runs in the logits' type (f32, or f64 for gradient checks).
#include "amber/ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "amber/ops/cpu/activation.h"
#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

template <class T>
T softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

// One token's scores from its logits.
template <class T>
void token_scores(RouterScore score, const T* logits, int64_t experts, T* out) {
  switch (score) {
    case RouterScore::softmax: {
      const T top = *std::max_element(logits, logits + experts);
      T sum = 0;
      for (int64_t e = 0; e < experts; ++e) sum += out[e] = std::exp(logits[e] - top);
      for (int64_t e = 0; e < experts; ++e) out[e] /= sum;
      return;
    }
    case RouterScore::sigmoid:
      for (int64_t e = 0; e < experts; ++e) out[e] = T(1) / (T(1) + std::exp(-logits[e]));
      return;
    case RouterScore::sqrt_softplus:
      for (int64_t e = 0; e < experts; ++e) out[e] = std::sqrt(softplus(logits[e]));
      return;
  }
}

// d(score_e)/d(logit_e) for the element-wise scores, from the score itself.
template <class T>
T score_slope(RouterScore score, T s) {
  if (score == RouterScore::sigmoid) return s * (T(1) - s);
  // sqrt(softplus(l)): d/dl = sigmoid(l) / (2 s), and sigmoid(l) = 1 - exp(-softplus(l)).
  return s > T(0) ? -std::expm1(-s * s) / (T(2) * s) : T(0);
}

// d(loss)/d(scores) of one token, ds [E], turned in place into d(loss)/d(logits):
// through the softmax's Jacobian, or each element-wise score's slope.
template <class T>
void scores_to_logits(RouterScore score, const T* s, int64_t experts, T* ds) {
  if (score == RouterScore::softmax) {
    T inner = 0;  // sum over experts of ds_e s_e
    for (int64_t e = 0; e < experts; ++e) inner += ds[e] * s[e];
    for (int64_t e = 0; e < experts; ++e) ds[e] = s[e] * (ds[e] - inner);
  } else {
    for (int64_t e = 0; e < experts; ++e) ds[e] *= score_slope(score, s[e]);
  }
}

}  // namespace

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights) {
  const int64_t tokens = logits.size(0), num = logits.size(1), k = spec.top_k;
  with_compute_type(logits.dtype(), [&]<class T>() {
    const T* l = logits.data<T>();
    T* s = scores.data<T>();
    T* w = weights.data<T>();
    int32_t* ex = experts.data<int32_t>();
    const std::vector<double> b = bias.defined() ? bias.to_doubles() : std::vector<double>(num, 0.0);
#pragma omp parallel for if (tokens * num > 65536)
    for (int64_t t = 0; t < tokens; ++t) {
      T* st = s + t * num;
      token_scores<T>(spec.score, l + t * num, num, st);
      std::vector<int32_t> order(static_cast<size_t>(num));
      std::iota(order.begin(), order.end(), 0);
      const auto before = [&](int32_t a, int32_t c) {
        const double ka = static_cast<double>(st[a]) + b[a], kc = static_cast<double>(st[c]) + b[c];
        return ka > kc || (ka == kc && a < c);
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      T sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += st[order[j]];
      const T factor = static_cast<T>(spec.scaling) / (spec.normalize ? sum : T(1));
      for (int64_t j = 0; j < k; ++j) {
        ex[t * k + j] = order[j];
        w[t * k + j] = st[order[j]] * factor;
      }
    }
  });
}

void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits) {
  const int64_t tokens = scores.size(0), num = scores.size(1), k = spec.top_k;
  with_compute_type(scores.dtype(), [&]<class T>() {
    const T* s = scores.data<T>();
    const T* g = dweights.data<T>();
    const int32_t* ex = experts.data<int32_t>();
    T* dl = dlogits.data<T>();
#pragma omp parallel for if (tokens * num > 65536)
    for (int64_t t = 0; t < tokens; ++t) {
      const T* st = s + t * num;
      const T* gt = g + t * k;
      const int32_t* et = ex + t * k;
      T* out = dl + t * num;
      std::fill(out, out + num, T(0));
      // d(loss)/d(score) of the chosen experts: w_j = c s_j / S (S = sum of the chosen
      // scores when normalizing, else 1).
      T sum = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) {
        sum += st[et[j]];
        dot += gt[j] * st[et[j]];
      }
      const T c = static_cast<T>(spec.scaling);
      for (int64_t j = 0; j < k; ++j)
        out[et[j]] = spec.normalize ? c * (gt[j] / sum - dot / (sum * sum)) : c * gt[j];
      scores_to_logits(spec.score, st, num, out);
    }
  });
}

void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum) {
  const int64_t num = logits.size(1), k = spec.top_k, docs = cu_seqlens.numel() - 1;
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int32_t* ex = experts.data<int32_t>();
  const double scale = loss_scale.item(0);
  double total = 0;
  with_compute_type(logits.dtype(), [&]<class T>() {
    const T *l = logits.data<T>(), *s = scores.data<T>();
    T* dl = dlogits.data<T>();
    std::vector<T> g(static_cast<size_t>(num)), ds(static_cast<size_t>(num));
    for (int64_t d = 0; d < docs; ++d) {
      const int64_t begin = cu[d], end = cu[d + 1], length = end - begin;
      if (length == 0) continue;
      // g_e = d(the document's weighted balance loss)/d(p_te), the same for its tokens.
      std::fill(g.begin(), g.end(), T(0));
      for (int64_t i = begin * k; i < end * k; ++i) g[ex[i]] += T(1);
      const double per_copy = loss.balance_weight * static_cast<double>(num) / static_cast<double>(k * length);
      for (T& v : g) v *= static_cast<T>(per_copy);
      for (int64_t t = begin; t < end; ++t) {
        const T *lt = l + t * num, *st = s + t * num;
        T* out = dl + t * num;
        T score_sum = 0, gp = 0;
        for (int64_t e = 0; e < num; ++e) score_sum += st[e];
        for (int64_t e = 0; e < num; ++e) gp += g[e] * st[e] / score_sum;
        for (int64_t e = 0; e < num; ++e) ds[e] = (g[e] - gp) / score_sum;
        scores_to_logits(spec.score, st, num, ds.data());
        // z-loss: d(lse^2)/d(logit_e) = 2 lse softmax_e.
        const T top = *std::max_element(lt, lt + num);
        T exp_sum = 0;
        for (int64_t e = 0; e < num; ++e) exp_sum += std::exp(lt[e] - top);
        const T lse = top + std::log(exp_sum);
        for (int64_t e = 0; e < num; ++e) {
          const T z_grad = T(2) * static_cast<T>(loss.z_weight) * lse * std::exp(lt[e] - top) / exp_sum;
          out[e] += static_cast<T>(scale) * (ds[e] + z_grad);
        }
        total += static_cast<double>(gp) + loss.z_weight * static_cast<double>(lse * lse);
      }
    }
  });
  sum.data<double>()[0] += total;
}

void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows, Tensor& row_tokens) {
  const int64_t tokens = experts.size(0), k = experts.size(1);
  const int32_t* ex = experts.data<int32_t>();
  int32_t* off = offsets.data<int32_t>();
  std::fill(off, off + num_experts + 1, 0);
  for (int64_t i = 0; i < tokens * k; ++i) ++off[ex[i] + 1];
  for (int64_t e = 0; e < num_experts; ++e) off[e + 1] += off[e];
  std::vector<int32_t> cursor(off, off + num_experts);
  int32_t* rows = slot_rows.data<int32_t>();
  int32_t* toks = row_tokens.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = cursor[ex[t * k + j]]++;
      rows[t * k + j] = row;
      toks[row] = static_cast<int32_t>(t);
    }
}

void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs) {
  const int64_t rows = xs.size(0);
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * dtype_size(x.dtype());
  const int32_t* toks = row_tokens.data<int32_t>();
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(xs.raw());
#pragma omp parallel for if (rows * static_cast<int64_t>(row_bytes) > (1 << 20))
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * row_bytes, src + toks[r] * row_bytes, row_bytes);
}

void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate) {
  const int64_t tokens = out.size(0), width = out.size(1), k = slot_rows.size(1);
  with_compute_type(ys.dtype(), [&]<class T>() {
    const Tensor in = widened<T>(ys);
    Output<T> o(out, accumulate);
    const T* y = in.data<T>();
    const int32_t* rows = slot_rows.data<int32_t>();
    T* p = o.data();
#pragma omp parallel for if (tokens * width > 65536)
    for (int64_t t = 0; t < tokens; ++t) {
      T* row = p + t * width;
      if (!accumulate) std::fill(row, row + width, T(0));
      for (int64_t j = 0; j < k; ++j) {
        const T* src = y + static_cast<int64_t>(rows[t * k + j]) * width;
        for (int64_t c = 0; c < width; ++c) row[c] += src[c];
      }
    }
    o.store();
  });
}

void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights) {
  const int64_t n = weights.numel();
  with_compute_type(weights.dtype(), [&]<class T>() {
    const T* w = weights.data<T>();
    const int32_t* rows = slot_rows.data<int32_t>();
    T* out = row_weights.data<T>();
    for (int64_t i = 0; i < n; ++i) out[rows[i]] = w[i];
  });
}

void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair) {
  const int64_t tokens = dlogits.size(0), experts = dlogits.size(1);
  const bool bf16 = pair.dtype() == DType::bf16;
  const auto round = [bf16](float v) { return bf16 ? bf16_from_float(v) : f16_from_float(v); };
  const auto value = [bf16](uint16_t bits) { return bf16 ? bf16_to_float(bits) : f16_to_float(bits); };
  const float* d = dlogits.data<float>();
  uint16_t* out = static_cast<uint16_t*>(pair.raw());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e) {
      const float v = d[t * experts + e];
      const uint16_t hi = round(v);
      out[e * tokens + t] = hi;
      out[(experts + e) * tokens + t] = round(v - value(hi));
    }
}

void moe_add_load(const Tensor& offsets, Tensor& load) {
  const int32_t* off = offsets.data<int32_t>();
  double* l = load.data<double>();
  for (int64_t e = 0; e < load.numel(); ++e) l[e] += off[e + 1] - off[e];
}

void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats) {
  const int64_t num = load.numel();
  double* l = load.data<double>();
  double mean = 0, busiest = 0, idle = 0;
  for (int64_t e = 0; e < num; ++e) {
    mean += l[e];
    busiest = std::max(busiest, l[e]);
    idle += l[e] == 0;
  }
  mean /= static_cast<double>(num);
  double spread = 0;
  if (bias.defined()) {
    float* b = bias.data<float>();
    if (apply.item(0) != 0)
      for (int64_t e = 0; e < num; ++e) b[e] += static_cast<float>(rate * ((mean > l[e]) - (mean < l[e])));
    spread = static_cast<double>(*std::max_element(b, b + num)) - *std::min_element(b, b + num);
  }
  double* out = stats.data<double>();
  out[0] = mean > 0 ? busiest / mean : 0;
  out[1] = idle;
  out[2] = spread;
  std::fill(l, l + num, 0.0);
}

// The SwiGLU itself runs as ops/cpu/activation's, so the oracle has one SwiGLU.
void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights) {
  const int64_t rows = da.size(0), width = da.size(1);
  Tensor act = Tensor::empty(da.shape(), da.dtype()), da_w = Tensor::empty(da.shape(), da.dtype());
  swiglu_forward(gate_up, act);
  with_compute_type(dweights.dtype(), [&]<class T>() {
    const Tensor a = widened<T>(da), h = widened<T>(act);
    const T *pa = a.data<T>(), *ph = h.data<T>();
    const int32_t* slot_row = slot_rows.data<int32_t>();
    T* out = dweights.data<T>();
#pragma omp parallel for if (rows * width > 65536)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = slot_row[i];
      T sum = 0;
      for (int64_t c = 0; c < width; ++c) sum += pa[r * width + c] * ph[r * width + c];
      out[i] = sum;
    }
  });
  with_compute_type(da.dtype(), [&]<class T>() {
    const Tensor a = widened<T>(da), h = widened<T>(act), w = widened<T>(row_weights);
    const T *pa = a.data<T>(), *ph = h.data<T>(), *pw = w.data<T>();
    Output<T> scaled_act(act_w), scaled_grad(da_w);
    T *po = scaled_act.data(), *pd = scaled_grad.data();
#pragma omp parallel for if (rows * width > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        po[r * width + c] = pw[r] * ph[r * width + c];
        pd[r * width + c] = pw[r] * pa[r * width + c];
      }
    scaled_act.store();
    scaled_grad.store();
  });
  swiglu_backward(da_w, gate_up, dgate_up);
}

}  // namespace amber::cpu
