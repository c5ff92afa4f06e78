#include "amber/model/attention_layer.h"

#include <cmath>

#include "amber/model/linear.h"
#include "amber/ops/attention.h"
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
        position_(s.position),
        qkv_(qkv_projection(s)),
        o_(*s.store, {s.name + ".o_proj", int64_t{heads_} * head_dim_, s.config->dim, s.config->attn_bias,
                      ParamRole::hidden_matrix, s.config->projection_init_std(int64_t{heads_} * head_dim_, true),
                      s.config->attention_recipe}) {
    const ModelConfig& c = *s.config;
    if (c.attn_sink) sinks_ = s.store->add(s.name + ".sinks", {heads_}, ParamRole::vector, ParamInit::zeros());
    if (c.qk_norm) {
      const auto qk_norm = [&](const char* name) {
        return norm_registry().build("rmsnorm", {s.name + name, head_dim_, c.norm_eps, c.qk_norm_affine, s.store});
      };
      q_norm_ = qk_norm(".q_norm");
      k_norm_ = qk_norm(".k_norm");
    }
    options_.softmax_scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    options_.window = s.window;
    fused_qk_ = q_norm_ && q_norm_->rms_parts() && position_->rope_table();
  }

  std::unique_ptr<AttentionLayer::Saved> new_saved() const override { return std::make_unique<Saved>(); }

  Tensor forward(const Tensor& h, const SeqInfo& seq, AttentionLayer::Saved& saved, Arena& arena,
                 const ResidualAdd& into) const override {
    auto& s = static_cast<Saved&>(saved);
    const int64_t tokens = h.size(0);
    s.h = h;
    Tensor v_raw;
    project_qkv(h, arena, s.q_raw, s.k_raw, v_raw);
    s.v = copy(v_raw, arena);
    normalise_and_rotate(seq.positions, s, arena);
    s.o = arena.alloc({tokens, heads_, head_dim_}, h.dtype());
    s.lse = arena.alloc({tokens, heads_}, norm_stat_dtype(h.dtype()));
    attention_forward(s.q, s.k, s.v, seq, options_, sinks(), s.o, s.lse);
    return o_.forward(s.o.view({tokens, int64_t{heads_} * head_dim_}), arena, into);
  }

  Tensor infer(const Tensor& h, const CachedStep& step, LayerCache& cache, Arena& arena) const override {
    const int64_t tokens = h.size(0);
    Saved s;  // the forward's bookkeeping, discarded: generation has no backward
    Tensor v;
    project_qkv(h, arena, s.q_raw, s.k_raw, v);
    normalise_and_rotate(step.positions, s, arena);
    kv_cache_append(s.k, v, step.cu_q, step.starts, cache.k, cache.v);
    Tensor o = arena.alloc({tokens, heads_, head_dim_}, h.dtype());
    attention_cached_forward(s.q, cache.k, cache.v, step.cu_q, step.starts, options_, sinks(), o);
    return o_.forward(o.view({tokens, int64_t{heads_} * head_dim_}), arena);
  }

  Tensor backward(const Tensor& dout, const SeqInfo& seq, const AttentionLayer::Saved& saved,
                  Arena& arena) const override {
    const auto& s = static_cast<const Saved&>(saved);
    const int64_t tokens = dout.size(0);
    const DType dt = dout.dtype();
    const Tensor d_o = o_.backward(dout, s.o.view({tokens, int64_t{heads_} * head_dim_}), arena);
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
    return qkv_.backward(dqkv.view({tokens, dqkv.numel() / tokens}), s.h, arena);
  }

 private:
  struct Saved final : AttentionLayer::Saved {
    Tensor h;                       // input [T, D]
    Tensor q_raw, k_raw;            // projections before QK-norm
    Norm::Saved q_norm, k_norm;
    Tensor q, k, v;                 // what the attention kernel read
    Tensor o, lse;                  // kernel output [T, H, Dh] and log-sum-exp
  };

  // q, k and v are three parameters stacked in one buffer: one product computes all
  // three projections (and one their gradients), which at GQA's narrow k and v runs
  // faster than three.
  static Linear qkv_projection(const AttentionSpec& s) {
    const ModelConfig& c = *s.config;
    const int64_t q_dim = int64_t{c.heads} * c.resolved_head_dim();
    const int64_t kv_dim = int64_t{c.resolved_kv_heads()} * c.resolved_head_dim();
    const auto stacked = [&](const char* what, const Shape& trailing, ParamRole role, ParamInit init) {
      return s.store->add_stacked({s.name + ".q_proj." + what, s.name + ".k_proj." + what, s.name + ".v_proj." + what},
                                  {q_dim, kv_dim, kv_dim}, trailing, role, init);
    };
    const StackedParams weight = stacked("weight", Shape{c.dim}, ParamRole::hidden_matrix,
                                         ParamInit::normal(c.projection_init_std(c.dim, false)));
    for (const auto& p : weight.parts) p->product_gradient = true;
    const StackedParams bias = c.attn_bias ? stacked("bias", Shape{}, ParamRole::vector, ParamInit::zeros())
                                           : StackedParams{};
    return Linear(weight.whole, bias.whole, c.attention_recipe);
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
    return {raw, work_of(rms.weight), rms.eps, arena.alloc(raw.shape(), raw.dtype()),
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
    return {Tensor(), saved.x, work_of(rms.weight), saved.rstd, dx,
            grad_of(rms.weight)};
  }
  // The stacked projection [T, H + 2 Hkv, Dh] and its q, k and v heads, as views
  // (token-strided: the norms read them in place, other consumers copy them).
  void project_qkv(const Tensor& h, Arena& arena, Tensor& q, Tensor& k, Tensor& v) const {
    const int64_t tokens = h.size(0), kv_end = heads_ + 2 * int64_t{kv_heads_};
    const Tensor heads = qkv_.forward(h, arena).view({tokens, kv_end, head_dim_});
    q = heads.slice(1, 0, heads_);
    k = heads.slice(1, heads_, heads_ + kv_heads_);
    v = heads.slice(1, heads_ + kv_heads_, kv_end);
  }
  static Tensor copy(const Tensor& x, Arena& arena) {
    Tensor y = arena.alloc(x.shape(), x.dtype());
    y.copy_from(x);
    return y;
  }
  Tensor sinks() const { return work_of(sinks_); }

  int heads_, kv_heads_, head_dim_;
  std::shared_ptr<const PositionEncoding> position_;
  AttentionOptions options_;
  Linear qkv_, o_;
  std::shared_ptr<Param> sinks_;
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
