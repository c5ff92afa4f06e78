#include "amber/model/mlp.h"

#include <optional>

#include "amber/ops/activation.h"
#include "amber/ops/gemm.h"
#include "amber/ops/glu_linear.h"

namespace amber {
namespace {

// up (width `up_width`) -> activation (width `hidden`) -> down. A gated activation
// (glu) takes the up projection's two halves and runs with the products beside it
// (ops/glu_linear.h); without one the activation is plain GELU.
class TwoLayerMlp final : public Mlp {
 public:
  TwoLayerMlp(const MlpSpec& s, const char* up_name, std::optional<Glu> glu)
      : hidden_(s.hidden), glu_(glu) {
    const int64_t up_width = glu ? 2 * int64_t{s.hidden} : int64_t{s.hidden};
    up_ = make_param(s.name + "." + up_name + ".weight", {up_width, s.dim}, s.placement);
    down_ = make_param(s.name + ".down_proj.weight", {s.dim, s.hidden}, s.placement);
    up_->product_gradient = down_->product_gradient = true;
    if (s.bias) {
      up_bias_ = make_param(s.name + "." + up_name + ".bias", {up_width}, s.placement);
      down_bias_ = make_param(s.name + ".down_proj.bias", {s.dim}, s.placement);
    }
  }

  void collect(std::vector<std::shared_ptr<Param>>& out) const override {
    for (const auto& p : {up_, up_bias_, down_, down_bias_})
      if (p) out.push_back(p);
  }

  Tensor forward(const Tensor& h, Saved& s, Arena& arena, const ResidualAdd& into) const override {
    const int64_t tokens = h.size(0);
    s.h = h;
    s.up = arena.alloc({tokens, up_->work.size(0)}, h.dtype());
    s.act = arena.alloc({tokens, hidden_}, h.dtype());
    if (glu_) {
      glu_linear_forward(*glu_, h, up_->work, bias(up_bias_), s.up, s.act);
    } else {
      linear_forward(h, up_->work, bias(up_bias_), s.up);
      gelu_forward(s.up, s.act);
    }
    if (into.residual) {
      linear_forward(s.act, down_->work, bias(down_bias_), *into.sum, *into.residual, into.scale);
      return *into.sum;
    }
    Tensor out = arena.alloc({tokens, down_->work.size(0)}, h.dtype());
    linear_forward(s.act, down_->work, bias(down_bias_), out);
    return out;
  }

  Tensor backward(const Tensor& dout, const Saved& s, Arena& arena) const override {
    Tensor dact = arena.alloc(s.act.shape(), dout.dtype());
    Tensor down_bias_grad = grad(down_bias_), up_bias_grad = grad(up_bias_);
    Tensor dup = arena.alloc(s.up.shape(), dout.dtype());
    if (glu_) {
      Tensor no_dx;  // the input gradient comes with the GLU's backward
      linear_backward(dout, s.act, down_->work, no_dx, down_->grad, down_bias_grad, down_->grad_accumulates());
      glu_linear_backward_input(*glu_, dout, down_->work, s.up, dup, dact);
    } else {
      linear_backward(dout, s.act, down_->work, dact, down_->grad, down_bias_grad, down_->grad_accumulates());
      gelu_backward(dact, s.up, dup);
    }
    Tensor dh = arena.alloc(s.h.shape(), dout.dtype());
    linear_backward(dup, s.h, up_->work, dh, up_->grad, up_bias_grad, up_->grad_accumulates());
    return dh;
  }

 private:
  static Tensor bias(const std::shared_ptr<Param>& p) { return p ? p->work : Tensor(); }
  static Tensor grad(const std::shared_ptr<Param>& p) { return p ? p->grad : Tensor(); }
  int64_t hidden_;
  std::optional<Glu> glu_;
  std::shared_ptr<Param> up_, up_bias_, down_, down_bias_;
};

}  // namespace

const Registry<Mlp, const MlpSpec&>& mlp_registry() {
  static const auto registry = [] {
    Registry<Mlp, const MlpSpec&> r("mlp");
    r.add("swiglu", [](const MlpSpec& s) { return std::make_unique<TwoLayerMlp>(s, "gate_up_proj", Glu::swiglu); });
    r.add("geglu", [](const MlpSpec& s) { return std::make_unique<TwoLayerMlp>(s, "gate_up_proj", Glu::geglu); });
    r.add("gelu", [](const MlpSpec& s) { return std::make_unique<TwoLayerMlp>(s, "up_proj", std::nullopt); });
    return r;
  }();
  return registry;
}

}  // namespace amber
