#include "amber/dist/zero_shard.h"

#include <algorithm>

#include "amber/core/error.h"

namespace amber::dist {

StoreShard::StoreShard(const ParamStore& store, int rank, int world_size) : store_(store), rank_(rank) {
  AMBER_CHECK(store.allocated(), "a ZeRO shard is a slice of an allocated parameter store");
  AMBER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
  for (const ParamStore::Buffer& b : store.buffers()) {
    const int64_t total = b.grad.numel();
    // Rank r's range starts where its first parameter does; the first starts at 0, so
    // the alignment gaps go with the parameter before them.
    std::vector<int64_t> starts(static_cast<size_t>(world_size) + 1, -1);
    starts[0] = 0;
    starts.back() = total;
    for (const Param* p : b.params) {
      const int64_t middle = p->offset + p->grad.numel() / 2;
      const int r = static_cast<int>(std::min<int64_t>(world_size - 1, middle * world_size / std::max<int64_t>(1, total)));
      if (starts[static_cast<size_t>(r)] < 0) starts[static_cast<size_t>(r)] = p->offset;
    }
    // A rank without parameters here gets the empty range where the next one starts.
    for (size_t r = starts.size() - 1; r-- > 1;)
      if (starts[r] < 0) starts[r] = starts[r + 1];
    std::vector<int64_t> counts;
    for (size_t r = 0; r + 1 < starts.size(); ++r) counts.push_back(starts[r + 1] - starts[r]);
    counts_.push_back(std::move(counts));
    received_.push_back(Tensor::empty({counts_.back()[static_cast<size_t>(rank)]}, b.grad.dtype(), b.grad.device()));
  }
}

int64_t StoreShard::begin(int buffer) const {
  const std::vector<int64_t>& c = counts(buffer);
  int64_t at = 0;
  for (int r = 0; r < rank_; ++r) at += c[static_cast<size_t>(r)];
  return at;
}

int StoreShard::owner(const Param& p) const {
  const std::vector<int64_t>& c = counts(p.buffer);
  int64_t at = 0;
  for (size_t r = 0; r < c.size(); ++r) {
    at += c[r];
    if (p.offset < at) return static_cast<int>(r);
  }
  fail("parameter ", p.name, " lies outside its buffer's shards");
}

void StoreShard::reduce_scatter_gradients(Communicator& comm) const {
  for (size_t b = 0; b < counts_.size(); ++b) {
    const ParamStore::Buffer& buffer = store_.buffers()[b];
    Tensor mine = received_[b];
    comm.reduce_scatter_sum(buffer.grad, mine, counts_[b]);
    // MPI may not receive into a buffer it sends from, so the sum lands beside it.
    Tensor range = buffer.grad.slice(0, begin(static_cast<int>(b)), end(static_cast<int>(b)));
    range.copy_from(mine);
  }
}

std::vector<ParamStore::Range> StoreShard::ranges() const {
  std::vector<ParamStore::Range> out;
  for (size_t b = 0; b < counts_.size(); ++b) out.push_back({begin(static_cast<int>(b)), end(static_cast<int>(b))});
  return out;
}

void StoreShard::all_gather_weights(Communicator& comm) const {
  for (size_t b = 0; b < counts_.size(); ++b) {
    const ParamStore::Buffer& buffer = store_.buffers()[b];
    AMBER_CHECK(store_.masters_sharded() || buffer.work.shares_storage_with(buffer.value),
                "ZeRO-1 with working copies of their own keeps only this rank's master values "
                "(ParamStore::keep_master_ranges with StoreShard::ranges)");
    Tensor work = buffer.work;
    comm.all_gather(work.slice(0, begin(static_cast<int>(b)), end(static_cast<int>(b))), work, counts_[b]);
  }
}

void StoreShard::gather_whole_masters(Communicator& comm) const {
  AMBER_CHECK(store_.whole_masters_open(), "gather_whole_masters: the store's whole masters are not open");
  for (size_t b = 0; b < counts_.size(); ++b) {
    const ParamStore::Buffer& buffer = store_.buffers()[b];
    Tensor whole = buffer.value;
    comm.all_gather(buffer.kept, whole, counts_[b]);
  }
}

}  // namespace amber::dist
