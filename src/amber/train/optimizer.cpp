#include "amber/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "amber/ops/elementwise.h"
#include "amber/ops/optim.h"

namespace amber {
namespace {

double learning_rate(const Param& p, const OptimizerConfig& c) {
  return p.role == ParamRole::embedding && c.embed_lr > 0 ? c.embed_lr : c.lr;
}

double weight_decay(const Param& p, const OptimizerConfig& c) {
  switch (p.role) {
    case ParamRole::embedding: return c.decay_embeddings ? c.weight_decay : 0.0;
    case ParamRole::vector: return 0.0;
    default: return c.weight_decay;
  }
}

// One parameter's AdamW group and its state: views into its buffer's state.
struct AdamWSlot {
  Param* param;
  double lr, weight_decay;
  Tensor m, v;
};

// A flat run of one store buffer whose parameters share their hyperparameters, updated
// as one tensor (the alignment gaps inside it hold zeros, which stay zero).
struct AdamWRange {
  int64_t begin;  // in the buffer
  Tensor value, grad, m, v, work;
  AdamWHyper hyper;
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
  GroupedOptimizer(const OptimizerConfig& c, const ParamStore& store, const dist::StoreShard* shard)
      : config_(c), variant_(newton_schulz_from_name(c.ns_variant)) {
    AMBER_CHECK(c.name == "adamw" || c.name == "muon", "unknown optimizer '", c.name,
                "'; valid: adamw, muon");
    AMBER_CHECK(c.update_scale == "spectral" || c.update_scale == "rms", "optimizer.update_scale '",
                c.update_scale, "' is not one of: spectral, rms");
    AMBER_CHECK(c.lr > 0 && c.muon_lr > 0 && c.embed_lr >= 0, "learning rates must be positive");
    AMBER_CHECK(store.allocated() && !store.params().empty(), "the optimizer needs at least one parameter");
    schedule_ = Tensor::empty({kScheduleSize}, DType::f64, store.placement().device);
    set_steps(0);
    describe_groups(store);
    for (size_t i = 0; i < store.buffers().size(); ++i) add_buffer(store.buffers()[i], static_cast<int>(i), shard);
    // Slots in the store's parameter order, which checkpoints name their state in.
    std::map<const Param*, size_t> order;
    for (const auto& p : store.params()) order.emplace(p.get(), order.size());
    const auto by_order = [&](const auto& a, const auto& b) { return order.at(a.param) < order.at(b.param); };
    std::sort(adamw_.begin(), adamw_.end(), by_order);
    std::sort(muon_.begin(), muon_.end(), by_order);
    group_muon_updates();
  }

  void step(const Tensor& gate) override {
    advance_schedule(schedule_, gate, config_.beta1, config_.beta2);
    std::vector<AdamWOperands> operands;
    operands.reserve(ranges_.size());
    for (AdamWRange& r : ranges_) operands.push_back({&r.value, &r.grad, &r.m, &r.v, &r.work, r.hyper});
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
      const std::vector<std::string> names = optimizer_state_names(config_, *s.param);
      out.push_back({names[0], &s.m});
      out.push_back({names[1], &s.v});
    }
    for (MuonSlot& s : muon_) out.push_back({optimizer_state_names(config_, *s.param)[0], &s.momentum});
    return out;
  }

  std::string describe() const override { return description_; }

  std::vector<std::pair<std::string, double>> learning_rates() const override { return rates_; }

 private:
  // The groups' description and learning rates, from every parameter of the store (a
  // shard's optimizer describes the whole model's).
  void describe_groups(const ParamStore& store) {
    // Groups keyed by (method, lr, decay), in first-seen order.
    std::map<std::tuple<std::string, double, double>, std::pair<int64_t, int>> groups;
    const auto add_rate = [this](const std::string& group, double lr) {
      if (std::find_if(rates_.begin(), rates_.end(), [&](const auto& r) { return r.first == group; }) == rates_.end())
        rates_.emplace_back(group, lr);
    };
    const auto muon = [&](const auto& p) { return optimizer_uses_muon(config_, *p); };
    if (std::any_of(store.params().begin(), store.params().end(), muon)) add_rate("muon", config_.muon_lr);
    for (const auto& p : store.params()) {
      const bool m = optimizer_uses_muon(config_, *p);
      const double lr = m ? config_.muon_lr : learning_rate(*p, config_);
      const double decay = m ? config_.weight_decay * config_.lr / config_.muon_lr : weight_decay(*p, config_);
      auto& g = groups[{m ? "muon" : "adamw", lr, decay}];
      g.first += p->grad.numel();
      ++g.second;
      // Only the embedding's rate may differ from lr (learning_rate above).
      if (!m) add_rate(lr == config_.lr ? "adamw" : "embedding", lr);
    }
    std::ostringstream out;
    for (const auto& [key, value] : groups)
      out << "  " << std::get<0>(key) << ": " << value.second << " tensors, " << value.first / 1e6
          << "M params, lr " << std::get<1>(key) << ", weight decay " << std::get<2>(key) << "\n";
    description_ = out.str();
  }

