#include "amber/model/language_model.h"

#include <algorithm>

#include "amber/core/nearest_name.h"
#include "amber/core/random.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/embedding.h"
#include "amber/ops/step_slots.h"

namespace amber {

LanguageModel::LanguageModel(const ModelConfig& config, DType dtype, Device device, std::optional<DType> compute)
    : config_((config.validate(), config)),
      dtype_(dtype),
      device_(device),
      compute_(compute.value_or(dtype)),
      store_({dtype, device, compute_}),
      backbone_(config_, store_),
      head_first_(store_.params().size()),
      head_(config_, store_, config_.tie_embeddings ? backbone_.embedding() : nullptr),
      activations_(device),
      scratch_(device) {
  AMBER_CHECK(dtype == DType::f32 || (dtype == DType::f64 && device.is_cpu()),
              "model parameters are f32 (or f64 on the CPU, for gradient checks), got ", dtype_name(dtype));
  AMBER_CHECK(compute_ == dtype || compute_ == DType::bf16 || compute_ == DType::f16, "compute dtype ",
              dtype_name(compute_), " must be the master dtype, bf16 or f16");
  store_.allocate();
  routing_layers_ = backbone_.routing_layers();
  if (!routing_layers_.empty()) {
    routing_values_ = Tensor::zeros({static_cast<int64_t>(routing_layers_.size()) * kRoutingStatValues}, DType::f64,
                                    device_);
    backbone_.set_routing_stats(routing_values_);
  }
}

std::vector<RoutingStats> LanguageModel::routing_stats(const std::vector<double>& values) const {
  AMBER_CHECK(values.size() == routing_layers_.size() * kRoutingStatValues, "routing_stats: ", values.size(),
              " values for ", routing_layers_.size(), " MoE layers");
  std::vector<RoutingStats> out;
  for (size_t i = 0; i < routing_layers_.size(); ++i) {
    const double* v = values.data() + i * kRoutingStatValues;
    out.push_back({routing_layers_[i], v[0], static_cast<int>(v[1]), v[2]});
  }
  return out;
}

Param& LanguageModel::param(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& p : params()) {
    if (p->name == name) return *p;
    names.push_back(p->name);
  }
  const std::string near = nearest_name(name, names);
  fail("the model has no parameter '", name, "'", near.empty() ? "" : concat("; did you mean '", near, "'?"));
}

int64_t LanguageModel::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : params()) n += p->grad.numel();
  return n;
}

void LanguageModel::init_weights(uint64_t seed) {
  uint64_t offset = 0;
  for (const auto& p : params()) {
    Tensor& v = p->value;
    switch (p->init.kind) {
      case ParamInit::Kind::normal: fill_normal(v, seed, offset, 0.0f, static_cast<float>(p->init.std)); break;
      case ParamInit::Kind::ones: v.fill(1.0); break;
      case ParamInit::Kind::zeros: v.zero(); break;
    }
    offset += static_cast<uint64_t>(v.numel());
  }
  refresh_working_copies();
}

void LanguageModel::refresh_working_copies() { store_.refresh_working_copies(); }

void LanguageModel::zero_grad() {
  std::vector<Tensor> grads;
  for (const ParamStore::Buffer& b : store_.buffers()) grads.push_back(b.grad);
  zero_all(grads);
}

void LanguageModel::restart_grads() {
  // A product gradient is marked stale (its first product overwrites it); the others
  // are zeroed together: a buffer without product gradients whole, in one pass.
  std::vector<Tensor> zeroed;
  for (const ParamStore::Buffer& b : store_.buffers()) {
    const auto product = [](const Param* p) { return p->product_gradient; };
    if (std::none_of(b.params.begin(), b.params.end(), product)) {
      zeroed.push_back(b.grad);
      continue;
    }
    for (Param* p : b.params) {
      if (p->product_gradient)
        *p->stale_grad = true;
      else
        zeroed.push_back(p->grad);
    }
  }
  zero_all(zeroed);
  for (const auto& p : params()) p->grad_squares_written = false;
}

void LanguageModel::settle_grads() { settle_grads(0, params().size()); }

