#include <gtest/gtest.h>

#include "amber/core/arena.h"
#include "amber/core/device.h"
#include "amber/core/tensor.h"

namespace amber {
namespace {

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(Tensor, ViewsShareStorageAndAddressCorrectly) {
  Tensor t = iota({2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  Tensor s = t.slice(1, 1, 3);  // [2, 2, 4]
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.shape(), Shape({2, 2, 4}));
  EXPECT_TRUE(s.shares_storage_with(t));
  Tensor c = s.contiguous();
  EXPECT_EQ(c.item(0), 4.0);   // t[0,1,0]
  EXPECT_EQ(c.item(8), 16.0);  // t[1,1,0]
  Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  Tensor trc = tr.contiguous();
  EXPECT_EQ(trc.item(1), 12.0);  // t[1,0,0]
  Tensor sel = t.select(1, 2);    // [2, 4]
  EXPECT_EQ(sel.shape(), Shape({2, 4}));
  EXPECT_EQ(sel.contiguous().item(4), 20.0);  // t[1,2,0]
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.item(23), 23.0);
}

TEST(Tensor, CopiesConvertAndWriteThroughViews) {
  Tensor t = iota({3, 4});
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.to(DType::f32).item(11), 11.0);
  Tensor col = t.slice(1, 2, 3);  // a strided column
  col.fill(-1.0);
  EXPECT_EQ(t.item(2), -1.0);
  EXPECT_EQ(t.item(6), -1.0);
  EXPECT_EQ(t.item(3), 3.0);
  Tensor src = Tensor::full({3, 1}, 7.0, DType::f64);
  col.copy_from(src);
  EXPECT_EQ(t.item(10), 7.0);
}

// Copies between views whose rows are contiguous (the heads of a stacked projection),
// large enough to run over several threads: every element lands where its index says,
// and nothing outside the view is touched.
TEST(Tensor, RowStridedCopiesGatherAndScatterEveryElement) {
  const Tensor stacked = iota({300, 5, 64});
  const Tensor heads = stacked.slice(1, 1, 4);
  const Tensor gathered = heads.contiguous();
  ASSERT_TRUE(gathered.is_contiguous());
  for (int64_t t : {0, 151, 299})
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t d : {0, 33, 63})
        EXPECT_EQ(gathered.item((t * 3 + h) * 64 + d), stacked.item((t * 5 + h + 1) * 64 + d));
  Tensor into = Tensor::zeros({300, 5, 64}, DType::f32);
  Tensor slot = into.slice(1, 1, 4);
  slot.copy_from(gathered);
  const Tensor expected_zero = into.slice(1, 4, 5).contiguous();
  for (int64_t i = 0; i < expected_zero.numel(); ++i) ASSERT_EQ(expected_zero.item(i), 0.0) << i;
  EXPECT_EQ(into.slice(1, 1, 4).contiguous().to_doubles(), gathered.to_doubles());
  EXPECT_EQ(into.slice(1, 0, 1).contiguous().to_doubles(), std::vector<double>(300 * 64, 0.0));
}

TEST(Tensor, ErrorsNameTheShapes) {
  Tensor t = iota({2, 3});
  try {
    t.view({4, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(t.slice(0, 1, 3), Error);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6}), Error);
}

TEST(Arena, ResetReusesOneBlockAtTheHighWaterMark) {
  Arena arena;
  for (int cycle = 0; cycle < 3; ++cycle) {
    arena.reset();
    Tensor a = arena.alloc({1 << 18}, DType::f32);  // 1 MiB
    Tensor b = arena.zeros({1 << 19}, DType::f32);  // 2 MiB: spills in cycle 0
    a.fill(1.0);
    EXPECT_EQ(b.item(5), 0.0);
    EXPECT_FALSE(a.shares_storage_with(b));
  }
  EXPECT_EQ(arena.high_water_bytes(), size_t{3} << 20);
  EXPECT_EQ(arena.capacity_bytes(), size_t{3} << 20);  // merged into one block
}

