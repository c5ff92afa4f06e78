#include "amber/train/zero_optimizer.h"

#include <deque>
#include <map>
#include <sstream>

namespace amber {
namespace {

class ShardedOptimizer final : public Optimizer {
 public:
  ShardedOptimizer(const OptimizerConfig& config, ParamStore& store, const dist::StoreShard& shard,
                   dist::Communicator& comm)
      : config_(config), store_(store), shard_(shard), comm_(comm), inner_(build_optimizer(config, store, &shard)) {}

  void step(const Tensor& gate) override {
    inner_->step(gate);
    shard_.all_gather_weights(comm_);
  }

  std::vector<StateTensor> state() override { return whole_.empty() ? inner_->state() : entries_; }

  std::string describe() const override {
    std::ostringstream out;
    out << inner_->describe() << "  ZeRO-1: optimizer state" << (store_.masters_sharded() ? " and f32 master weights" : "")
        << " sharded over " << comm_.world_size() << " ranks\n";
    return out.str();
  }
  std::vector<std::pair<std::string, double>> learning_rates() const override { return inner_->learning_rates(); }
  int64_t steps() const override { return inner_->steps(); }
  void set_steps(int64_t steps) override { inner_->set_steps(steps); }

  // One broadcast per state tensor from its owner: checkpoints are rare, and the
  // tensors' order (the store's parameters) is known to every rank without a word.
  // Sharded master weights are part of the state: opened whole (one all-gather per
  // buffer), for checkpoints to write and read.
  void open_whole_state(bool gather) override {
    close_whole_state(false);
    store_.open_whole_masters();
    if (gather && store_.masters_sharded()) shard_.gather_whole_masters(comm_);
    std::map<std::string, Tensor*> mine;
    for (const StateTensor& s : inner_->state()) mine.emplace(s.name, s.tensor);
    // In state()'s order, so that the checkpoint's files are those of one process.
    for (const bool muon : {false, true}) {
      for (const auto& p : store_.params()) {
        if (optimizer_uses_muon(config_, *p) != muon) continue;
        for (const std::string& name : optimizer_state_names(config_, *p)) {
          const auto it = mine.find(name);
          Tensor& t = whole_.emplace_back(it != mine.end() && gather ? it->second->clone()
                                                                     : Tensor::zeros(p->grad.shape(), p->grad.dtype(),
                                                                                     p->grad.device()));
          if (gather) comm_.broadcast(t, shard_.owner(*p));
          entries_.push_back({name, &t});
        }
      }
    }
  }

  void close_whole_state(bool loaded) override {
    if (loaded) {
      std::map<std::string, Tensor*> whole;
      for (const StateTensor& s : entries_) whole.emplace(s.name, s.tensor);
      for (const StateTensor& s : inner_->state()) s.tensor->copy_from(*whole.at(s.name));
    }
    store_.close_whole_masters(loaded);
    entries_.clear();
    whole_.clear();
  }

 private:
  const OptimizerConfig config_;
  ParamStore& store_;
  const dist::StoreShard& shard_;
  dist::Communicator& comm_;
  std::unique_ptr<Optimizer> inner_;
  std::deque<Tensor> whole_;  // a deque: entries_ point into it
  std::vector<StateTensor> entries_;
};

}  // namespace

std::unique_ptr<Optimizer> build_sharded_optimizer(const OptimizerConfig& config, ParamStore& store,
                                                   const dist::StoreShard& shard, dist::Communicator& comm) {
  return std::make_unique<ShardedOptimizer>(config, store, shard, comm);
}

}  // namespace amber
