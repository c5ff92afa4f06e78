// SeqInfo: the packed variable-length layout of one micro-batch. Documents sit end
// to end on one token axis; cu_seqlens marks their boundaries and positions restart
// at 0 in every document. Only attention and position encoding read it.
#pragma once

#include <cstdint>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

struct SeqInfo {
  std::vector<int32_t> cu_seqlens_host;  // [num_docs + 1], starts at 0
  Tensor cu_seqlens;                     // int32 [num_docs + 1], on the compute device
  Tensor positions;                      // int32 [total_tokens], on the compute device
  int32_t max_seqlen = 0;
  int64_t total_tokens = 0;
  int num_docs = 0;

  // Lengths must be positive; the error names the offending document.
  static SeqInfo from_lengths(const std::vector<int32_t>& lengths, Device device = Device::cpu());
  static SeqInfo from_cu_seqlens(const std::vector<int32_t>& cu_seqlens, Device device = Device::cpu());
  SeqInfo to(Device device) const;
  std::vector<int32_t> lengths() const;
  int32_t doc_start(int doc) const { return cu_seqlens_host[doc]; }
  int32_t doc_length(int doc) const { return cu_seqlens_host[doc + 1] - cu_seqlens_host[doc]; }
};

}  // namespace amber