void LanguageModel::settle_grads(size_t first, size_t end) {
  // Every part of a stacked parameter reads the flag they share before it is cleared
  // (the parts of one stack lie in one block, so in one range).
  std::vector<Tensor> zeroed;
  for (size_t i = first; i < end; ++i)
    if (*params()[i]->stale_grad) zeroed.push_back(params()[i]->grad);
  zero_all(zeroed);
  for (size_t i = first; i < end; ++i) *params()[i]->stale_grad = false;
}

// Batches may arrive on the host; they move to the model's device here (a no-op
// when they are there already).
void LanguageModel::forward_backward(const Tensor& tokens, const Tensor& targets, const SeqInfo& seq,
                                     const Tensor& loss_scale, Tensor& loss_sums, GradientReady* ready) {
  activations_.reset();
  scratch_.reset();
  AMBER_CHECK(loss_sums.numel() == step_slot::objective_end - step_slot::objective_begin,
              "forward_backward: loss_sums ", loss_sums.shape(), " must hold the head's sums and the routers' loss sum");
  const SeqInfo layout = seq.to(device_);
  Tensor head_sums = loss_sums.slice(0, step_slot::loss_sum, step_slot::trained_tokens + 1);
  backbone_.set_router_objective(
      {layout.cu_seqlens, loss_scale, loss_sums.slice(0, step_slot::router_loss_sum, step_slot::router_loss_sum + 1)});
  Backbone::Saved saved;
  const Tensor hidden = backbone_.forward(tokens.to(device_), layout, saved, activations_, scratch_);
  const Tensor dhidden = head_.forward_backward(hidden, targets.to(device_), loss_scale, activations_, head_sums);
  if (!ready) {
    backbone_.backward(dhidden, layout, saved, activations_, scratch_);
    return;
  }
  // A gradient nothing wrote this step is zeroed before it is reported final.
  size_t settled = params().size();
  const auto finished = [&](size_t first) {
    settle_grads(first, settled);
    settled = std::min(settled, first);
    ready->gradients_final(first);
  };
  if (head_first_ < params().size()) finished(head_first_);
  backbone_.backward(dhidden, layout, saved, activations_, scratch_, finished);
}

LMHead::Loss LanguageModel::evaluate(const Tensor& tokens, const Tensor& targets, const SeqInfo& seq) {
  activations_.reset();
  scratch_.reset();
  Backbone::Saved saved;
  const Tensor hidden = backbone_.forward(tokens.to(device_), seq.to(device_), saved, activations_, scratch_);
  Tensor sums = LMHead::Loss::zero_sums(device_);
  head_.forward(hidden, targets.to(device_), activations_, sums);
  return LMHead::Loss::read(sums);
}

Tensor LanguageModel::logits(const Tensor& tokens, const SeqInfo& seq) {
  activations_.reset();
  scratch_.reset();
  Backbone::Saved saved;
  return head_.logits(backbone_.forward(tokens.to(device_), seq.to(device_), saved, activations_, scratch_));
}

}  // namespace amber

namespace amber {

std::vector<LayerCache> LanguageModel::make_kv_cache(int sequences, int capacity) const {
  const int64_t kv = config_.resolved_kv_heads(), dim = config_.resolved_head_dim();
  std::vector<LayerCache> caches(static_cast<size_t>(config_.depth));
  for (LayerCache& c : caches) {
    c.k = Tensor::zeros({sequences, capacity, kv, dim}, compute_, device_);
    c.v = Tensor::zeros({sequences, capacity, kv, dim}, compute_, device_);
  }
  return caches;
}

Tensor LanguageModel::infer_last_logits(const Tensor& tokens, const CachedStep& step,
                                        std::vector<LayerCache>& caches) {
  activations_.reset();
  const Tensor hidden = backbone_.infer(tokens, step, caches, activations_);
  Tensor last = activations_.alloc({step.last.numel(), hidden.size(1)}, hidden.dtype());
  embedding_forward(hidden, step.last, last);  // each sequence's last new row
  return head_.logits(last);
}

}  // namespace amber