  // A buffer's Muon matrices get slots of their own; its other parameters get AdamW
  // state (one flat m and v for the buffer, or for the shard's range of it) and are
  // updated as runs of neighbours with equal hyperparameters.
  void add_buffer(const ParamStore::Buffer& b, int index, const dist::StoreShard* shard) {
    const int64_t base = shard ? shard->begin(index) : 0;
    const int64_t size = shard ? shard->end(index) - base : b.grad.numel();
    Tensor m, v;
    AdamWRange* run = nullptr;  // the run the previous parameter joined, if it can grow
    for (Param* p : b.params) {
      if (shard && !shard->owns(*p)) continue;
      if (optimizer_uses_muon(config_, *p)) {
        // A 3-D parameter (an MoE layer's experts) is a stack of matrices, each
        // orthogonalised on its own.
        const double out = static_cast<double>(p->value.size(-2)), in = static_cast<double>(p->value.size(-1));
        const double scale = config_.update_scale == "spectral" ? std::max(1.0, std::sqrt(out / in))
                                                                : config_.rms_target * std::sqrt(std::max(out, in));
        muon_.push_back({p, scale, Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()), Tensor()});
        run = nullptr;
        continue;
      }
      if (!m.defined()) {
        m = Tensor::zeros({size}, b.value.dtype(), b.value.device());
        v = Tensor::zeros({size}, b.value.dtype(), b.value.device());
      }
      const int64_t begin = p->offset, end = p->offset + p->value.numel();
      const double lr = learning_rate(*p, config_), decay = weight_decay(*p, config_);
      adamw_.push_back({p, lr, decay, m.slice(0, begin - base, end - base).view(p->value.shape()),
                        v.slice(0, begin - base, end - base).view(p->value.shape())});
      if (run && run->hyper.lr == lr && run->hyper.weight_decay == decay) {
        *run = flat_range(b, m, v, base, run->begin, end, run->hyper);
        continue;
      }
      ranges_.push_back(
          flat_range(b, m, v, base, begin, end, {lr, config_.beta1, config_.beta2, config_.eps, decay}));
      run = &ranges_.back();
    }
  }

  // [begin, end) of the buffer, whose state starts at `base`.
  static AdamWRange flat_range(const ParamStore::Buffer& b, const Tensor& m, const Tensor& v, int64_t base,
                               int64_t begin, int64_t end, const AdamWHyper& hyper) {
    return {begin, b.master_slice(begin, end), b.grad.slice(0, begin, end), m.slice(0, begin - base, end - base),
            v.slice(0, begin - base, end - base), b.work.slice(0, begin, end), hyper};
  }

  // Gives every Muon matrix its place in the batch of its shape and working dtype; a
  // stack of matrices (3-D) takes as many consecutive places.
  void group_muon_updates() {
    std::map<std::pair<std::vector<int64_t>, DType>, std::vector<MuonSlot*>> by_shape;
    std::vector<std::vector<MuonSlot*>*> order;  // groups in first-seen order
    for (MuonSlot& s : muon_) {
      const Tensor& v = s.param->value;
      auto [it, fresh] = by_shape.try_emplace({{v.size(-2), v.size(-1)}, s.param->work.dtype()});
      if (fresh) order.push_back(&it->second);
      it->second.push_back(&s);
    }
    const auto matrices = [](const MuonSlot* s) { return s->param->value.ndim() == 3 ? s->param->value.size(0) : 1; };
    for (std::vector<MuonSlot*>* slots : order) {
      const Tensor& v = slots->front()->param->value;
      int64_t count = 0;
      for (const MuonSlot* s : *slots) count += matrices(s);
      MuonGroup g{Tensor::empty({count, v.size(-2), v.size(-1)}, v.dtype(), v.device()),
                  slots->front()->param->work.dtype()};
      int64_t at = 0;
      for (MuonSlot* s : *slots) {
        s->update = s->param->value.ndim() == 3 ? g.updates.slice(0, at, at + matrices(s)) : g.updates.select(0, at);
        at += matrices(s);
      }
      muon_groups_.push_back(std::move(g));
    }
  }

  OptimizerConfig config_;
  NewtonSchulz variant_;
  std::vector<AdamWSlot> adamw_;
  std::deque<AdamWRange> ranges_;  // a deque: add_buffer extends the last range in place
  std::vector<MuonSlot> muon_;
  std::vector<MuonGroup> muon_groups_;
  std::string description_;
  std::vector<std::pair<std::string, double>> rates_;
  Tensor schedule_;  // f64 [kScheduleSize] on the parameters' device (ops/optim.h)
};

}  // namespace

Tensor always_apply(double lr_multiplier, Device device) {
  return Tensor::from_vector(std::vector<double>{1.0, lr_multiplier, 1.0}, {3}).to(device);
}

bool optimizer_uses_muon(const OptimizerConfig& config, const Param& p) { return config.name == "muon" && p.muon; }

std::vector<std::string> optimizer_state_names(const OptimizerConfig& config, const Param& p) {
  if (optimizer_uses_muon(config, p)) return {p.name + ".momentum"};
  return {p.name + ".exp_avg", p.name + ".exp_avg_sq"};
}

std::unique_ptr<Optimizer> build_optimizer(const OptimizerConfig& config, const ParamStore& store,
                                           const dist::StoreShard* shard) {
  return std::make_unique<GroupedOptimizer>(config, store, shard);
}

}  // namespace amber
