// Linear and GluLinear: the model's projections. Each owns its weight and optional
// bias (declared in the model's ParamStore), the gradient bookkeeping of its products,
// the residual add its forward product can do as it writes, and its recipe: how those
// products run. A recipe is chosen by name from linear_recipe_registry() when the
// model is built, so a new numeric format (block-scaled FP8) or a sharded projection
// is a new recipe, not an edit in every module that projects.
#pragma once

#include <memory>
#include <string>

#include "amber/core/arena.h"
#include "amber/model/param_store.h"
#include "amber/model/registry.h"
#include "amber/ops/glu_linear.h"
#include "amber/ops/norm.h"

namespace amber {

// A gated MLP's forward values its backward reads: the input x [N, in], gate_up [N, 2H]
// and h = glu(gate_up) [N, H].
struct GluSaved {
  const Tensor &x, &gate_up, &h;
};

// A gated MLP's parameters: gate_up [2H, in] (the gate's rows, then the value's) and
// down [out, H], each with an optional bias.
struct GluParams {
  Param &gate_up;
  Param* gate_up_bias;
  Param &down;
  Param* down_bias;
};

// How a projection's products run; one instance per projection (a recipe may keep
// per-weight state, such as scales). Weights are [out, in], y = x W^T + b. `scratch`
// holds a call's temporaries (quantized operands): a recipe allocates them after a mark
// and rewinds to it before it returns.
class LinearRecipe {
 public:
  virtual ~LinearRecipe() = default;
  // y = x W^T + b; with `into`: *into.sum = *into.residual + into.scale (x W^T + b).
  virtual void forward(const Tensor& x, const Param& w, const Param* b, Tensor& y, const ResidualAdd& into,
                       Arena& scratch) const = 0;
  // dx = dy W (skipped when dx is undefined); W's gradient gets dy^T x (added, or
  // overwriting a stale gradient: Param::grad_accumulates); b's gradient += column sums.
  virtual void backward(const Tensor& dy, const Tensor& x, Param& w, Param* b, Tensor& dx, Arena& scratch) const = 0;
  // gate_up = x W^T + b and h = glu(gate_up) (ops/glu_linear.h).
  virtual void glu_forward(Glu glu, const Tensor& x, const Param& w, const Param* b, Tensor& gate_up, Tensor& h,
                           Arena& scratch) const = 0;
  // A gated MLP's backward from dy = d(loss)/d(down's output): w_down's (and b_down's)
  // gradient from dy and h = glu(gate_up), dgate_up = the GLU's backward at gate_up of
  // dy w_down, then w_gate_up's (and b_gate_up's) gradient from dgate_up and x, and dx
  // = dgate_up w_gate_up (skipped when undefined), gradients written as backward()
  // writes them. dgate_up and dh are the recipe's temporaries, so a recipe may produce
  // dgate_up in the form its products read (FP8 codes) and never write it whole.
  virtual void glu_backward(Glu glu, const Tensor& dy, const GluSaved& saved, const GluParams& params, Tensor& dx,
                            Arena& scratch) const = 0;
};

// The recipes: operands in the model's compute dtype (the working copies: f32, bf16 or
// f16) with f32 accumulation; or block-scaled FP8, with the weight gradient in FP8 or in
// the compute dtype (model/fp8_linear.h).
inline constexpr const char* kComputeDtypeRecipe = "compute_dtype";
inline constexpr const char* kFp8BlockRecipe = "fp8_block";
inline constexpr const char* kFp8BlockHpWgradRecipe = "fp8_block_hp_wgrad";
const Registry<LinearRecipe>& linear_recipe_registry();

struct LinearSpec {
  std::string name;  // parameter prefix, e.g. "layers.3.mlp.down_proj"
  int64_t in = 0, out = 0;
  bool bias = false;
  ParamRole role = ParamRole::hidden_matrix;
  double init_std = 0;  // the weight's normal(0, std); a bias starts at zero
  std::string recipe = kComputeDtypeRecipe;
};

class Linear {
 public:
  // Declares `<name>.weight` [out, in] (and `<name>.bias` [out]) in the store. Every
  // backward writes the weight's whole gradient with one product (Param::product_gradient).
  Linear(ParamStore& store, const LinearSpec& spec);
  // Over parameters declared elsewhere (a stack's whole, an embedding the head is tied
  // to); their gradient bookkeeping is their declarer's.
  Linear(std::shared_ptr<Param> weight, std::shared_ptr<Param> bias, const std::string& recipe);

  // The weight: its gradient is written through a const Linear, as by its backward.
  Param& weight() const { return *weight_; }
  int64_t out_features() const { return weight_->work.size(0); }

  // y [N, out] from `arena`; with `into`, *into.sum (written by the product) instead.
  Tensor forward(const Tensor& x, Arena& arena, const ResidualAdd& into = {}) const;
  // The same into a caller's y [N, out] (the recipe's temporaries from `scratch`).
  void forward_into(const Tensor& x, Tensor& y, Arena& scratch) const;
  // Accumulates the weight's (and bias's) gradient; returns dx from `arena`.
  Tensor backward(const Tensor& dy, const Tensor& x, Arena& arena) const;
  // The same into a caller's dx (a view, or undefined to skip the input gradient).
  void backward_into(const Tensor& dy, const Tensor& x, Tensor& dx, Arena& scratch) const;

 private:
  friend class GluLinear;
  std::shared_ptr<Param> weight_, bias_;
  std::unique_ptr<LinearRecipe> recipe_;
};

// A gated MLP's first projection [2H, in] (gate rows, then value rows) with its GLU:
// the forward writes gate_up and h = glu(gate_up) in one call, and the backward runs
// from the down projection's output gradient to x's (the recipe's glu_backward).
class GluLinear {
 public:
  GluLinear(ParamStore& store, const LinearSpec& spec, Glu glu);

  Param& weight() const { return linear_.weight(); }
  int64_t out_features() const { return linear_.out_features(); }
  // gate_up [N, 2H] and h [N, H], both the caller's (the recipe's temporaries from `scratch`).
  void forward(const Tensor& x, Tensor& gate_up, Tensor& h, Arena& scratch) const;
  // From dy = d(loss)/d(down's output): both projections' gradients (accumulated as
  // their backward() does) and dx from `arena`, by this projection's recipe.
  Tensor backward(const Linear& down, const Tensor& dy, const GluSaved& saved, Arena& arena) const;

 private:
  Linear linear_;
  Glu glu_;
};

}  // namespace amber
