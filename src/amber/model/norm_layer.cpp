#include "amber/model/norm_layer.h"

#include "amber/ops/norm.h"

namespace amber {
namespace {

Shape rows_shape(const Tensor& x) { return Shape{x.numel() / x.size(-1)}; }

class RmsNorm final : public Norm {
 public:
  explicit RmsNorm(const NormSpec& s) : eps_(s.eps) {
    if (s.affine) {
      weight_ = make_param(s.name + ".weight", {s.dim}, s.placement);
      weight_->value.fill(1.0);
      weight_->refresh_work();
    }
  }
  void collect(std::vector<std::shared_ptr<Param>>& out) const override {
    if (weight_) out.push_back(weight_);
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
    Tensor dw = weight_ ? weight_->grad : Tensor();
    rmsnorm_backward(dy, s.x, weight(), s.rstd, dx, dw, accumulate);
  }

  Tensor weight() const { return weight_ ? weight_->work : Tensor(); }
  double eps_;
  std::shared_ptr<Param> weight_;
};

class LayerNorm final : public Norm {
 public:
  explicit LayerNorm(const NormSpec& s) : eps_(s.eps) {
    if (s.affine) {
      weight_ = make_param(s.name + ".weight", {s.dim}, s.placement);
      weight_->value.fill(1.0);
      weight_->refresh_work();
      bias_ = make_param(s.name + ".bias", {s.dim}, s.placement);
    }
  }
  void collect(std::vector<std::shared_ptr<Param>>& out) const override {
    if (weight_) {
      out.push_back(weight_);
      out.push_back(bias_);
    }
  }
  using Norm::forward;
  Tensor forward(const Tensor& x, Saved& s, Arena& arena, const ResidualAdd& add) const override {
    Tensor y = arena.alloc(x.shape(), x.dtype());
    s.x = add.residual ? *add.sum : x;
    s.mean = arena.alloc(rows_shape(x), norm_stat_dtype(x.dtype()));
    s.rstd = arena.alloc(rows_shape(x), norm_stat_dtype(x.dtype()));
    layernorm_forward(x, weight_ ? weight_->work : Tensor(), bias_ ? bias_->work : Tensor(), eps_, y,
                      s.mean, s.rstd, add);
    return y;
  }

 private:
  void backward_into(const Tensor& dy, const Saved& s, Tensor& dx, bool accumulate) const override {
    Tensor dw = weight_ ? weight_->grad : Tensor(), db = bias_ ? bias_->grad : Tensor();
    layernorm_backward(dy, s.x, weight_ ? weight_->work : Tensor(), s.mean, s.rstd, dx, dw, db, accumulate);
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
