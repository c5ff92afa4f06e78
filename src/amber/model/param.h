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
  Tensor grad;       // same shape and dtype; accumulated over micro-batches
  bool weight_decay = true;
  bool muon = false;    // a hidden 2-D matrix Muon may orthogonalise
  bool expert = false;  // belongs to a routed expert (MoE)
  bool shared = false;  // used in more than one place (tied embeddings)

  void zero_grad() { grad.zero(); }
};

// Creates a parameter with a zeroed gradient.
std::shared_ptr<Param> make_param(std::string name, Shape shape, DType dtype, Device device = Device::cpu());

}  // namespace amber
