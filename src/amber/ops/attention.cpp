// Entry points of ops/attention.h: validation shared by both devices, the softmax scale
// resolved once, then the device switch.
#include "amber/ops/attention.h"

#include <cmath>
#include <utility>

#include "amber/core/op_hook.h"
#include "amber/ops/cpu/attention.h"
#include "amber/ops/cuda/attention/attention.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

DType lse_dtype(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

// Checks shared by forward and backward; returns the options with the softmax scale
// resolved (head_dim^-0.5 when 0 was asked for).
AttentionOptions check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                              const SeqInfo& seq, const AttentionOptions& options,
                              const Tensor& sinks) {
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    AMBER_CHECK(t->is_contiguous(), op, ": ", name, " ", t->shape(),
                " must be contiguous; call contiguous() first");
  }
  AMBER_CHECK(q.ndim() == 3 && k.ndim() == 3, op, ": q must be [tokens, heads, head_dim] and k, v ",
              "[tokens, kv_heads, head_dim]; got q ", q.shape(), ", k ", k.shape());
  AMBER_CHECK(k.shape() == v.shape(), op, ": k ", k.shape(), " and v ", v.shape(),
              " must have the same shape");
  AMBER_CHECK(q.size(0) == seq.total_tokens && k.size(0) == seq.total_tokens, op, ": q ", q.shape(),
              " and k ", k.shape(), " must have one row per token of the batch (", seq.total_tokens,
              " tokens in cu_seqlens)");
  AMBER_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": q ", q.shape(), " has ",
              q.size(1), " heads, not a multiple of the ", k.size(1), " KV heads of k ", k.shape());
  AMBER_CHECK(q.size(2) == k.size(2), op, ": head_dim differs between q ", q.shape(), " and k ",
              k.shape());
  AMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
              ": q, k and v must share one dtype; got ", dtype_name(q.dtype()), ", ",
              dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  AMBER_CHECK(options.window >= 0, op, ": window must be >= 0 (0 = unlimited), got ",
              options.window);
  AMBER_CHECK(std::isfinite(options.softmax_scale) && options.softmax_scale >= 0, op,
              ": softmax_scale must be finite and >= 0 (0 = head_dim^-0.5), got ",
              options.softmax_scale);
  if (sinks.defined()) {
    AMBER_CHECK(sinks.ndim() == 1 && sinks.size(0) == q.size(1), op, ": sinks must be [", q.size(1),
                "] (one logit per query head of q ", q.shape(), "), got ", sinks.shape());
    AMBER_CHECK(is_floating(sinks.dtype()), op, ": sinks must be floating point, got ",
                dtype_name(sinks.dtype()));
    AMBER_CHECK(sinks.is_contiguous(), op, ": sinks must be contiguous");
  }
  if (q.device().is_cuda()) {
    AMBER_CHECK(seq.cu_seqlens.defined() && seq.cu_seqlens.device() == q.device(), op,
                ": q is on ", q.device(), " but seq.cu_seqlens is not; move the SeqInfo there "
                "first (SeqInfo::to)");
  }
  AttentionOptions resolved = options;
  if (resolved.softmax_scale == 0) resolved.softmax_scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  return resolved;
}

void check_output(const char* op, const char* name, const Tensor& t, const Shape& shape,
                  DType dtype) {
  AMBER_CHECK(t.shape() == shape && t.dtype() == dtype, op, ": ", name, " must be ",
              dtype_name(dtype), " ", shape, ", got ", dtype_name(t.dtype()), " ", t.shape());
  AMBER_CHECK(t.is_contiguous(), op, ": ", name, " ", t.shape(),
              " must be contiguous; call contiguous() first");
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse) {
  const char* op = "attention_forward";
  const AttentionOptions resolved = check_inputs(op, q, k, v, seq, options, sinks);
  check_output(op, "out", out, q.shape(), q.dtype());
  check_output(op, "lse", lse, Shape{q.size(0), q.size(1)}, lse_dtype(q.dtype()));
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&q, &k, &v, &sinks, &out, &lse}), op,
                    cuda::attention_forward(q, k, v, seq, resolved, sinks, out, lse),
                    cpu::attention_forward(q, k, v, seq, resolved, sinks, out, lse));
  });
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks, const QkNormRopeGrad* then) {
  const char* op = "attention_backward";
  const AttentionOptions resolved = check_inputs(op, q, k, v, seq, options, sinks);
  check_output(op, "dout", dout, q.shape(), q.dtype());
  check_output(op, "out", out, q.shape(), q.dtype());
  check_output(op, "lse", lse, Shape{q.size(0), q.size(1)}, lse_dtype(q.dtype()));
  check_output(op, "dq", dq, q.shape(), q.dtype());
  check_output(op, "dk", dk, k.shape(), k.dtype());
  check_output(op, "dv", dv, v.shape(), v.dtype());
  if (sinks.defined()) {
    AMBER_CHECK(dsinks.defined() && dsinks.shape() == sinks.shape() && is_floating(dsinks.dtype()),
                op, ": dsinks must be a floating tensor of the sinks' shape ", sinks.shape(),
                ", got ", dsinks.defined() ? dsinks.shape() : Shape{});
    AMBER_CHECK(dsinks.is_contiguous(), op, ": dsinks must be contiguous");
  }
  QkNormRopeGrad qk;  // `then` with this call's dq and dk as its sides' dy
  if (then) {
    AMBER_CHECK(then->table, op, ": the QK-norm + RoPE backward that follows needs its RopeTable");
    qk = *then;
    qk.q.dy = dq;
    qk.k.dy = dk;
    const Device device = check_qk_norm_rope_backward(qk.q, qk.k, qk.positions, *qk.table, op);
    AMBER_CHECK(device == q.device(), op, ": the QK-norm + RoPE backward's tensors are on ", device,
                " but q is on ", q.device());
  }
  const QkNormRopeGrad* fused = then ? &qk : nullptr;
  AMBER_ON_DEVICE(
      ops::common_device(op, {&dout, &q, &k, &v, &out, &lse, &sinks, &dq, &dk, &dv, &dsinks}), op,
      cuda::attention_backward(dout, q, k, v, out, lse, seq, resolved, sinks, dq, dk, dv, dsinks, fused), ([&] {
        cpu::attention_backward(dout, q, k, v, out, lse, seq, resolved, sinks, dq, dk, dv, dsinks);
        if (fused) qk_norm_rope_backward(fused->q, fused->k, fused->positions, *fused->table);
      }()));
}

