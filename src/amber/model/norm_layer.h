// Normalisation components behind the `norm` registry: rmsnorm (default) and
// layernorm, each with an optional learnable gain (and bias for layernorm).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "amber/core/arena.h"
#include "amber/model/param_store.h"
#include "amber/model/registry.h"
#include "amber/ops/norm.h"

namespace amber {

struct NormSpec {
  std::string name;  // parameter prefix, e.g. "layers.0.attn_norm"
  int dim = 0;
  double eps = 1e-6;
  bool affine = true;
  ParamStore* store = nullptr;  // where the gain (and bias) are declared
};

class Norm {
 public:
  struct Saved {
    Tensor x, mean, rstd;
  };
  virtual ~Norm() = default;
  // y from `arena`; the normalised input and the statistics kept in `saved`. With a
  // residual add (ops/norm.h), add.sum = x + scale * r is what gets normalised.
  virtual Tensor forward(const Tensor& x, Saved& saved, Arena& arena, const ResidualAdd& add) const = 0;
  Tensor forward(const Tensor& x, Saved& saved, Arena& arena) const { return forward(x, saved, arena, {}); }
  // dx from `arena`; gains accumulate their gradients.
  Tensor backward(const Tensor& dy, const Saved& saved, Arena& arena) const;
  // An RMSNorm's gain (null without one) and epsilon, for a pass that fuses the norm
  // with what follows it (QK-norm with RoPE); nullopt for other norms.
  struct RmsParts {
    std::shared_ptr<Param> weight;
    double eps;
  };
  virtual std::optional<RmsParts> rms_parts() const { return std::nullopt; }
  // dx overwritten: a tensor shaped like dy, or a token-strided view of one (ops/norm.h).
  void backward_to(const Tensor& dy, const Saved& saved, Tensor& dx) const { backward_into(dy, saved, dx, false); }
  // dx += the input gradient, in the norm's own pass (the residual stream's gradient).
  void backward_add(const Tensor& dy, const Saved& saved, Tensor& dx) const { backward_into(dy, saved, dx, true); }

 private:
  // dx overwritten, or added to with `accumulate`.
  virtual void backward_into(const Tensor& dy, const Saved& saved, Tensor& dx, bool accumulate) const = 0;
};

const Registry<Norm, const NormSpec&>& norm_registry();

}  // namespace amber
