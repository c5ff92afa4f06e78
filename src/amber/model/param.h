// Param: one trainable tensor under its whole-model Hugging Face style name, a view
// into the model's ParamStore (model/param_store.h) carrying the facts that
// initialisation and the optimizer read, set by the module that creates it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "amber/core/tensor.h"

namespace amber {

// What a parameter is to the model; the optimizer's groups and the store's buffers
// follow it.
enum class ParamRole : uint8_t {
  embedding,      // the token embedding (and the head, when tied to it)
  hidden_matrix,  // a projection inside the backbone
  vector,         // norm gains and biases, projection biases, attention sinks
  router,         // a Mixture-of-Experts router
  expert_matrix,  // a routed or shared expert's projection
  head,           // the LM head's own matrix
};
inline constexpr int kParamRoles = 6;
const char* param_role_name(ParamRole role);

// How init_weights fills a parameter: normal(0, std) draws from the model's Philox
// stream; ones and zeros are constants.
struct ParamInit {
  enum class Kind : uint8_t { normal, ones, zeros };
  Kind kind = Kind::zeros;
  double std = 0;

  static ParamInit normal(double std) { return {Kind::normal, std}; }
  static ParamInit ones() { return {Kind::ones, 0}; }
  static ParamInit zeros() { return {Kind::zeros, 0}; }
};

struct Param {
  std::string name;  // e.g. "layers.3.attn.q_proj.weight"; empty for a stack's whole
  Tensor value;      // master weights (f32; f64 in gradient checks)
  Tensor grad;       // same shape and dtype as value; accumulated over micro-batches
  Tensor work;       // what forward and backward read: value itself, or its copy in the
                     // compute dtype (bf16) refreshed after every change to value
  ParamRole role = ParamRole::hidden_matrix;
  ParamInit init;
  bool muon = false;  // Muon orthogonalises its update (under optimizer.name = "muon")
  // Its layer's backward writes the whole gradient with one product per micro-batch
  // (a linear weight), so a step's first micro-batch can overwrite it: a step needs
  // no zeroing pass over it (LanguageModel::restart_grads).
  bool product_gradient = false;
  // Whether the gradient holds an earlier step's values, which its next product
  // overwrites; shared by a stacked parameter's parts and whole.
  std::shared_ptr<bool> stale_grad = std::make_shared<bool>(false);
  // Where the product that writes the gradient leaves the sums of its squares in blocks
  // (ops/grouped_gemm.h's weight gradient), so the step's norm adds those up instead of
  // reading the gradient again; undefined where no product does. Written this step: set
  // by the product's call, cleared by LanguageModel::restart_grads.
  Tensor grad_squares;
  bool grad_squares_written = false;
  // Where the tensors lie in the store: a buffer (ParamStore::buffers) and the element
  // offset of the first one there.
  int buffer = -1;
  int64_t offset = 0;

  // For the product that writes the gradient: whether it adds to it (false the first
  // time after LanguageModel::restart_grads, when it overwrites the stale values instead).
  bool grad_accumulates() {
    const bool accumulate = !*stale_grad;
    *stale_grad = false;
    return accumulate;
  }
  // For that product: where to leave the squares (null: nowhere), marked written.
  Tensor* grad_squares_for_product() {
    grad_squares_written = grad_squares.defined();
    return grad_squares_written ? &grad_squares : nullptr;
  }
};

// The value or gradient of an optional parameter (a bias), undefined without one.
inline Tensor work_of(const std::shared_ptr<Param>& p) { return p ? p->work : Tensor(); }
inline Tensor grad_of(const std::shared_ptr<Param>& p) { return p ? p->grad : Tensor(); }

// Where parameters live and what the model computes in: master weights and
// gradients in `master`, activations and working copies in `compute`.
struct Placement {
  DType master = DType::f32;
  Device device;
  DType compute = DType::f32;
};

}  // namespace amber
