// MoE MLP: router product -> scores, top-k and weights (ops/moe.h) -> counting sort
// into expert order -> gather -> grouped gate/up product with SwiGLU -> grouped down
// product scaled by each copy's weight -> combine in slot order (+ shared experts).
// The backward runs the same ops in reverse; a copy's weight gradient is the dot
// product of its unweighted activation gradient (dout W_down) with its activation, so
// no [copies, dim] output is kept for it.
// With model.expert_recipe = fp8_block_hp_wgrad the forward and input-gradient products
// run in block-scaled FP8 (ops/grouped_gemm.h's FP8 forms; an input gradient dy W_e is
// the forward product of dy and W_e^T's tiles), the weight gradients in the compute
// dtype from the same operands as without it.
#include "amber/model/moe.h"

#include "amber/model/linear.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/gemm.h"
#include "amber/ops/grouped_gemm.h"
#include "amber/ops/moe.h"
#include "amber/ops/quant.h"

namespace amber {
namespace {

RouterScore router_score(const std::string& name) {
  if (name == "sigmoid") return RouterScore::sigmoid;
  if (name == "sqrt_softplus") return RouterScore::sqrt_softplus;
  return RouterScore::softmax;
}

// An FP8 operand of the grouped products: e4m3 codes and their f32 scales.
struct Fp8Operand {
  Tensor values, scales;
};

// Room in `arena` for the codes of a [R, C] tensor in 1x128 blocks of its rows.
Fp8Operand fp8_rows_for(const Shape& shape, Arena& arena) {
  return {arena.alloc(shape, DType::f8e4m3), arena.alloc(fp8_rows_scales_shape(shape), DType::f32)};
}

// x [R, C] in 1x128 blocks of its rows.
Fp8Operand fp8_rows(const Tensor& x, Arena& arena) {
  Fp8Operand q = fp8_rows_for(x.shape(), arena);
  quantize_fp8_rows(x, q.values, q.scales);
  return q;
}

// x's rows gathered to its copies' rows xs and, for FP8 experts, their row codes from the
// same pass (the bits of quantizing x before the permutation, as DeepSeek-V3 does).
Fp8Operand gather_rows(const Tensor& x, const Tensor& row_tokens, Tensor& xs, bool fp8, Arena& arena) {
  if (!fp8) {
    moe_gather(x, row_tokens, xs);
    return {};
  }
  Fp8Operand q = fp8_rows_for(xs.shape(), arena);
  moe_gather_fp8_rows(x, row_tokens, xs, q.values, q.scales);
  return q;
}

// The experts' weights w [E, N, K] in 128x128 tiles for the forward, and each w_e^T
// [E, K, N] for the input gradient from the same pass (a tile's codes and scale do not
// depend on its orientation): the forward quantizes once into `transposed`, which the
// layer keeps for its backward, and returns w's operand in `arena`.
struct Fp8Transposed {
  Tensor values, scales;  // values [E, K, N]; scales [E, ceil(N/128), ceil(K/128)], w's
  Fp8Operand operand() const { return {values, scales.transpose(1, 2)}; }
};

Fp8Transposed fp8_transposed_for(const Tensor& w, Arena& arena) {
  return {arena.alloc({w.size(0), w.size(2), w.size(1)}, DType::f8e4m3),
          arena.alloc(fp8_blocks_scales_shape(w.shape()), DType::f32)};
}

Fp8Operand fp8_tiles(const Tensor& w, Fp8Transposed& transposed, Arena& arena) {
  Fp8Operand q{arena.alloc(w.shape(), DType::f8e4m3), transposed.scales};
  quantize_fp8_blocks(w, q.values, q.scales, &transposed.values);
  return q;
}

class MoeMlp final : public Mlp {
 public:
  explicit MoeMlp(const MlpSpec& s)
      : spec_{router_score(s.config->moe_router), s.config->moe_top_k, s.config->moe_normalize,
              s.config->moe_routed_scaling},
        experts_(s.config->moe_experts),
        hidden_(s.hidden),
        dim_(s.dim),
        name_(s.name),
        bias_rate_(s.config->moe_bias_update_rate),
        loss_{s.config->moe_balance_loss_weight, s.config->moe_z_loss_weight},
        fp8_(s.config->expert_recipe == kFp8BlockHpWgradRecipe) {
    const ModelConfig& c = *s.config;
    AMBER_CHECK(experts_ > 0 && hidden_ > 0, s.name, ": an MoE layer needs model.moe_experts and model.moe_hidden");
    router_ = s.store->add(s.name + ".router.weight", {experts_, dim_}, ParamRole::router,
                           ParamInit::normal(c.projection_init_std(dim_, false)));
    gate_up_ = s.store->add(s.name + ".experts.gate_up_proj", {experts_, 2 * hidden_, dim_}, ParamRole::expert_matrix,
                            ParamInit::normal(c.projection_init_std(dim_, false)));
    down_ = s.store->add(s.name + ".experts.down_proj", {experts_, dim_, hidden_}, ParamRole::expert_matrix,
                         ParamInit::normal(c.projection_init_std(hidden_, true)));
    for (Param* p : {router_.get(), gate_up_.get(), down_.get()}) p->product_gradient = true;
    const Device device = s.store->placement().device;
    // The weight gradients' squares come from their products (ops/grouped_gemm.h): the
    // step's norm then reads 4 bytes a parameter less (1.3 ms of Kohaku-MoE-1B's step
    // on an H100 went to reading every gradient).
    gate_up_->grad_squares =
        Tensor::zeros(grouped_weight_squares_shape({experts_, 2 * hidden_, dim_}), DType::f64, device);
    down_->grad_squares = Tensor::zeros(grouped_weight_squares_shape({experts_, dim_, hidden_}), DType::f64, device);
    load_ = Tensor::zeros({experts_}, DType::f64, device);
    stats_ = Tensor::zeros({kRoutingStatValues}, DType::f64, device);  // until the model gives its slots
    if (bias_rate_ > 0) bias_ = Tensor::zeros({experts_}, DType::f32, device);
    if (c.moe_shared_experts > 0)
      shared_ = mlp_registry().build(
          "swiglu", {s.name + ".shared_experts", s.dim, c.moe_shared_experts * s.hidden, false, s.config, s.store});
  }