// The layout version changes exactly when the arena's memory moves (a spill, then the
// merge at the next reset), and a repeated allocation sequence then lands on the same
// addresses: what a captured CUDA graph relies on.
TEST(Arena, LayoutVersionMarksMovedMemory) {
  Arena arena;
  const auto cycle = [&] {
    arena.reset();
    const Tensor a = arena.alloc({1 << 18}, DType::f32), b = arena.alloc({1 << 19}, DType::f32);
    return std::pair{a.raw(), b.raw()};
  };
  cycle();
  const uint64_t spilled = arena.layout_version();
  EXPECT_EQ(spilled, 2u);  // the first block, then the spill
  const auto first = cycle();
  const uint64_t merged = arena.layout_version();
  EXPECT_EQ(merged, spilled + 1);  // the reset merged the blocks
  EXPECT_EQ(cycle(), first);
  EXPECT_EQ(arena.layout_version(), merged);
  arena.reset();
  arena.alloc({1 << 21}, DType::f32);  // 8 MiB: more than the block holds
  EXPECT_GT(arena.layout_version(), merged);
}

// Temporaries allocated after a mark are forgotten by rewinding to it: the next
// allocation reuses their memory, the high water mark counts them once, and the merged
// block holds the kept tensor and the largest temporary, not their sum.
TEST(Arena, RewindReusesTheTemporariesMemory) {
  Arena arena;
  for (int cycle = 0; cycle < 3; ++cycle) {
    arena.reset();
    Tensor kept = arena.alloc({1 << 18}, DType::f32);  // 1 MiB
    kept.fill(2.0);
    const Arena::Mark before = arena.mark();
    const Tensor first = arena.alloc({1 << 19}, DType::f32);  // 2 MiB: spills in cycle 0
    const void* first_at = first.raw();
    arena.rewind(before);
    EXPECT_EQ(arena.used_bytes(), size_t{1} << 20);
    const Tensor second = arena.alloc({1 << 19}, DType::f32);
    if (cycle > 0) {
      EXPECT_EQ(second.raw(), first_at) << "cycle " << cycle;
    }
    arena.rewind(before);
    EXPECT_EQ(kept.item(7), 2.0);
  }
  EXPECT_EQ(arena.high_water_bytes(), size_t{3} << 20);
  EXPECT_EQ(arena.capacity_bytes(), size_t{3} << 20);
}

// A GPU fill writes with a kernel the bits a CPU fill stores, for every element size.
TEST(TensorGpu, FillWritesTheCpuBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::f8e4m3}) {
    Tensor cpu = Tensor::empty({1001}, dt), gpu = Tensor::zeros({1001}, dt, Device::cuda());
    cpu.fill(0.3);
    gpu.fill(0.3);
    EXPECT_EQ(gpu.to_doubles(), cpu.to_doubles()) << dtype_name(dt);
  }
}

// copy_from between strided views on one GPU (the heads of a stacked projection in
// and out) moves the bits a CPU copy moves, with words of 16 bytes down to 1.
TEST(TensorGpu, StridedCopiesOnTheDeviceMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    DType dt;
    int64_t d;  // elements per row: 16-byte rows, then 4-byte and 2-byte ones
  };
  for (Case c : {Case{DType::bf16, 64}, Case{DType::f32, 3}, Case{DType::bf16, 5}, Case{DType::f64, 7}}) {
    Tensor cpu = Tensor::empty({9, 6, c.d}, c.dt);
    for (int64_t i = 0; i < cpu.numel(); ++i) store_from_double(cpu.raw(), c.dt, static_cast<size_t>(i), 0.25 * i);
    const Tensor gpu = cpu.to(Device::cuda());
    // Out of a view: heads 2-4 into a contiguous tensor.
    const Tensor gathered = gpu.slice(1, 2, 5).contiguous();
    EXPECT_EQ(gathered.to_doubles(), cpu.slice(1, 2, 5).contiguous().to_doubles()) << dtype_name(c.dt);
    // Into a view: those heads written into heads 0-2 of another stack.
    Tensor target = Tensor::zeros(cpu.shape(), c.dt, Device::cuda()), expected = Tensor::zeros(cpu.shape(), c.dt);
    Tensor into = target.slice(1, 0, 3), expected_into = expected.slice(1, 0, 3);
    into.copy_from(gathered);
    expected_into.copy_from(cpu.slice(1, 2, 5));
    EXPECT_EQ(target.to_doubles(), expected.to_doubles()) << dtype_name(c.dt);
  }
}

}  // namespace
}  // namespace amber
