#include "amber/model/attention_layer.h"

#include <cmath>

#include "amber/ops/attention.h"
#include "amber/ops/gemm.h"
#include "amber/ops/norm.h"
#include "amber/ops/rope.h"

namespace amber {
namespace {

class CausalAttention final : public AttentionLayer {
 public:
  explicit CausalAttention(const AttentionSpec& s)
      : heads_(s.config->heads),
        kv_heads_(s.config->resolved_kv_heads()),
        head_dim_(s.config->resolved_head_dim()),
        position_(s.position) {
    const ModelConfig& c = *s.config;
    const int64_t q_dim = int64_t{heads_} * head_dim_, kv_dim = int64_t{kv_heads_} * head_dim_;
    // q, k and v are three parameters stacked in one buffer: one product computes all
    // three projections (and one their gradients), which at GQA's narrow k and v runs
    // faster than three.
    const auto stacked = [&](const char* what, const Shape& trailing) {
      return make_stacked_params({s.name + ".q_proj." + what, s.name + ".k_proj." + what, s.name + ".v_proj." + what},
                                 {q_dim, kv_dim, kv_dim}, trailing, s.placement);
    };
    qkv_ = stacked("weight", Shape{c.dim});
    qkv_.set_product_gradient();
    o_ = make_param(s.name + ".o_proj.weight", {c.dim, q_dim}, s.placement);
    o_->product_gradient = true;
    if (c.attn_bias) {
      qkv_bias_ = stacked("bias", Shape{});
      o_bias_ = make_param(s.name + ".o_proj.bias", {c.dim}, s.placement);
    }
    if (c.qk_norm) {
      q_norm_ = norm_registry().build("rmsnorm", {s.name + ".q_norm", head_dim_, c.norm_eps, c.qk_norm_affine, s.placement});
      k_norm_ = norm_registry().build("rmsnorm", {s.name + ".k_norm", head_dim_, c.norm_eps, c.qk_norm_affine, s.placement});
    }
    if (c.attn_sink) {
      sinks_ = make_param(s.name + ".sinks", {heads_}, s.placement);
      sinks_->weight_decay = false;
      sinks_->muon = false;
    }
    options_.softmax_scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    options_.window = s.window;
    fused_qk_ = q_norm_ && q_norm_->rms_parts() && position_->rope_table();
  }

  void collect(std::vector<std::shared_ptr<Param>>& out) const override {
    for (const StackedParams* stack : {&qkv_, &qkv_bias_})
      for (const auto& p : stack->parts) out.push_back(p);
    for (const auto& p : {o_, o_bias_, sinks_})
      if (p) out.push_back(p);
    if (q_norm_) q_norm_->collect(out);
    if (k_norm_) k_norm_->collect(out);
  }

  Tensor forward(const Tensor& h, const SeqInfo& seq, Saved& s, Arena& arena,
                 const ResidualAdd& into) const override {
    const int64_t tokens = h.size(0);
    s.h = h;
    Tensor v_raw;
    project_qkv(h, arena, s.q_raw, s.k_raw, v_raw);
    s.v = copy(v_raw, arena);
    normalise_and_rotate(seq.positions, s, arena);
    s.o = arena.alloc({tokens, heads_, head_dim_}, h.dtype());
    s.lse = arena.alloc({tokens, heads_}, norm_stat_dtype(h.dtype()));
    attention_forward(s.q, s.k, s.v, seq, options_, sinks(), s.o, s.lse);
    const Tensor o = s.o.view({tokens, int64_t{heads_} * head_dim_});
    if (into.residual) {
      linear_forward(o, o_->work, o_bias_ ? o_bias_->work : Tensor(), *into.sum, *into.residual, into.scale);
      return *into.sum;
    }
    return project(o, o_, o_bias_, arena);
  }