namespace {

// The cache geometry shared by kv_cache_append and attention_cached_forward.
void check_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                 const Tensor& starts) {
  AMBER_CHECK(k_cache.ndim() == 4 && k_cache.shape() == v_cache.shape() && k_cache.dtype() == v_cache.dtype(), op,
              ": the caches must be [sequences, capacity, kv_heads, head_dim] of one shape and dtype, got ",
              dtype_name(k_cache.dtype()), " ", k_cache.shape(), " and ", dtype_name(v_cache.dtype()), " ",
              v_cache.shape());
  AMBER_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op, ": the caches must be contiguous");
  const int64_t sequences = k_cache.size(0);
  AMBER_CHECK(cu_q.dtype() == DType::i32 && cu_q.ndim() == 1 && cu_q.numel() == sequences + 1 &&
                  cu_q.is_contiguous(),
              op, ": cu_q must be contiguous int32 [", sequences + 1, "] (one more than the cache's ", sequences,
              " sequences), got ", dtype_name(cu_q.dtype()), " ", cu_q.shape());
  AMBER_CHECK(starts.dtype() == DType::i32 && starts.ndim() == 1 && starts.numel() == sequences &&
                  starts.is_contiguous(),
              op, ": starts must be contiguous int32 [", sequences, "] (one per cached sequence), got ",
              dtype_name(starts.dtype()), " ", starts.shape());
}

}  // namespace

void kv_cache_append(const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& starts, Tensor& k_cache,
                     Tensor& v_cache) {
  const char* op = "kv_cache_append";
  check_cache(op, k_cache, v_cache, cu_q, starts);
  for (const auto& [name, t] : {std::pair{"k", &k}, std::pair{"v", &v}}) {
    AMBER_CHECK(t->ndim() == 3 && t->size(1) == k_cache.size(2) && t->size(2) == k_cache.size(3) &&
                    t->dtype() == k_cache.dtype(),
                op, ": ", name, " must be ", dtype_name(k_cache.dtype()), " [tokens, ", k_cache.size(2), ", ",
                k_cache.size(3), "] like the cache's rows, got ", dtype_name(t->dtype()), " ", t->shape());
    AMBER_CHECK(t->stride(2) == 1 && t->stride(1) == t->size(2), op, ": each token's [kv_heads, head_dim] block of ",
                name, " ", t->shape(), " must be contiguous");
  }
  AMBER_CHECK(k.size(0) == v.size(0), op, ": k has ", k.size(0), " tokens but v has ", v.size(0));
  AMBER_ON_DEVICE(ops::common_device(op, {&k, &v, &cu_q, &starts, &k_cache, &v_cache}), op,
                  cuda::kv_cache_append(k, v, cu_q, starts, k_cache, v_cache),
                  cpu::kv_cache_append(k, v, cu_q, starts, k_cache, v_cache));
}

void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                              const Tensor& starts, const AttentionOptions& options, const Tensor& sinks,
                              Tensor& out) {
  const char* op = "attention_cached_forward";
  check_cache(op, k_cache, v_cache, cu_q, starts);
  AMBER_CHECK(q.ndim() == 3 && q.is_contiguous() && q.dtype() == k_cache.dtype(), op, ": q must be contiguous ",
              dtype_name(k_cache.dtype()), " [tokens, heads, head_dim] like the cache, got ", dtype_name(q.dtype()),
              " ", q.shape());
  AMBER_CHECK(q.size(2) == k_cache.size(3) && q.size(1) % k_cache.size(2) == 0, op, ": q ", q.shape(),
              " does not fit the cache ", k_cache.shape(), " (head_dim must match, heads a multiple of kv_heads)");
  check_output(op, "out", out, q.shape(), q.dtype());
  AMBER_CHECK(options.window >= 0, op, ": window must be >= 0 (0 = unlimited), got ", options.window);
  if (sinks.defined())
    AMBER_CHECK(sinks.ndim() == 1 && sinks.size(0) == q.size(1) && is_floating(sinks.dtype()) && sinks.is_contiguous(),
                op, ": sinks must be a contiguous floating [", q.size(1), "] (one logit per query head), got ",
                sinks.shape());
  AttentionOptions resolved = options;
  if (resolved.softmax_scale == 0) resolved.softmax_scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  AMBER_ON_DEVICE(ops::common_device(op, {&q, &k_cache, &v_cache, &cu_q, &starts, &sinks, &out}), op,
                  cuda::attention_cached_forward(q, k_cache, v_cache, cu_q, starts, resolved, sinks, out),
                  cpu::attention_cached_forward(q, k_cache, v_cache, cu_q, starts, resolved, sinks, out));
}

}  // namespace amber
