#include "amber/train/optimizer.h"

#include <cmath>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "amber/ops/elementwise.h"
#include "amber/ops/optim.h"

namespace amber {
namespace {

bool is_embedding(const Param& p) { return p.name.rfind("embed_tokens", 0) == 0; }

struct AdamWSlot {
  Param* param;
  double lr, weight_decay;
  Tensor m, v;
};

struct MuonSlot {
  Param* param;
  double scale;  // update scale from the matrix shape
  Tensor momentum;
  Tensor update;  // its matrix of the group's batch
};

// Muon's matrices of one shape and working dtype: their updates lie in one batch
// [n, rows, cols], orthogonalised together (batched products: on a GPU one cuBLASLt call
// for all n matrices where one call each would leave most of the card idle).
struct MuonGroup {
  Tensor updates;
  DType compute;  // the parameters' working dtype, which Newton-Schulz runs in
};

class GroupedOptimizer final : public Optimizer {
 public:
  GroupedOptimizer(const OptimizerConfig& c, const std::vector<std::shared_ptr<Param>>& params)
      : config_(c), variant_(newton_schulz_from_name(c.ns_variant)) {
    AMBER_CHECK(c.name == "adamw" || c.name == "muon", "unknown optimizer '", c.name,
                "'; valid: adamw, muon");
    AMBER_CHECK(c.update_scale == "spectral" || c.update_scale == "rms", "optimizer.update_scale '",
                c.update_scale, "' is not one of: spectral, rms");
    AMBER_CHECK(c.lr > 0 && c.muon_lr > 0 && c.embed_lr >= 0, "learning rates must be positive");
    const bool muon = c.name == "muon";
    AMBER_CHECK(!params.empty(), "the optimizer needs at least one parameter");
    schedule_ = Tensor::empty({kScheduleSize}, DType::f64, params.front()->value.device());
    set_steps(0);
    for (const auto& p : params) {
      if (muon && p->muon) {
        const double out = static_cast<double>(p->value.size(0)), in = static_cast<double>(p->value.size(1));
        const double scale = c.update_scale == "spectral" ? std::max(1.0, std::sqrt(out / in))
                                                          : c.rms_target * std::sqrt(std::max(out, in));
        muon_.push_back({p.get(), scale, Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()),
                         Tensor()});
        continue;
      }
      const bool embedding = is_embedding(*p);
      const double lr = embedding && c.embed_lr > 0 ? c.embed_lr : c.lr;
      const bool decay = p->weight_decay || (embedding && c.decay_embeddings);
      adamw_.push_back({p.get(), lr, decay ? c.weight_decay : 0.0, Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()),
                        Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device())});
    }
    group_muon_updates();
  }

  void step(const Tensor& gate) override {
    advance_schedule(schedule_, gate, config_.beta1, config_.beta2);
    std::vector<AdamWOperands> operands;
    operands.reserve(adamw_.size());
    for (AdamWSlot& s : adamw_)
      operands.push_back({&s.param->value, &s.param->grad, &s.m, &s.v, &s.param->work,
                          AdamWHyper{s.lr, config_.beta1, config_.beta2, config_.eps, s.weight_decay}});
    adamw_steps(operands, schedule_);
    // Decay is rescaled so that muon_lr * decay equals lr * weight_decay per step.
    const double decay = config_.weight_decay * config_.lr / config_.muon_lr;
    std::vector<MuonOperands> muon;
    muon.reserve(muon_.size());
    for (MuonSlot& s : muon_)
      muon.push_back({&s.param->value, &s.param->grad, &s.momentum, &s.update, &s.param->work,
                      config_.muon_lr * decay, config_.muon_lr * s.scale});
    // momentum = mu * momentum + g; Nesterov looks ahead: g + mu * momentum, one more
    // momentum step from the new momentum. g is the gradient times the step's clip
    // factor, which only the momentum steps apply.
    muon_momentum_steps(muon, config_.muon_momentum, config_.nesterov, schedule_);
    for (MuonGroup& g : muon_groups_) newton_schulz_orthogonalize(g.updates, variant_, g.compute);
    muon_apply_steps(muon, schedule_);
  }

  int64_t steps() const override { return static_cast<int64_t>(schedule_.to_doubles()[kScheduleSteps]); }

  void set_steps(int64_t steps) override {
    std::vector<double> values(kScheduleSize, 1.0);
    values[kScheduleSteps] = static_cast<double>(steps);
    schedule_.copy_from(Tensor::from_vector(values, {kScheduleSize}));
  }

  std::vector<StateTensor> state() override {
    std::vector<StateTensor> out;
    for (AdamWSlot& s : adamw_) {
      out.push_back({s.param->name + ".exp_avg", &s.m});
      out.push_back({s.param->name + ".exp_avg_sq", &s.v});
    }
    for (MuonSlot& s : muon_) out.push_back({s.param->name + ".momentum", &s.momentum});
    return out;
  }

  std::string describe() const override {
    // Groups keyed by (method, lr, decay), in first-seen order.
    std::map<std::tuple<std::string, double, double>, std::pair<int64_t, int>> groups;
    for (const AdamWSlot& s : adamw_) {
      auto& g = groups[{"adamw", s.lr, s.weight_decay}];
      g.first += s.param->value.numel();
      ++g.second;
    }
    for (const MuonSlot& s : muon_) {
      auto& g = groups[{"muon", config_.muon_lr, config_.weight_decay * config_.lr / config_.muon_lr}];
      g.first += s.param->value.numel();
      ++g.second;
    }
    std::ostringstream out;
    for (const auto& [key, value] : groups)
      out << "  " << std::get<0>(key) << ": " << value.second << " tensors, " << value.first / 1e6
          << "M params, lr " << std::get<1>(key) << ", weight decay " << std::get<2>(key) << "\n";
    return out.str();
  }

 private:
  // Gives every Muon matrix its place in the batch of its shape and working dtype.
  void group_muon_updates() {
    std::map<std::pair<std::vector<int64_t>, DType>, std::vector<MuonSlot*>> by_shape;
    std::vector<std::vector<MuonSlot*>*> order;  // groups in first-seen order
    for (MuonSlot& s : muon_) {
      const Tensor& v = s.param->value;
      auto [it, fresh] = by_shape.try_emplace({{v.size(0), v.size(1)}, s.param->work.dtype()});
      if (fresh) order.push_back(&it->second);
      it->second.push_back(&s);
    }
    for (std::vector<MuonSlot*>* slots : order) {
      const Tensor& v = slots->front()->param->value;
      MuonGroup g{Tensor::empty({static_cast<int64_t>(slots->size()), v.size(0), v.size(1)}, v.dtype(), v.device()),
                  slots->front()->param->work.dtype()};
      for (size_t i = 0; i < slots->size(); ++i) (*slots)[i]->update = g.updates.select(0, static_cast<int64_t>(i));
      muon_groups_.push_back(std::move(g));
    }
  }

  OptimizerConfig config_;
  NewtonSchulz variant_;
  std::vector<AdamWSlot> adamw_;
  std::vector<MuonSlot> muon_;
  std::vector<MuonGroup> muon_groups_;
  Tensor schedule_;  // f64 [kScheduleSize] on the parameters' device (ops/optim.h)
};

}  // namespace

Tensor always_apply(double lr_multiplier, Device device) {
  return Tensor::from_vector(std::vector<double>{1.0, lr_multiplier, 1.0}, {3}).to(device);
}

std::unique_ptr<Optimizer> build_optimizer(const OptimizerConfig& config,
                                           const std::vector<std::shared_ptr<Param>>& params) {
  return std::make_unique<GroupedOptimizer>(config, params);
}

}  // namespace amber
