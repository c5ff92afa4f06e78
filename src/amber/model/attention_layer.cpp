#include "amber/model/attention_layer.h"

#include <cmath>

#include "amber/ops/attention.h"
#include "amber/ops/gemm.h"
#include "amber/ops/norm.h"

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
    q_ = make_param(s.name + ".q_proj.weight", {q_dim, c.dim}, s.placement);
    k_ = make_param(s.name + ".k_proj.weight", {kv_dim, c.dim}, s.placement);
    v_ = make_param(s.name + ".v_proj.weight", {kv_dim, c.dim}, s.placement);
    o_ = make_param(s.name + ".o_proj.weight", {c.dim, q_dim}, s.placement);
    if (c.attn_bias) {
      q_bias_ = make_param(s.name + ".q_proj.bias", {q_dim}, s.placement);
      k_bias_ = make_param(s.name + ".k_proj.bias", {kv_dim}, s.placement);
      v_bias_ = make_param(s.name + ".v_proj.bias", {kv_dim}, s.placement);
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
  }

  void collect(std::vector<std::shared_ptr<Param>>& out) const override {
    for (const auto& p : {q_, k_, v_, o_, q_bias_, k_bias_, v_bias_, o_bias_, sinks_})
      if (p) out.push_back(p);
    if (q_norm_) q_norm_->collect(out);
    if (k_norm_) k_norm_->collect(out);
  }

  Tensor forward(const Tensor& h, const SeqInfo& seq, Saved& s, Arena& arena) const override {
    const int64_t tokens = h.size(0);
    s.h = h;
    s.q_raw = project(h, q_, q_bias_, arena).view({tokens, heads_, head_dim_});
    s.k_raw = project(h, k_, k_bias_, arena).view({tokens, kv_heads_, head_dim_});
    s.v = project(h, v_, v_bias_, arena).view({tokens, kv_heads_, head_dim_});
    // QK-norm and position encoding write fresh tensors: the raw projections stay
    // intact for the norm's backward.
    s.q = q_norm_ ? q_norm_->forward(s.q_raw, s.q_norm, arena) : copy(s.q_raw, arena);
    s.k = k_norm_ ? k_norm_->forward(s.k_raw, s.k_norm, arena) : copy(s.k_raw, arena);
    position_->forward(s.q, s.k, seq.positions);
    s.o = arena.alloc({tokens, heads_, head_dim_}, h.dtype());
    s.lse = arena.alloc({tokens, heads_}, norm_stat_dtype(h.dtype()));
    attention_forward(s.q, s.k, s.v, seq, options_, sinks(), s.o, s.lse);
    return project(s.o.view({tokens, int64_t{heads_} * head_dim_}), o_, o_bias_, arena);
  }

  Tensor infer(const Tensor& h, const CachedStep& step, LayerCache& cache, Arena& arena) const override {
    const int64_t tokens = h.size(0);
    Saved s;  // the forward's bookkeeping, discarded: generation has no backward
    Tensor q_raw = project(h, q_, q_bias_, arena).view({tokens, heads_, head_dim_});
    Tensor k_raw = project(h, k_, k_bias_, arena).view({tokens, kv_heads_, head_dim_});
    Tensor v = project(h, v_, v_bias_, arena).view({tokens, kv_heads_, head_dim_});
    Tensor q = q_norm_ ? q_norm_->forward(q_raw, s.q_norm, arena) : q_raw;
    Tensor k = k_norm_ ? k_norm_->forward(k_raw, s.k_norm, arena) : k_raw;
    position_->forward(q, k, step.positions);
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
    Tensor dqb = grad_of(q_bias_), dkb = grad_of(k_bias_), dvb = grad_of(v_bias_), dob = grad_of(o_bias_);
    linear_backward(dout, o_flat, o_->work, d_o, o_->grad, dob);
    Tensor dq = arena.alloc(s.q.shape(), dt), dk = arena.alloc(s.k.shape(), dt);
    Tensor dv = arena.alloc(s.v.shape(), dt);
    Tensor dsinks = grad_of(sinks_);
    attention_backward(d_o.view(s.o.shape()), s.q, s.k, s.v, s.o, s.lse, seq, options_, sinks(), dq, dk,
                       dv, dsinks);
    position_->backward(dq, dk, seq.positions);
    if (q_norm_) dq = q_norm_->backward(dq, s.q_norm, arena);
    if (k_norm_) dk = k_norm_->backward(dk, s.k_norm, arena);
    // dh = dq Wq + dk Wk + dv Wv, the last two added by the products themselves.
    Tensor dh = arena.alloc(s.h.shape(), dt);
    linear_backward(dq.view({tokens, dq.numel() / tokens}), s.h, q_->work, dh, q_->grad, dqb);
    linear_backward(dk.view({tokens, dk.numel() / tokens}), s.h, k_->work, dh, k_->grad, dkb, true);
    linear_backward(dv.view({tokens, dv.numel() / tokens}), s.h, v_->work, dh, v_->grad, dvb, true);
    return dh;
  }

 private:
  static Tensor project(const Tensor& x, const std::shared_ptr<Param>& w, const std::shared_ptr<Param>& b,
                        Arena& arena) {
    Tensor y = arena.alloc({x.size(0), w->work.size(0)}, x.dtype());
    linear_forward(x, w->work, b ? b->work : Tensor(), y);
    return y;
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
  std::shared_ptr<Param> q_, k_, v_, o_, q_bias_, k_bias_, v_bias_, o_bias_, sinks_;
  std::unique_ptr<Norm> q_norm_, k_norm_;
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