  std::unique_ptr<Mlp::Saved> new_saved() const override {
    auto s = std::make_unique<Saved>();
    if (shared_) s->shared = shared_->new_saved();
    return s;
  }

  // What the backward needs is allocated first: the gathered rows (the gate/up weight
  // gradient's operand: gathering them again took 1.7 ms of Kohaku-MoE-1B's 78.6 ms
  // step on an H100, and model.recompute = block frees them anyway), the gate/up
  // product and, with FP8 experts, both weights' transposed codes (quantizing them again
  // in the backward cost more than keeping them). The activation and the down product's
  // rows come after a mark and are rewound at the end: the backward recomputes the
  // activation from gate_up.
  Tensor forward(const Tensor& h, Mlp::Saved& saved, Arena& arena, const ResidualAdd& into) const override {
    auto& s = static_cast<Saved&>(saved);
    const int64_t tokens = h.size(0), k = spec_.top_k, copies = tokens * k;
    const DType dt = h.dtype(), rt = router_dtype(dt);
    s.h = h;
    s.scores = arena.alloc({tokens, experts_}, rt);
    s.experts = arena.alloc({tokens, k}, DType::i32);
    s.weights = arena.alloc({tokens, k}, rt);
    s.offsets = arena.alloc({experts_ + 1}, DType::i32);
    s.slot_rows = arena.alloc({tokens, k}, DType::i32);
    s.row_tokens = arena.alloc({copies}, DType::i32);
    s.row_weights = arena.alloc({copies}, rt);
    s.xs = arena.alloc({copies, dim_}, dt);
    s.gate_up = arena.alloc({copies, 2 * hidden_}, dt);
    // The auxiliary losses read the logits in the backward; without them they are a
    // temporary.
    if (has_router_loss()) {
      s.logits = arena.alloc({tokens, experts_}, rt);
      s.cu_seqlens = objective_.cu_seqlens;
    }
    if (fp8_) {
      s.gate_up_t = fp8_transposed_for(gate_up_->work, arena);
      s.down_t = fp8_transposed_for(down_->work, arena);
    }
    // The routed experts' sum is added onto the shared experts' output where there is
    // one; with a residual add of scale 1 the shared experts' down product has already
    // added their output to the residual, so the sum lands in the stream directly.
    const bool shared_adds_residual = shared_ && into.sum && into.scale == 1.0;
    Tensor out =
        shared_ ? shared_->forward(h, *s.shared, arena, shared_adds_residual ? into : ResidualAdd{}) : Tensor();
    if (!out.defined() && !into.sum) out = arena.alloc({tokens, dim_}, dt);
    const Arena::Mark temporaries = arena.mark();
    if (!out.defined()) out = arena.alloc({tokens, dim_}, dt);
    Tensor logits = has_router_loss() ? s.logits : arena.alloc({tokens, experts_}, rt);
    gemm(h, false, router_->work, true, logits);
    moe_route_forward(spec_, logits, bias_, s.scores, s.experts, s.weights);
    moe_permute(s.experts, experts_, s.offsets, s.slot_rows, s.row_tokens);
    moe_weights_to_rows(s.weights, s.slot_rows, s.row_weights);
    const Fp8Operand x = gather_rows(h, s.row_tokens, s.xs, fp8_, arena);
    Tensor act = arena.alloc({copies, hidden_}, dt);
    if (fp8_) {
      const Fp8Operand w = fp8_tiles(gate_up_->work, s.gate_up_t, arena);
      grouped_gemm_swiglu_forward_fp8(x.values, x.scales, w.values, w.scales, s.offsets, s.gate_up, act);
    } else {
      grouped_gemm_swiglu_forward(s.xs, gate_up_->work, s.offsets, s.gate_up, act);
    }
    Tensor ys = arena.alloc({copies, dim_}, dt);
    if (fp8_) {
      const Fp8Operand a = fp8_rows(act, arena), w = fp8_tiles(down_->work, s.down_t, arena);
      grouped_gemm_forward_fp8(a.values, a.scales, w.values, w.scales, s.offsets, ys, s.row_weights);
    } else {
      grouped_gemm_forward(act, down_->work, s.offsets, ys, s.row_weights);
    }
    moe_combine(ys, s.slot_rows, out, shared_ != nullptr);
    if (into.sum && !shared_adds_residual)
      add_scaled_into(*into.sum, *into.residual, out, into.scale, "moe_residual_add");
    arena.rewind(temporaries);
    return into.sum ? *into.sum : out;
  }

