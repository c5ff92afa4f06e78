// Per-micro-batch activation arena: a bump allocator reset at the start of every
// micro-batch. After the first micro-batch it holds one block as large as the high
// water mark, so a steady-state step allocates nothing (and is graph-capturable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

class Arena {
 public:
  explicit Arena(Device device = Device::cpu(), size_t initial_bytes = 0);

  Tensor alloc(Shape shape, DType dtype);
  Tensor zeros(Shape shape, DType dtype);
  // Forget every allocation. Tensors handed out before must no longer be used. If
  // the last cycle spilled into extra blocks, they merge into one block here.
  void reset();

  // A point in the allocation sequence; rewind(mark) forgets every allocation made
  // after it (a stack discipline for a layer's temporaries: what it keeps is allocated
  // before the mark, what it only needs while it runs after). Tensors from those
  // allocations must no longer be used; work already queued on the device's stream
  // still reads them before later work overwrites them.
  struct Mark {
    size_t blocks = 0, block_used = 0, used = 0;
  };
  Mark mark() const;
  void rewind(const Mark& mark);

  size_t used_bytes() const { return used_; }
  size_t high_water_bytes() const { return high_water_; }
  size_t capacity_bytes() const;
  // Changes whenever the arena's blocks do (a spill or a merge): tensors handed out
  // at equal versions of one allocation sequence sit at equal addresses, which a
  // captured CUDA graph relies on.
  uint64_t layout_version() const { return layout_version_; }
  Device device() const { return device_; }

 private:
  struct Block {
    std::shared_ptr<Storage> storage;
    size_t used = 0;
  };
  Device device_;
  std::vector<Block> blocks_;
  size_t used_ = 0;
  size_t high_water_ = 0;
  uint64_t layout_version_ = 0;
};

}  // namespace amber
