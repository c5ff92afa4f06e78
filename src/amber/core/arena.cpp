#include "amber/core/arena.h"

#include <algorithm>

#include "amber/core/error.h"

namespace amber {
namespace {
constexpr size_t kAlignment = 256;  // keeps every arena tensor aligned for vector loads
constexpr size_t kMinBlock = size_t{1} << 20;
size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

Arena::Arena(Device device, size_t initial_bytes) : device_(device) {
  if (initial_bytes) blocks_.push_back({allocate_storage(align_up(initial_bytes), device_)});
}

size_t Arena::capacity_bytes() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.storage->bytes;
  return total;
}

Tensor Arena::alloc(Shape shape, DType dtype) {
  const size_t bytes = align_up(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  if (blocks_.empty() || blocks_.back().used + bytes > blocks_.back().storage->bytes) {
    blocks_.push_back({allocate_storage(std::max(bytes, std::max(kMinBlock, capacity_bytes())), device_)});
    ++layout_version_;
  }
  Block& block = blocks_.back();
  // A window into the block; keep_alive ties the window's lifetime to the block.
  auto window = std::make_shared<Storage>();
  window->data = static_cast<char*>(block.storage->data) + block.used;
  window->bytes = bytes;
  window->device = device_;
  window->keep_alive = block.storage;
  block.used += bytes;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return Tensor(std::move(window), shape, dtype);
}

Tensor Arena::zeros(Shape shape, DType dtype) {
  Tensor t = alloc(shape, dtype);
  t.zero();
  return t;
}

Arena::Mark Arena::mark() const {
  return {blocks_.size(), blocks_.empty() ? 0 : blocks_.back().used, used_};
}

void Arena::rewind(const Mark& m) {
  AMBER_CHECK(m.blocks <= blocks_.size() && m.used <= used_, "Arena::rewind: the mark is not from this arena's past");
  if (blocks_.size() > m.blocks) {
    blocks_.resize(std::max<size_t>(m.blocks, 1));
    ++layout_version_;
  }
  if (!blocks_.empty()) blocks_.back().used = m.blocks == 0 ? 0 : m.block_used;
  used_ = m.used;
}

void Arena::reset() {
  // A spill may have been rewound away, so a single block can be short of the high
  // water mark too.
  if (blocks_.size() > 1 || capacity_bytes() < high_water_) {
    // The high water mark is what one cycle needs in one block: the spilled blocks'
    // unused tails and whatever was rewound do not count.
    const size_t total = high_water_;
    blocks_.clear();
    blocks_.push_back({allocate_storage(align_up(total), device_)});
    ++layout_version_;
  }
  for (Block& b : blocks_) b.used = 0;
  used_ = 0;
}

}  // namespace amber
