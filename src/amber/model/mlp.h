// Feed-forward components behind the `mlp` registry: swiglu (default) and geglu
// read one fused gate_up projection [2H, D] (gate first); gelu is the plain
// two-layer MLP without a gate.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amber/core/arena.h"
#include "amber/model/param.h"
#include "amber/model/registry.h"
#include "amber/ops/norm.h"

namespace amber {

struct MlpSpec {
  std::string name;  // e.g. "layers.3.mlp"
  int dim = 0;
  int hidden = 0;
  bool bias = false;
  Placement placement;
};

class Mlp {
 public:
  struct Saved {
    Tensor h, up, act;  // input, first projection, activation output
  };
  virtual ~Mlp() = default;
  virtual void collect(std::vector<std::shared_ptr<Param>>& out) const = 0;
  // The output, or with `into` (residual r, scale s, sum): *into.sum = r + s * output,
  // added by the down projection as it writes (and returned).
  virtual Tensor forward(const Tensor& h, Saved& saved, Arena& arena, const ResidualAdd& into = {}) const = 0;
  virtual Tensor backward(const Tensor& dout, const Saved& saved, Arena& arena) const = 0;
};

const Registry<Mlp, const MlpSpec&>& mlp_registry();

}  // namespace amber
