// Optimizers over a model's parameter store: AdamW (decoupled decay) and Muon (momentum
// + Newton-Schulz orthogonalised updates for the parameters marked for it, AdamW for the
// rest). Groups follow the parameters' roles as the predecessor's did: no decay on
// vectors (gains, biases, sinks) or, by default, the input embedding, and a separate
// embedding learning rate.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amber/dist/zero_shard.h"
#include "amber/model/param_store.h"

namespace amber {

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | muon
  double lr = 3e-4;
  double embed_lr = 0.0;  // 0 = lr
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  bool decay_embeddings = false;
  // Muon (hidden matrices only)
  double muon_lr = 0.02;
  double muon_momentum = 0.95;
  bool nesterov = true;
  std::string ns_variant = "cubic5";     // cubic5 | quintic5
  std::string update_scale = "spectral";  // spectral: max(1, sqrt(out/in)); rms: rms_target*sqrt(max(out,in))
  double rms_target = 0.2;

  template <class Fn>
  void fields(Fn&& v) {
    v("name", name);
    v("lr", lr);
    v("embed_lr", embed_lr);
    v("weight_decay", weight_decay);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("decay_embeddings", decay_embeddings);
    v("muon_lr", muon_lr);
    v("muon_momentum", muon_momentum);
    v("nesterov", nesterov);
    v("ns_variant", ns_variant);
    v("update_scale", update_scale);
    v("rms_target", rms_target);
  }
};

// A named optimizer state tensor, for checkpoints ("<param>.exp_avg").
struct StateTensor {
  std::string name;
  Tensor* tensor;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Issues one update of every parameter from its gradient, decided on the device:
  // gate (f64 [2] on the parameters' device: apply flag, lr multiplier) skips the
  // update when apply is 0 and otherwise multiplies every learning rate by the
  // multiplier. Never waits for the host, so a captured step can replay it.
  virtual void step(const Tensor& gate) = 0;
  virtual std::vector<StateTensor> state() = 0;
  // One line per parameter group (parameters, lr, decay, method) for the run log.
  virtual std::string describe() const = 0;
  // The base learning rate of each group of parameters that has its own ("muon",
  // "adamw", "embedding" where optimizer.embed_lr sets one), before the schedule.
  virtual std::vector<std::pair<std::string, double>> learning_rates() const = 0;
  // Updates applied so far (read from the device), for checkpoints.
  virtual int64_t steps() const = 0;
  virtual void set_steps(int64_t steps) = 0;
  // Checkpoints hold the whole state under whole-model names at any world size. An
  // optimizer sharded across ranks (ZeRO-1) has only its shard in state() (and in the
  // store, of the master weights where it shards them) until
  // open_whole_state, called on every rank, makes state() the whole state: gathered
  // from the ranks that own it (gather), or allocated for a load to fill.
  // close_whole_state keeps this rank's shard of it where it was loaded, and frees it.
  virtual void open_whole_state(bool gather) {}
  virtual void close_whole_state(bool loaded) {}
};

// Whether `config` updates p by Muon (else by AdamW), and the names of p's optimizer
// state tensors (checkpoint entries), each of p's shape. state() lists every AdamW
// parameter's state in store order, then every Muon parameter's.
bool optimizer_uses_muon(const OptimizerConfig& config, const Param& p);
std::vector<std::string> optimizer_state_names(const OptimizerConfig& config, const Param& p);

// A gate for Optimizer::step on `device` that always applies, with the given multiplier,
// to the gradients as they are (gradient scale 1).
Tensor always_apply(double lr_multiplier, Device device);

// shard: ZeRO-1, state for (and updates of) the parameters this rank owns only, over
// the store's ranges that shard gives this rank; the other ranks' updates reach this
// one by an all-gather (train/zero_optimizer.h). nullptr: every parameter.
std::unique_ptr<Optimizer> build_optimizer(const OptimizerConfig& config, const ParamStore& store,
                                           const dist::StoreShard* shard = nullptr);

}  // namespace amber
