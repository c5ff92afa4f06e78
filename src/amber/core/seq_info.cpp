#include "amber/core/seq_info.h"

#include <algorithm>

namespace amber {

const Tensor* DerivedTensors::find(const std::string& key) const {
  const auto it = tensors_.find(key);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& DerivedTensors::keep(const std::string& key, Tensor t) {
  return tensors_[key] = std::move(t);
}

SeqInfo SeqInfo::from_lengths(const std::vector<int32_t>& lengths, Device device) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) {
    AMBER_CHECK(lengths[i] > 0, "document ", i, " has length ", lengths[i],
                "; every packed document needs at least one token");
    cu[i + 1] = cu[i] + lengths[i];
  }
  return from_cu_seqlens(cu, device);
}

SeqInfo SeqInfo::from_cu_seqlens(const std::vector<int32_t>& cu, Device device) {
  AMBER_CHECK(!cu.empty() && cu.front() == 0, "cu_seqlens must start at 0");
  SeqInfo s;
  s.cu_seqlens_host = cu;
  s.num_docs = static_cast<int>(cu.size()) - 1;
  s.total_tokens = cu.back();
  std::vector<int32_t> positions(static_cast<size_t>(s.total_tokens));
  for (int d = 0; d < s.num_docs; ++d) {
    AMBER_CHECK(cu[d + 1] > cu[d], "cu_seqlens is not strictly increasing at document ", d, " (",
                cu[d], " -> ", cu[d + 1], ")");
    s.max_seqlen = std::max(s.max_seqlen, cu[d + 1] - cu[d]);
    for (int32_t t = cu[d]; t < cu[d + 1]; ++t) positions[t] = t - cu[d];
  }
  s.cu_seqlens = Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())}).to(device);
  s.positions = Tensor::from_vector(positions, {s.total_tokens}).to(device);
  return s;
}

SeqInfo SeqInfo::to(Device device) const {
  SeqInfo s = *this;
  s.cu_seqlens = cu_seqlens.to(device);
  s.positions = positions.to(device);
  return s;
}

std::vector<int32_t> SeqInfo::lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(num_docs));
  for (int d = 0; d < num_docs; ++d) out[d] = doc_length(d);
  return out;
}

}  // namespace amber
