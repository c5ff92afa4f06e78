// Rotary position embedding with per-document positions (rotate-half convention:
// channel i pairs with i + rotary_dim/2) and the linear, NTK and YaRN context
// scalings. Channels past rotary_dim (partial rotary) pass through unchanged.
#pragma once

#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

enum class RopeScaling { none, linear, ntk, yarn };
RopeScaling rope_scaling_from_name(const std::string& name);  // none|linear|ntk|yarn

struct RopeConfig {
  int head_dim = 64;
  double theta = 10000.0;
  double partial = 1.0;  // fraction of head_dim that rotates
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;
  int original_context = 8192;  // YaRN's pre-extension context
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// Frequencies resolved once from a RopeConfig.
struct RopeTable {
  explicit RopeTable(const RopeConfig& config);
  int head_dim;
  int rotary_dim;
  std::vector<double> inv_freq;  // [rotary_dim / 2]
  double attention_scale;        // YaRN multiplies cos and sin by this; 1 otherwise
};

// x, y [T, H, head_dim]; positions int32 [T]. y may alias x.
void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
// The transpose rotation; dx may alias dy.
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);

// QK-norm and RoPE in one pass over an attention layer's q and k: per side,
// y = rope(rmsnorm(x) * weight) over each head. x [T, H, head_dim] may be a
// token-strided view (the heads of a stacked projection); weight [head_dim] or
// undefined; y contiguous, rstd [T * H] f32 (f64 for f64 inputs), both written. q and k
// share head_dim, dtype, positions and the table. Neither device rounds between the
// norm and the rotation, and each forms the cos/sin once for both sides.
struct QkNormRopeForward {
  Tensor x, weight;
  double eps = 1e-6;
  Tensor y, rstd;
};
void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table);

// Per side, dx (overwritten; may be a token-strided view) from dy: the transpose
// rotation, then the norm's backward; dweight += when weight and dweight are defined.
struct QkNormRopeBackward {
  Tensor dy, x, weight, rstd;
  Tensor dx, dweight;
};
void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table);
// The checks qk_norm_rope_backward makes, for an op that runs it inside its own
// (attention_backward's QkNormRopeGrad); returns the tensors' common device.
Device check_qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k,
                                   const Tensor& positions, const RopeTable& table, const char* op);

}  // namespace amber
