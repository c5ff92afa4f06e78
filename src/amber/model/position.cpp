#include "amber/model/position.h"

#include "amber/ops/rope.h"

namespace amber {
namespace {

class Rope final : public PositionEncoding {
 public:
  explicit Rope(const ModelConfig& c) : table_(config_of(c)) {}
  void forward(Tensor& q, Tensor& k, const Tensor& positions) const override {
    rope_forward(q, positions, table_, q);
    rope_forward(k, positions, table_, k);
  }
  void backward(Tensor& dq, Tensor& dk, const Tensor& positions) const override {
    rope_backward(dq, positions, table_, dq);
    rope_backward(dk, positions, table_, dk);
  }
  const RopeTable* rope_table() const override { return &table_; }

 private:
  static RopeConfig config_of(const ModelConfig& c) {
    RopeConfig r;
    r.head_dim = c.resolved_head_dim();
    r.theta = c.rope_theta;
    r.partial = c.rope_partial;
    r.scaling = rope_scaling_from_name(c.rope_scaling);
    r.factor = c.rope_factor;
    r.original_context = c.max_position;
    return r;
  }
  RopeTable table_;
};

class NoPositionEncoding final : public PositionEncoding {
 public:
  void forward(Tensor&, Tensor&, const Tensor&) const override {}
  void backward(Tensor&, Tensor&, const Tensor&) const override {}
};

}  // namespace

const Registry<PositionEncoding, const ModelConfig&>& position_registry() {
  static const auto registry = [] {
    Registry<PositionEncoding, const ModelConfig&> r("posenc");
    r.add("rope", [](const ModelConfig& c) { return std::make_unique<Rope>(c); });
    r.add("none", [](const ModelConfig&) { return std::make_unique<NoPositionEncoding>(); });
    return r;
  }();
  return registry;
}

}  // namespace amber
