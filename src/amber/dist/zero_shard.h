// ZeRO-1's split of a ParamStore across ranks: each buffer is cut into one contiguous
// range per rank, every range made of whole parameters (so a parameter's update, its
// optimizer state and its squared gradient norm live on one rank, and Muon's
// Newton-Schulz sees a whole matrix). Ranges are balanced by elements: a parameter goes
// to the rank whose equal share holds its middle element. Muon's work per matrix grows
// with its elements times its smaller side, so the balance of Newton-Schulz is as even
// as the matrices of a buffer are alike (the layers of one model are).
#pragma once

#include <cstdint>
#include <vector>

#include "amber/dist/communicator.h"
#include "amber/model/param_store.h"

namespace amber::dist {

class StoreShard {
 public:
  StoreShard(const ParamStore& store, int rank, int world_size);

  int rank() const { return rank_; }
  int owner(const Param& p) const;
  bool owns(const Param& p) const { return owner(p) == rank_; }
  // Buffer b's range of each rank, as element counts in rank order (they sum to the
  // buffer's size), and this rank's range [begin, end).
  const std::vector<int64_t>& counts(int buffer) const { return counts_[static_cast<size_t>(buffer)]; }
  int64_t begin(int buffer) const;
  int64_t end(int buffer) const { return begin(buffer) + counts(buffer)[static_cast<size_t>(rank_)]; }

  // Sums every rank's gradients into this rank's ranges of the store's gradient
  // buffers (reduce-scatter); the rest of the gradients keep this rank's own values.
  void reduce_scatter_gradients(Communicator& comm) const;
  // This rank's range of each buffer, for ParamStore::keep_master_ranges: a store whose
  // working copies are buffers of their own keeps only these master values.
  std::vector<ParamStore::Range> ranges() const;
  // Gives every rank the working copies (the master values themselves, where they
  // share them) that their owners updated.
  void all_gather_weights(Communicator& comm) const;
  // Fills the store's open whole masters (ParamStore::open_whole_masters) from every
  // rank's kept range.
  void gather_whole_masters(Communicator& comm) const;

 private:
  const ParamStore& store_;
  int rank_;
  std::vector<std::vector<int64_t>> counts_;  // [buffer][rank]
  std::vector<Tensor> received_;              // [buffer]: this rank's summed range
};

}  // namespace amber::dist