  Tensor infer(const Tensor& h, const CachedStep& step, LayerCache& cache, Arena& arena) const override {
    const int64_t tokens = h.size(0);
    Saved s;  // the forward's bookkeeping, discarded: generation has no backward
    Tensor v;
    project_qkv(h, arena, s.q_raw, s.k_raw, v);
    normalise_and_rotate(step.positions, s, arena);
    const Tensor &q = s.q, &k = s.k;
    for (size_t seq = 0; seq + 1 < step.cu_q.size(); ++seq) {
      const int64_t first = step.cu_q[seq], count = step.cu_q[seq + 1] - first, at = step.starts[seq];
      AMBER_CHECK(at + count <= cache.k.size(1), "generation: sequence ", seq, " reached the KV cache capacity ",
                  cache.k.size(1), "; raise the cache size (prompt + max new tokens)");
      Tensor kd = cache.k.select(0, static_cast<int64_t>(seq)).slice(0, at, at + count);
      Tensor vd = cache.v.select(0, static_cast<int64_t>(seq)).slice(0, at, at + count);
      kd.copy_from(k.slice(0, first, first + count));
      vd.copy_from(v.slice(0, first, first + count));
    }
    Tensor o = arena.alloc({tokens, heads_, head_dim_}, h.dtype());
    attention_cached_forward(q, cache.k, cache.v, step.cu_q, step.starts, options_, sinks(), o);
    return project(o.view({tokens, int64_t{heads_} * head_dim_}), o_, o_bias_, arena);
  }

  Tensor backward(const Tensor& dout, const SeqInfo& seq, const Saved& s, Arena& arena) const override {
    const int64_t tokens = dout.size(0);
    const DType dt = dout.dtype();
    Tensor o_flat = s.o.view({tokens, int64_t{heads_} * head_dim_});
    Tensor d_o = arena.alloc(o_flat.shape(), dt);
    Tensor dob = grad_of(o_bias_), dqkv_bias = grad_of(qkv_bias_.whole);
    linear_backward(dout, o_flat, o_->work, d_o, o_->grad, dob, o_->grad_accumulates());
    Tensor dq = arena.alloc(s.q.shape(), dt), dk = arena.alloc(s.k.shape(), dt);
    Tensor dv = arena.alloc(s.v.shape(), dt);
    Tensor dsinks = grad_of(sinks_);
    // The three input gradients side by side, as the stacked projection wrote them, so
    // one product gives dh = [dq dk dv] [Wq; Wk; Wv] and the weights' gradients.
    Tensor dqkv = arena.alloc({tokens, heads_ + 2 * int64_t{kv_heads_}, head_dim_}, dt);
    Tensor dq_raw = dqkv.slice(1, 0, heads_), dk_raw = dqkv.slice(1, heads_, heads_ + kv_heads_);
    if (fused_qk_) {
      // The fused QK-norm + RoPE backward runs inside the attention's (on Hopper it
      // reads dq in f32, before any rounding to bf16).
      const QkNormRopeGrad then{norm_and_rope_grad(*q_norm_, s.q_norm, dq_raw),
                                norm_and_rope_grad(*k_norm_, s.k_norm, dk_raw), seq.positions,
                                position_->rope_table()};
      attention_backward(d_o.view(s.o.shape()), s.q, s.k, s.v, s.o, s.lse, seq, options_, sinks(), dq, dk, dv,
                         dsinks, &then);
    } else {
      attention_backward(d_o.view(s.o.shape()), s.q, s.k, s.v, s.o, s.lse, seq, options_, sinks(), dq, dk, dv,
                         dsinks);
      unrotate_and_unnormalise(dq, dk, seq.positions, s, dq_raw, dk_raw);
    }
    dqkv.slice(1, heads_ + kv_heads_, heads_ + 2 * kv_heads_).copy_from(dv);
    Tensor dh = arena.alloc(s.h.shape(), dt);
    linear_backward(dqkv.view({tokens, dqkv.numel() / tokens}), s.h, qkv_.whole->work, dh, qkv_.whole->grad,
                    dqkv_bias, qkv_.whole->grad_accumulates());
    return dh;
  }

