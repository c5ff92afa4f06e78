#include "amber/model/norm_layer.h"

#include "amber/ops/norm.h"

namespace amber {
namespace {

Shape rows_shape(const Tensor& x) { return Shape{x.numel() / x.size(-1)}; }

std::shared_ptr<Param> gain(const NormSpec& s) {
  return s.store->add(s.name + ".weight", {s.dim}, ParamRole::vector, ParamInit::ones());
}

class RmsNorm final : public Norm {
 public:
  explicit RmsNorm(const NormSpec& s) : eps_(s.eps) {
    if (s.affine) weight_ = gain(s);
  }
  std::optional<RmsParts> rms_parts() const override { return RmsParts{weight_, eps_}; }
  using Norm::forward;
  Tensor forward(const Tensor& x, Saved& s, Arena& arena, const ResidualAdd& add) const override {
    Tensor y = arena.alloc(x.shape(), x.dtype());
    s.x = add.residual ? *add.sum : x;
    s.rstd = arena.alloc(rows_shape(x), norm_stat_dtype(x.dtype()));
    rmsnorm_forward(x, weight(), eps_, y, s.rstd, add);
    return y;
  }

 private:
  void backward_into(const Tensor& dy, const Saved& s, Tensor& dx, bool accumulate) const override {
    Tensor dw = grad_of(weight_);
    rmsnorm_backward(dy, s.x, weight(), s.rstd, dx, dw, accumulate);
  }

  Tensor weight() const { return work_of(weight_); }
  double eps_;
  std::shared_ptr<Param> weight_;
};

class LayerNorm final : public Norm {
 public:
  explicit LayerNorm(const NormSpec& s) : eps_(s.eps) {
    if (s.affine) {
      weight_ = gain(s);
      bias_ = s.store->add(s.name + ".bias", {s.dim}, ParamRole::vector, ParamInit::zeros());
    }
  }
  using Norm::forward;
  Tensor forward(const Tensor& x, Saved& s, Arena& arena, const ResidualAdd& add) const override {
    Tensor y = arena.alloc(x.shape(), x.dtype());
    s.x = add.residual ? *add.sum : x;
    s.mean = arena.alloc(rows_shape(x), norm_stat_dtype(x.dtype()));
    s.rstd = arena.alloc(rows_shape(x), norm_stat_dtype(x.dtype()));
    layernorm_forward(x, work_of(weight_), work_of(bias_), eps_, y,
                      s.mean, s.rstd, add);
    return y;
  }

 private:
  void backward_into(const Tensor& dy, const Saved& s, Tensor& dx, bool accumulate) const override {
    Tensor dw = grad_of(weight_), db = grad_of(bias_);
    layernorm_backward(dy, s.x, work_of(weight_), s.mean, s.rstd, dx, dw, db, accumulate);
  }

  double eps_;
  std::shared_ptr<Param> weight_, bias_;
};

}  // namespace

Tensor Norm::backward(const Tensor& dy, const Saved& saved, Arena& arena) const {
  Tensor dx = arena.alloc(dy.shape(), dy.dtype());
  backward_to(dy, saved, dx);
  return dx;
}

const Registry<Norm, const NormSpec&>& norm_registry() {
  static const auto registry = [] {
    Registry<Norm, const NormSpec&> r("norm");
    r.add("rmsnorm", [](const NormSpec& s) { return std::make_unique<RmsNorm>(s); });
    r.add("layernorm", [](const NormSpec& s) { return std::make_unique<LayerNorm>(s); });
    return r;
  }();
  return registry;
}

}  // namespace amber
