#include "amber/model/mlp.h"

#include <algorithm>
#include <optional>

#include "amber/model/linear.h"
#include "amber/model/moe.h"
#include "amber/ops/activation.h"

namespace amber {
namespace {

LinearSpec projection(const MlpSpec& s, const char* name, int64_t in, int64_t out, bool writes_residual) {
  return {s.name + "." + name, in, out, s.bias, ParamRole::hidden_matrix,
          s.config->projection_init_std(in, writes_residual), s.config->mlp_recipe};
}

// Gated: gate_up -> GLU (in the product's call) -> down.
class GatedMlp final : public Mlp {
 public:
  GatedMlp(const MlpSpec& s, Glu glu)
      : hidden_(s.hidden),
        gate_up_(*s.store, projection(s, "gate_up_proj", s.dim, 2 * int64_t{s.hidden}, false), glu),
        down_(*s.store, projection(s, "down_proj", s.hidden, s.dim, true)) {}

  std::unique_ptr<Mlp::Saved> new_saved() const override { return std::make_unique<Saved>(); }

  Tensor forward(const Tensor& h, Mlp::Saved& saved, Arena& arena, const ResidualAdd& into) const override {
    auto& s = static_cast<Saved&>(saved);
    const int64_t tokens = h.size(0);
    s.h = h;
    s.gate_up = arena.alloc({tokens, gate_up_.out_features()}, h.dtype());
    s.act = arena.alloc({tokens, hidden_}, h.dtype());
    gate_up_.forward(h, s.gate_up, s.act, arena);
    return down_.forward(s.act, arena, into);
  }

  Tensor backward(const Tensor& dout, const Mlp::Saved& saved, Arena& arena) const override {
    const auto& s = static_cast<const Saved&>(saved);
    return gate_up_.backward(down_, dout, {s.h, s.gate_up, s.act}, arena);
  }

 private:
  struct Saved final : Mlp::Saved {
    Tensor h, gate_up, act;  // input, first projection, activation output
  };
  int64_t hidden_;
  GluLinear gate_up_;
  Linear down_;
};

// Plain: up -> GELU -> down.
class GeluMlp final : public Mlp {
 public:
  explicit GeluMlp(const MlpSpec& s)
      : up_(*s.store, projection(s, "up_proj", s.dim, s.hidden, false)),
        down_(*s.store, projection(s, "down_proj", s.hidden, s.dim, true)) {}

  std::unique_ptr<Mlp::Saved> new_saved() const override { return std::make_unique<Saved>(); }

  Tensor forward(const Tensor& h, Mlp::Saved& saved, Arena& arena, const ResidualAdd& into) const override {
    auto& s = static_cast<Saved&>(saved);
    s.h = h;
    s.up = up_.forward(h, arena);
    s.act = arena.alloc(s.up.shape(), h.dtype());
    gelu_forward(s.up, s.act);
    return down_.forward(s.act, arena, into);
  }

  Tensor backward(const Tensor& dout, const Mlp::Saved& saved, Arena& arena) const override {
    const auto& s = static_cast<const Saved&>(saved);
    Tensor dact = down_.backward(dout, s.act, arena);
    Tensor dup = arena.alloc(s.up.shape(), dout.dtype());
    gelu_backward(dact, s.up, dup);
    return up_.backward(dup, s.h, arena);
  }

 private:
  struct Saved final : Mlp::Saved {
    Tensor h, up, act;  // input, first projection, activation output
  };
  Linear up_, down_;
};

}  // namespace

RoutingSummary summarize_routing(const std::vector<RoutingStats>& layers) {
  RoutingSummary s;
  for (const RoutingStats& r : layers) {
    if (r.max_over_mean > s.worst_max_over_mean || s.worst_layer.empty()) {
      s.worst_max_over_mean = r.max_over_mean;
      s.worst_layer = r.layer;
    }
    s.mean_max_over_mean += r.max_over_mean / static_cast<double>(layers.size());
    s.dead_experts += r.dead_experts;
    s.bias_spread = std::max(s.bias_spread, r.bias_spread);
  }
  return s;
}

const Registry<Mlp, const MlpSpec&>& mlp_registry() {
  static const auto registry = [] {
    Registry<Mlp, const MlpSpec&> r("mlp");
    r.add("swiglu", [](const MlpSpec& s) { return std::make_unique<GatedMlp>(s, Glu::swiglu); });
    r.add("geglu", [](const MlpSpec& s) { return std::make_unique<GatedMlp>(s, Glu::geglu); });
    r.add("gelu", [](const MlpSpec& s) { return std::make_unique<GeluMlp>(s); });
    r.add("moe", make_moe_mlp);
    return r;
  }();
  return registry;
}

}  // namespace amber
