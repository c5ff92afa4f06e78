// Param: one trainable tensor under its whole-model Hugging Face style name, with
// its gradient and the flags the optimizer groups read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

struct Param {
  std::string name;  // e.g. "layers.3.attn.q_proj.weight"
  Tensor value;      // master weights (f32; f64 in gradient checks)
  Tensor grad;       // same shape and dtype as value; accumulated over micro-batches
  Tensor work;       // what forward and backward read: value itself, or its copy in the
                     // compute dtype (bf16) refreshed after every change to value
  bool weight_decay = true;
  bool muon = false;    // a hidden 2-D matrix Muon may orthogonalise
  bool expert = false;  // belongs to a routed expert (MoE)
  bool shared = false;  // used in more than one place (tied embeddings)
  // Its layer's backward writes the whole gradient with one product per micro-batch
  // (a linear weight), so a step's first micro-batch can overwrite it: a step needs
  // no zeroing pass over it (LanguageModel::restart_grads).
  bool product_gradient = false;
  // Whether the gradient holds an earlier step's values, which its next product
  // overwrites; shared by a stacked parameter's parts and whole.
  std::shared_ptr<bool> stale_grad = std::make_shared<bool>(false);

  // For the product that writes the gradient: whether it adds to it (false the first
  // time after LanguageModel::restart_grads, when it overwrites the stale values instead).
  bool grad_accumulates() {
    const bool accumulate = !*stale_grad;
    *stale_grad = false;
    return accumulate;
  }

  // Re-derives the working copy after value changed (init, optimizer step, load).
  void refresh_work() {
    if (!work.shares_storage_with(value)) work.copy_from(value);
  }
};

// Where parameters live and what the model computes in: master weights and
// gradients in `master`, activations and working copies in `compute`.
struct Placement {
  DType master = DType::f32;
  Device device;
  DType compute = DType::f32;
};

// Creates a parameter with a zeroed gradient.
std::shared_ptr<Param> make_param(std::string name, Shape shape, const Placement& placement);

// Parameters that one product reads together (q, k and v projections): each part is a
// parameter of its own (own name, optimizer state, checkpoint entry) whose value, grad
// and work are consecutive dim-0 slices of `whole`'s, so a single GEMM can read or
// write all of them. `whole` has no name and is not collected.
struct StackedParams {
  std::shared_ptr<Param> whole;
  std::vector<std::shared_ptr<Param>> parts;

  // Marks the whole and every part as a product gradient (Param::product_gradient).
  void set_product_gradient() const {
    whole->product_gradient = true;
    for (const auto& p : parts) p->product_gradient = true;
  }
};
// Part i has shape [rows[i], trailing...].
StackedParams make_stacked_params(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                                  const Shape& trailing, const Placement& placement);

}  // namespace amber