 private:
  static Tensor project(const Tensor& x, const std::shared_ptr<Param>& w, const std::shared_ptr<Param>& b,
                        Arena& arena) {
    Tensor y = arena.alloc({x.size(0), w->work.size(0)}, x.dtype());
    linear_forward(x, w->work, b ? b->work : Tensor(), y);
    return y;
  }
  // s.q and s.k, what the attention kernel reads, from s.q_raw and s.k_raw: QK-norm and
  // the position encoding into fresh tensors (the raw projections stay intact for the
  // norm's backward); one pass for both when the norm is an RMSNorm and the encoding
  // RoPE (qk_norm_rope_forward).
  void normalise_and_rotate(const Tensor& positions, Saved& s, Arena& arena) const {
    if (fused_qk_) {
      const QkNormRopeForward q = norm_and_rope_side(*q_norm_, s.q_raw, s.q_norm, arena);
      const QkNormRopeForward k = norm_and_rope_side(*k_norm_, s.k_raw, s.k_norm, arena);
      qk_norm_rope_forward(q, k, positions, *position_->rope_table());
      s.q = q.y;
      s.k = k.y;
      return;
    }
    s.q = q_norm_ ? q_norm_->forward(s.q_raw, s.q_norm, arena) : copy(s.q_raw, arena);
    s.k = k_norm_ ? k_norm_->forward(s.k_raw, s.k_norm, arena) : copy(s.k_raw, arena);
    position_->forward(s.q, s.k, positions);
  }
  // One side of the fused pass, its output and the norm's saved state allocated.
  static QkNormRopeForward norm_and_rope_side(const Norm& norm, const Tensor& raw, Norm::Saved& saved, Arena& arena) {
    const Norm::RmsParts rms = *norm.rms_parts();
    saved.x = raw;
    saved.rstd = arena.alloc({raw.size(0) * raw.size(1)}, norm_stat_dtype(raw.dtype()));
    return {raw, rms.weight ? rms.weight->work : Tensor(), rms.eps, arena.alloc(raw.shape(), raw.dtype()),
            saved.rstd};
  }
  // The transpose when QK-norm and the position encoding are not fused: the attention's
  // dq and dk (rotated in place) into the raw projections' gradients dq_raw and dk_raw
  // (views into the stacked gradient).
  void unrotate_and_unnormalise(Tensor& dq, Tensor& dk, const Tensor& positions, const Saved& s, Tensor& dq_raw,
                                Tensor& dk_raw) const {
    position_->backward(dq, dk, positions);
    if (q_norm_) q_norm_->backward_to(dq, s.q_norm, dq_raw);
    else dq_raw.copy_from(dq);
    if (k_norm_) k_norm_->backward_to(dk, s.k_norm, dk_raw);
    else dk_raw.copy_from(dk);
  }
  // One side of the fused backward; its dy is the attention's (attention_backward sets it).
  static QkNormRopeBackward norm_and_rope_grad(const Norm& norm, const Norm::Saved& saved, const Tensor& dx) {
    const Norm::RmsParts rms = *norm.rms_parts();
    return {Tensor(), saved.x, rms.weight ? rms.weight->work : Tensor(), saved.rstd, dx,
            rms.weight ? rms.weight->grad : Tensor()};
  }
  // The stacked projection [T, H + 2 Hkv, Dh] and its q, k and v heads, as views
  // (token-strided: the norms read them in place, other consumers copy them).
  void project_qkv(const Tensor& h, Arena& arena, Tensor& q, Tensor& k, Tensor& v) const {
    const int64_t tokens = h.size(0), kv_end = heads_ + 2 * int64_t{kv_heads_};
    const Tensor heads = project(h, qkv_.whole, qkv_bias_.whole, arena).view({tokens, kv_end, head_dim_});
    q = heads.slice(1, 0, heads_);
    k = heads.slice(1, heads_, heads_ + kv_heads_);
    v = heads.slice(1, heads_ + kv_heads_, kv_end);
  }
  static Tensor copy(const Tensor& x, Arena& arena) {
    Tensor y = arena.alloc(x.shape(), x.dtype());
    y.copy_from(x);
    return y;
  }
  static Tensor grad_of(const std::shared_ptr<Param>& p) { return p ? p->grad : Tensor(); }
  Tensor sinks() const { return sinks_ ? sinks_->work : Tensor(); }

  int heads_, kv_heads_, head_dim_;
  std::shared_ptr<const PositionEncoding> position_;
  AttentionOptions options_;
  StackedParams qkv_, qkv_bias_;  // qkv_bias_ empty without attn_bias
  std::shared_ptr<Param> o_, o_bias_, sinks_;
  std::unique_ptr<Norm> q_norm_, k_norm_;
  bool fused_qk_ = false;  // QK-norm (RMSNorm) and RoPE in one pass
};

}  // namespace

const Registry<AttentionLayer, const AttentionSpec&>& attention_registry() {
  static const auto registry = [] {
    Registry<AttentionLayer, const AttentionSpec&> r("attention");
    r.add("causal", [](const AttentionSpec& s) { return std::make_unique<CausalAttention>(s); });
    return r;
  }();
  return registry;
}

}  // namespace amber
