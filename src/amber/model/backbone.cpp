#include "amber/model/backbone.h"

#include <cmath>

#include "amber/ops/elementwise.h"
#include "amber/ops/embedding.h"

namespace amber {

Backbone::Backbone(const ModelConfig& c, ParamStore& store)
    : embedding_scale_(c.embedding_scale ? std::sqrt(static_cast<double>(c.dim)) : 1.0),
      position_(position_registry().build(c.posenc, c)),
      recompute_(make_recompute_policy(c.recompute)) {
  embed_first_ = store.params().size();
  embed_ = store.add("embed_tokens.weight", {c.vocab_size, c.dim}, ParamRole::embedding, ParamInit::normal(c.init_std));
  for (int i = 0; i < c.depth; ++i) {
    block_first_.push_back(store.params().size());
    blocks_.push_back(std::make_unique<Block>(c, i, store, position_));
  }
  final_norm_first_ = store.params().size();
  final_norm_ = norm_registry().build(c.norm, {"norm", c.dim, c.norm_eps, true, &store});
}

Tensor Backbone::forward(const Tensor& tokens, const SeqInfo& seq, Saved& s, Arena& activations,
                         Arena& scratch) const {
  AMBER_CHECK(tokens.numel() == seq.total_tokens, "backbone: ", tokens.numel(),
              " tokens but the sequence layout covers ", seq.total_tokens);
  s.tokens = tokens;
  const DType dt = embed_->work.dtype();
  Tensor x = activations.alloc({tokens.numel(), embed_->work.size(1)}, dt);
  embedding_forward(embed_->work, tokens, x);
  if (embedding_scale_ != 1.0) scale_into(x, x, embedding_scale_);
  s.blocks.resize(blocks_.size());
  ResidualStream stream{x};
  for (size_t i = 0; i < blocks_.size(); ++i)
    stream = recompute_->forward(*blocks_[i], stream, seq, s.blocks[i], activations, scratch);
  return final_norm_->forward(stream.x, s.final_norm, activations, stream.pending());
}

Tensor Backbone::infer(const Tensor& tokens, const CachedStep& step, std::vector<LayerCache>& caches,
                       Arena& arena) const {
  AMBER_CHECK(caches.size() == blocks_.size(), "generation: ", caches.size(), " cache layers for ",
              blocks_.size(), " blocks");
  Tensor x = arena.alloc({tokens.numel(), embed_->work.size(1)}, embed_->work.dtype());
  embedding_forward(embed_->work, tokens, x);
  if (embedding_scale_ != 1.0) scale_into(x, x, embedding_scale_);
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->infer(x, step, caches[i], arena);
  Norm::Saved unused;
  return final_norm_->forward(x, unused, arena);
}

void Backbone::backward(const Tensor& dhidden, const SeqInfo& seq, Saved& s, Arena& activations, Arena& scratch,
                        const PartFinished& finished) const {
  const auto done = [&](size_t first) {
    if (finished) finished(first);
  };
  Tensor dx = final_norm_->backward(dhidden, s.final_norm, activations);
  done(final_norm_first_);
  for (size_t i = blocks_.size(); i-- > 0;) {
    recompute_->backward(*blocks_[i], dx, seq, s.blocks[i], scratch);
    done(block_first_[i]);
  }
  if (embedding_scale_ != 1.0) scale_into(dx, dx, embedding_scale_);
  embedding_backward(dx, s.tokens, embed_->grad);
  done(embed_first_);
}

}  // namespace amber
