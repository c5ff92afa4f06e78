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

}  // namespace amber
