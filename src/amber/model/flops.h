// FLOP accounting for MFU and HFU. Attention is counted from the batch's real
// document lengths (causal pairs per document, closed forms with a window); the
// embedding lookup is a gather and counts nothing. Conventions: docs/flops.md.
#pragma once

#include <cstdint>
#include <vector>

#include "amber/model/config.h"

namespace amber {

struct FlopCount {
  double dense_forward = 0;      // block matmuls (q, k, v, o, mlp), 2 per multiply-add
  double attention_forward = 0;  // QK^T and PV over the visible query-key pairs
  double head_forward = 0;       // the vocabulary projection
  double model = 0;              // 3 x (dense + attention + head): forward plus 2x backward
  double hardware = 0;           // model + one more block forward when blocks recompute
};

// Query-key pairs one document of `length` tokens attends over: L(L+1)/2 causal,
// L*w - w(w-1)/2 with a window w <= L.
double attention_pairs(int64_t length, int64_t window);

// Matmul weights a token passes through in the blocks (biases excluded): in an MoE
// layer the router, its top-k experts and the shared ones.
int64_t block_matmul_params(const ModelConfig& config);

// Every parameter the model allocates, computed from the config without building it
// (norm gains, biases, sinks and both embedding matrices when untied included).
int64_t count_parameters(const ModelConfig& config);
// The parameters a token passes through: every parameter but the experts it is not
// routed to (the embeddings, head and routers included).
int64_t count_active_parameters(const ModelConfig& config);

FlopCount count_flops(const ModelConfig& config, const std::vector<int32_t>& document_lengths);

}  // namespace amber
