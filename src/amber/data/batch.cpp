#include "amber/data/batch.h"

namespace amber::data {

Batch pack_documents(const std::vector<std::vector<int32_t>>& documents) {
  Batch b;
  std::vector<int32_t> tokens, targets, lengths;
  for (const std::vector<int32_t>& doc : documents) {
    AMBER_CHECK(!doc.empty(), "pack_documents: document ", lengths.size(), " is empty");
    lengths.push_back(static_cast<int32_t>(doc.size()));
    for (size_t i = 0; i < doc.size(); ++i) {
      tokens.push_back(doc[i]);
      targets.push_back(i + 1 < doc.size() ? doc[i + 1] : kNoTarget);
      b.trained_tokens += i + 1 < doc.size();
    }
  }
  b.tokens = Tensor::from_vector(tokens, {static_cast<int64_t>(tokens.size())});
  b.targets = Tensor::from_vector(targets, {static_cast<int64_t>(targets.size())});
  b.seq = SeqInfo::from_lengths(lengths);
  return b;
}

}  // namespace amber::data
