// SeqInfo: the packed variable-length layout of one micro-batch. Documents sit end
// to end on one token axis; cu_seqlens marks their boundaries and positions restart
// at 0 in every document. Only attention and position encoding read it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

// Device tensors that kernels derive from a layout alone (attention's tile plans and
// work lists), made by the first call that needs one and reused by the calls after it
// (every layer of a step reads the same plans). A copy starts empty: the trainer
// refills one layout's device buffers in place for every step, and each step's model
// works on a copy of it (LanguageModel::forward_backward), so no step reads the plans
// of the documents before.
class DerivedTensors {
 public:
  DerivedTensors() = default;
  DerivedTensors(const DerivedTensors&) {}
  DerivedTensors& operator=(const DerivedTensors&) {
    tensors_.clear();
    return *this;
  }

  // The tensor kept under `key`, or nullptr when there is none yet.
  const Tensor* find(const std::string& key) const;
  const Tensor& keep(const std::string& key, Tensor t);

 private:
  std::map<std::string, Tensor> tensors_;
};

struct SeqInfo {
  std::vector<int32_t> cu_seqlens_host;  // [num_docs + 1], starts at 0
  Tensor cu_seqlens;                     // int32 [num_docs + 1], on the compute device
  Tensor positions;                      // int32 [total_tokens], on the compute device
  int32_t max_seqlen = 0;
  int64_t total_tokens = 0;
  int num_docs = 0;
  // Plans kernels made from this layout; valid while cu_seqlens keeps its contents.
  mutable DerivedTensors derived;

  // Lengths must be positive; the error names the offending document.
  static SeqInfo from_lengths(const std::vector<int32_t>& lengths, Device device = Device::cpu());
  static SeqInfo from_cu_seqlens(const std::vector<int32_t>& cu_seqlens, Device device = Device::cpu());
  SeqInfo to(Device device) const;
  std::vector<int32_t> lengths() const;
  int32_t doc_start(int doc) const { return cu_seqlens_host[doc]; }
  int32_t doc_length(int doc) const { return cu_seqlens_host[doc + 1] - cu_seqlens_host[doc]; }
};

}  // namespace amber