  void set_router_objective(const RouterObjective& objective) override { objective_ = objective; }

  void buffers(std::vector<std::pair<std::string, Tensor>>& out) const override {
    if (bias_.defined()) out.emplace_back(name_ + ".router.balance_bias", bias_);
  }

  // Device work only (it runs inside the step's CUDA graph): the step's statistics, the
  // bias's move, the load's restart.
  void after_optimizer_step(const Tensor& apply) override {
    Tensor bias = bias_;
    moe_end_step(bias, load_, bias_rate_, apply, stats_);
  }

  std::string routing_layer() const override { return name_; }
  Tensor routing_load() const override { return load_; }
  void set_routing_stats(const Tensor& values) override { stats_ = values; }

  Tensor backward(const Tensor& dout, const Mlp::Saved& saved, Arena& arena) const override {
    const auto& s = static_cast<const Saved&>(saved);
    const int64_t tokens = dout.size(0), k = spec_.top_k, copies = tokens * k;
    const DType dt = dout.dtype(), rt = s.scores.dtype();
    // Counted here, not in the forward: only training runs a backward.
    moe_add_load(s.offsets, load_);
    // Down projection: da = dout W_down (unweighted); the SwiGLU's backward takes the
    // gate weights in and gives their gradients and the weighted activation, the down
    // weight's gradient comes from that.
    Tensor douts = arena.alloc({copies, dim_}, dt), da = arena.alloc({copies, hidden_}, dt);
    Tensor dgate_up = arena.alloc(s.gate_up.shape(), dt), act_w = arena.alloc({copies, hidden_}, dt);
    Tensor dweights = arena.alloc({tokens, k}, rt);
    const Arena::Mark dout_codes = arena.mark();
    const Fp8Operand d = gather_rows(dout, s.row_tokens, douts, fp8_, arena);
    Fp8Operand g;
    if (fp8_) {
      const Fp8Operand w = s.down_t.operand();
      grouped_gemm_forward_fp8(d.values, d.scales, w.values, w.scales, s.offsets, da);
      arena.rewind(dout_codes);
      // dgate_up's row codes (the input gradient's operand) from the SwiGLU's pass.
      g = fp8_rows_for(dgate_up.shape(), arena);
      moe_swiglu_backward_fp8_rows(da, s.gate_up, s.row_weights, s.slot_rows, dgate_up, act_w, dweights, g.values,
                                   g.scales);
    } else {
      moe_down_backward_swiglu(douts, down_->work, s.offsets, s.gate_up, s.row_weights, s.slot_rows, da, dgate_up,
                               act_w, dweights);
    }
    grouped_gemm_backward_weight(douts, act_w, s.offsets, down_->grad, down_->grad_accumulates(),
                                 down_->grad_squares_for_product());
    // Gate/up projection; the input's gradient reuses the output gradient's rows.
    grouped_gemm_backward_weight(dgate_up, s.xs, s.offsets, gate_up_->grad, gate_up_->grad_accumulates(),
                                 gate_up_->grad_squares_for_product());
    Tensor dxs = douts;
    if (fp8_) {
      const Fp8Operand w = s.gate_up_t.operand();
      grouped_gemm_forward_fp8(g.values, g.scales, w.values, w.scales, s.offsets, dxs);
      arena.rewind(dout_codes);
    } else {
      grouped_gemm_backward_input(dgate_up, gate_up_->work, s.offsets, dxs);
    }
    Tensor dh = shared_ ? shared_->backward(dout, *s.shared, arena) : arena.alloc({tokens, dim_}, dt);
    moe_combine(dxs, s.slot_rows, dh, shared_ != nullptr);
    // Router: through the weights into the logits, then into h and the router weight.
    Tensor dlogits = arena.alloc({tokens, experts_}, rt);
    moe_route_backward(spec_, dweights, s.scores, s.experts, dlogits);
    if (has_router_loss()) {
      AMBER_CHECK(objective_.sum.defined() && s.cu_seqlens.defined(), name_,
                  ": the router's auxiliary losses need the training micro-batch's objective "
                  "(LanguageModel::forward_backward sets it)");
      Tensor sum = objective_.sum;
      moe_router_loss(spec_, loss_, s.logits, s.scores, s.experts, s.cu_seqlens, objective_.loss_scale, dlogits, sum);
    }
    const double keep = router_->grad_accumulates() ? 1.0 : 0.0;
    if (dlogits.dtype() == dt) {
      gemm(dlogits, false, router_->work, false, dh, 1.0, 1.0);
      gemm(dlogits, true, s.h, false, router_->grad, 1.0, keep);
      return dh;
    }
    // In a 16-bit compute dtype the logits' gradient goes in as two 16-bit terms (ops/
    // moe.h), so the router's gradient is as precise as from an fp32 product of h's fp32
    // copy, which took 1.0 ms of Kohaku-MoE-1B's step on an H100, the copies besides.
    Tensor pair = arena.alloc({2 * experts_, tokens}, dt);
    moe_router_grad_pair(dlogits, pair);
    const Tensor high = pair.slice(0, 0, experts_), low = pair.slice(0, experts_, 2 * experts_);
    gemm(high, true, router_->work, false, dh, 1.0, 1.0);
    gemm(high, false, s.h, false, router_->grad, 1.0, keep);
    gemm(low, false, s.h, false, router_->grad, 1.0, 1.0);
    return dh;
  }

