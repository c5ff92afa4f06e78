// Attention components behind the `attention` registry. "causal" is the packed
// varlen attention block: q/k/v projections, optional QK-norm, position encoding,
// causal attention within documents (GQA, per-layer sliding window, optional
// sinks) and the output projection.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amber/core/arena.h"
#include "amber/core/seq_info.h"
#include "amber/model/config.h"
#include "amber/model/kv_cache.h"
#include "amber/model/norm_layer.h"
#include "amber/model/param_store.h"
#include "amber/model/position.h"

namespace amber {

struct AttentionSpec {
  std::string name;  // e.g. "layers.3.attn"
  const ModelConfig* config = nullptr;
  int window = 0;  // this layer's window; 0 = global
  ParamStore* store = nullptr;  // where the parameters are declared
  std::shared_ptr<const PositionEncoding> position;
};

class AttentionLayer {
 public:
  // What a forward keeps for its backward. Each implementation defines its own and
  // makes it with new_saved(); the caller owns it, so several micro-batches may be in
  // flight.
  struct Saved {
    virtual ~Saved() = default;
  };
  virtual ~AttentionLayer() = default;
  virtual std::unique_ptr<Saved> new_saved() const = 0;
  // The layer's output, or with `into` (residual r, scale s, sum): *into.sum = r + s *
  // output, added by the output projection as it writes (and returned). `saved` is
  // new_saved()'s.
  virtual Tensor forward(const Tensor& h, const SeqInfo& seq, Saved& saved, Arena& arena,
                         const ResidualAdd& into = {}) const = 0;
  virtual Tensor backward(const Tensor& dout, const SeqInfo& seq, const Saved& saved, Arena& arena) const = 0;
  // Generation: appends the new tokens' keys and values to `cache` and attends over it.
  virtual Tensor infer(const Tensor& h, const CachedStep& step, LayerCache& cache, Arena& arena) const = 0;
};

const Registry<AttentionLayer, const AttentionSpec&>& attention_registry();

}  // namespace amber
