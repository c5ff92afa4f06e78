#include "amber/model/flops.h"

namespace amber {

double attention_pairs(int64_t length, int64_t window) {
  const double l = static_cast<double>(length), w = static_cast<double>(window);
  if (window <= 0 || window >= length) return l * (l + 1) / 2;
  return l * w - w * (w - 1) / 2;
}

namespace {

// One layer's matmul weights: attention's, and its MLP's that a token passes through
// (active: the router, top-k experts and shared experts of an MoE layer) and that exist.
struct LayerMatmuls {
  int64_t attention, mlp_active, mlp_total;
};

LayerMatmuls layer_matmuls(const ModelConfig& c, int layer) {
  const int64_t d = c.dim, q = int64_t{c.heads} * c.resolved_head_dim();
  const int64_t kv = int64_t{c.resolved_kv_heads()} * c.resolved_head_dim();
  LayerMatmuls m{d * q + 2 * d * kv + q * d, 0, 0};
  if (!c.layer_is_sparse(layer)) {
    m.mlp_active = m.mlp_total = (c.mlp_is_gated() ? 3 : 2) * d * int64_t{c.resolved_mlp_hidden()};
    return m;
  }
  const int64_t expert = 3 * d * int64_t{c.moe_hidden}, router = int64_t{c.moe_experts} * d;
  const int64_t shared = int64_t{c.moe_shared_experts} * expert;
  m.mlp_active = router + int64_t{c.moe_top_k} * expert + shared;
  m.mlp_total = router + int64_t{c.moe_experts} * expert + shared;
  return m;
}

}  // namespace

int64_t block_matmul_params(const ModelConfig& c) {
  int64_t total = 0;
  for (int l = 0; l < c.depth; ++l) {
    const LayerMatmuls m = layer_matmuls(c, l);
    total += m.attention + m.mlp_active;
  }
  return total;
}

int64_t count_parameters(const ModelConfig& c) {
  const int64_t d = c.dim, hd = c.resolved_head_dim();
  const int64_t q = int64_t{c.heads} * hd, kv = int64_t{c.resolved_kv_heads()} * hd;
  const int64_t hidden = c.resolved_mlp_hidden();
  const int64_t norm = c.norm == "layernorm" ? 2 * d : d;
  int64_t vectors = 0, matmuls = 0;
  for (int l = 0; l < c.depth; ++l) {
    int64_t layer = norm * (c.post_norm ? 4 : 2);
    if (c.qk_norm && c.qk_norm_affine) layer += 2 * hd;
    if (c.attn_sink) layer += c.heads;
    if (c.attn_bias) layer += q + 2 * kv + d + (c.layer_is_sparse(l) ? 0 : (c.mlp_is_gated() ? 2 : 1) * hidden + d);
    vectors += layer;
    const LayerMatmuls m = layer_matmuls(c, l);
    matmuls += m.attention + m.mlp_total;
  }
  const int64_t embeddings = int64_t{c.vocab_size} * d * (c.tie_embeddings ? 1 : 2);
  return embeddings + matmuls + vectors + norm;
}

int64_t count_active_parameters(const ModelConfig& c) {
  int64_t idle = 0;  // experts a token does not pass through
  for (int l = 0; l < c.depth; ++l) {
    const LayerMatmuls m = layer_matmuls(c, l);
    idle += m.mlp_total - m.mlp_active;
  }
  return count_parameters(c) - idle;
}

FlopCount count_flops(const ModelConfig& c, const std::vector<int32_t>& lengths) {
  FlopCount f;
  double tokens = 0;
  for (int32_t l : lengths) tokens += l;
  f.dense_forward = 2.0 * static_cast<double>(block_matmul_params(c)) * tokens;
  f.head_forward = 2.0 * c.dim * static_cast<double>(c.vocab_size) * tokens;
  const double q_dim = static_cast<double>(c.heads) * c.resolved_head_dim();
  for (int window : c.layer_windows()) {
    double pairs = 0;
    for (int32_t l : lengths) pairs += attention_pairs(l, window);
    f.attention_forward += 4.0 * q_dim * pairs;  // QK^T and PV: 2 FLOPs per multiply-add each
  }
  f.model = 3.0 * (f.dense_forward + f.attention_forward + f.head_forward);
  f.hardware = f.model + (c.recompute == "block" ? f.dense_forward + f.attention_forward : 0.0);
  return f;
}

}  // namespace amber