 private:
  struct Saved final : Mlp::Saved {
    Tensor h, scores, experts, weights, offsets, slot_rows, row_tokens, row_weights, xs, gate_up;
    Tensor logits, cu_seqlens;        // with auxiliary losses
    Fp8Transposed gate_up_t, down_t;  // FP8 experts: the weights' input-gradient operands
    std::unique_ptr<Mlp::Saved> shared;
  };
  // The router's math runs in fp32 (f64 in gradient checks).
  static DType router_dtype(DType compute) { return compute == DType::f64 ? DType::f64 : DType::f32; }
  bool has_router_loss() const { return loss_.balance_weight > 0 || loss_.z_weight > 0; }

  RouterSpec spec_;
  int64_t experts_, hidden_, dim_;
  std::string name_;
  double bias_rate_;
  RouterLossSpec loss_;
  bool fp8_;  // model.expert_recipe = fp8_block_hp_wgrad
  RouterObjective objective_;  // the current training micro-batch's
  // The auxiliary-loss-free balance bias (with model.moe_bias_update_rate): chooses
  // experts, never weights them; and this step's rows per expert, which the backward
  // (const to the layer's parameters) adds to.
  Tensor bias_;
  mutable Tensor load_;
  Tensor stats_;  // moe_end_step's, in the model's routing values
  std::shared_ptr<Param> router_, gate_up_, down_;
  std::unique_ptr<Mlp> shared_;
};

}  // namespace

std::unique_ptr<Mlp> make_moe_mlp(const MlpSpec& spec) { return std::make_unique<MoeMlp>(spec); }

}  // namespace amber
