// The gated MLP's products with the GLU in their epilogues: CUTLASS 4 sm90 kernels
// (TMA loads, persistent ping-pong consumer warpgroups, 128x128x64 tiles, fp32
// accumulation) whose epilogue is a visitor tree staged through shared memory by TMA.
// Forward: the value half of x w^T reads the gate (the epilogue's C, written just
// before by cuBLASLt) and stores the value and h = act(gate) value. Backward: dh =
// dy w_down reads gate and value and stores dgate and dvalue; dh itself is never
// stored. Against cuBLASLt's product plus the GLU pass this saved 39 us (backward) and
// 10 us (forward) a layer at Kohaku-200M's shapes (docs/perf/kernels.md, 9b3b2ee).
// The 64x64 epilogue tile was the fastest of the tiles timed there at 200M and 500M.
#include "amber/ops/cuda/gemm/glu_gemm.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "amber/core/error.h"
#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/gemm/gemm.h"

#if defined(AMBER_CUTLASS) && defined(AMBER_HOPPER_KERNELS)
#include "amber/ops/cuda/activation/glu_math.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#endif

namespace amber::cuda {

#if defined(AMBER_CUTLASS) && defined(AMBER_HOPPER_KERNELS)
namespace {

using Bf16 = cutlass::bfloat16_t;
namespace fusion = cutlass::epilogue::fusion;
using Tile = cute::Shape<cute::_128, cute::_128, cute::_64>;
using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
using EpilogueTile = cute::Shape<cute::_64, cute::_64>;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
using RowMajor = cutlass::layout::RowMajor;
using RowStride = cutlass::detail::TagToStrideC_t<RowMajor>;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
constexpr int kAlignment = 8;  // elements: 16 bytes, what TMA asks of rows and pointers

// The tree's compute nodes: Sm90Compute applies Fn<Array<float, n>> to each fragment.
template <class Act>
struct GluFns {
  // h = act(gate) value
  template <class A>
  struct Hidden {
    CUTLASS_DEVICE A operator()(const A& gate, const A& value) const {
      A r;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < A::kElements; ++i) r[i] = Act::value(gate[i]) * value[i];
      return r;
    }
  };
  // The value itself. The first input, the stored h, only makes the tree visit that
  // branch.
  template <class A>
  struct Value {
    CUTLASS_DEVICE A operator()(const A&, const A& value) const { return value; }
  };
  // dvalue = dh act(gate)
  template <class A>
  struct ValueGrad {
    CUTLASS_DEVICE A operator()(const A& dh, const A& gate) const {
      A r;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < A::kElements; ++i) r[i] = dh[i] * Act::value(gate[i]);
      return r;
    }
  };
  // dgate = dh value act'(gate); the first input, the stored dvalue, as in Value.
  template <class A>
  struct GateGrad {
    CUTLASS_DEVICE A operator()(const A&, const A& dh, const A& gate, const A& value) const {
      A r;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < A::kElements; ++i) r[i] = dh[i] * value[i] * Act::derivative(gate[i]);
      return r;
    }
  };
};

using Descriptor =
    cutlass::epilogue::collective::detail::EpilogueDescriptor<Tile, EpilogueTile, Bf16, Bf16, EpilogueSchedule>;
using LoadDescriptor = cutlass::epilogue::collective::detail::AuxLoadDescriptor<Descriptor, RowMajor, Bf16>;
using StoreDescriptor = cutlass::epilogue::collective::detail::AuxStoreDescriptor<Descriptor, RowMajor, Bf16>;
using AuxLoad = fusion::Sm90AuxLoad<LoadDescriptor::Stages, typename Descriptor::EpilogueTile, Bf16,
                                    typename LoadDescriptor::Stride, typename LoadDescriptor::SmemLayoutAtom,
                                    typename LoadDescriptor::CopyOpS2R>;
using AuxStore = fusion::Sm90AuxStore<StoreDescriptor::Stages, typename Descriptor::EpilogueTile, Bf16, kRound,
                                      typename StoreDescriptor::Stride, typename StoreDescriptor::SmemLayoutAtom,
                                      typename StoreDescriptor::CopyOpR2S>;
using Acc = fusion::Sm90AccFetch;
using Source = fusion::Sm90SrcFetch<Bf16>;  // the epilogue's C: the gate

template <class Act>
struct Trees {
  using Fns = GluFns<Act>;
  // D = value, aux store = h.
  using Forward = fusion::Sm90EVT<
      fusion::Sm90Compute<Fns::template Value, Bf16, float, kRound>,
      fusion::Sm90EVT<AuxStore, fusion::Sm90EVT<fusion::Sm90Compute<Fns::template Hidden, float, float, kRound>,
                                                Source, Acc>>,
      Acc>;
  // D = dgate, aux store = dvalue, aux load = value.
  using Backward = fusion::Sm90EVT<
      fusion::Sm90Compute<Fns::template GateGrad, Bf16, float, kRound>,
      fusion::Sm90EVT<AuxStore, fusion::Sm90EVT<fusion::Sm90Compute<Fns::template ValueGrad, float, float, kRound>,
                                                Acc, Source>>,
      Acc, Source, AuxLoad>;
};

// B is w [n, k] row-major (CUTLASS's column-major k x n) in the forward, w_down [k, n]
// row-major in the backward.
template <class Tree, class LayoutB>
struct Product {
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, EpilogueTile, float, float, Bf16,
      RowMajor, kAlignment, Bf16, RowMajor, kAlignment, EpilogueSchedule, Tree>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, RowMajor, kAlignment, Bf16, LayoutB, kAlignment,
      float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue, cutlass::gemm::PersistentScheduler>>;
  using Kernel = typename Gemm::GemmKernel;
};

const Bf16* in(const Tensor& t) { return static_cast<const Bf16*>(t.raw()); }
Bf16* out(const Tensor& t) { return static_cast<Bf16*>(t.raw()); }
RowStride rows_apart(int64_t pitch) { return cute::make_stride(pitch, cute::Int<1>{}, int64_t{0}); }

// Whether the fused kernels take these tensors: bf16, contiguous, 16-byte rows and
// pointers, int-sized extents, on an sm_90 card.
bool fits(std::initializer_list<const Tensor*> tensors, int64_t m, int64_t n, int64_t k) {
  for (const Tensor* t : tensors)
    if (t->dtype() != DType::bf16 || !t->is_contiguous() || !aligned16(t->raw())) return false;
  constexpr int64_t kMost = std::numeric_limits<int>::max();
  if (m == 0 || n % kAlignment != 0 || k % kAlignment != 0 || m > kMost || 2 * n > kMost || k > kMost) return false;
  return glu_epilogues((*tensors.begin())->device().index);
}

// The kernel's checks, before anything runs; false leaves the caller to compose.
template <class Gemm>
bool implementable(const typename Gemm::Arguments& args) {
  return Gemm::can_implement(args) == cutlass::Status::kSuccess && Gemm::get_workspace_size(args) == 0;
}

template <class Gemm>
void launch(const typename Gemm::Arguments& args, const char* op, const Shape& shape) {
  Gemm gemm;
  AMBER_CHECK(gemm.initialize(args, nullptr, current_stream()) == cutlass::Status::kSuccess, op,
              ": CUTLASS could not set up its product for shape ", shape);
  AMBER_CHECK(gemm.run(current_stream()) == cutlass::Status::kSuccess, op, ": CUTLASS's product did not launch");
  check_launch(op, shape);
}

template <class Act>
bool forward(const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& h) {
  using P = Product<typename Trees<Act>::Forward, cutlass::layout::ColumnMajor>;
  const int m = static_cast<int>(x.size(0)), k = static_cast<int>(x.size(1)), n = static_cast<int>(h.size(1));
  const RowStride pair_rows = rows_apart(2 * int64_t{n});
  const Bf16* gate = in(gate_up);
  typename P::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {in(x), cutlass::make_cute_packed_stride(typename P::Kernel::StrideA{}, {m, k, 1}), in(w) + int64_t{n} * k,
       cutlass::make_cute_packed_stride(typename P::Kernel::StrideB{}, {n, k, 1})},
      {{{{{}, {}, {}}, {out(h), rows_apart(n)}}, {}, {}}, gate, pair_rows, out(gate_up) + n, pair_rows}};
  if (!implementable<typename P::Gemm>(args)) return false;
  Tensor gate_half = gate_up.slice(1, 0, n);
  gemm(x, false, w.slice(0, 0, n), true, gate_half, 1.0, 0.0);
  launch<typename P::Gemm>(args, "glu_linear_forward", gate_up.shape());
  return true;
}

template <class Act>
bool backward(const Tensor& dy, const Tensor& w_down, const Tensor& gate_up, Tensor& dgate_up) {
  using P = Product<typename Trees<Act>::Backward, RowMajor>;
  const int m = static_cast<int>(dy.size(0)), k = static_cast<int>(dy.size(1)), n = static_cast<int>(w_down.size(1));
  const RowStride pair_rows = rows_apart(2 * int64_t{n});
  typename P::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {in(dy), cutlass::make_cute_packed_stride(typename P::Kernel::StrideA{}, {m, k, 1}), in(w_down),
       cutlass::make_cute_packed_stride(typename P::Kernel::StrideB{}, {n, k, 1})},
      {{{{{}, {}, {}}, {out(dgate_up) + n, pair_rows}}, {}, {}, {in(gate_up) + n, Bf16(0), pair_rows}, {}},
       in(gate_up),
       pair_rows,
       out(dgate_up),
       pair_rows}};
  if (!implementable<typename P::Gemm>(args)) return false;
  launch<typename P::Gemm>(args, "glu_linear_backward_input", dgate_up.shape());
  return true;
}

}  // namespace

bool glu_epilogues(int device) { return compute_major(device) == 9; }

bool glu_linear_forward(Glu glu, const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& h) {
  // A few rows (a decode step) fill a sliver of these tiles: the few-rows product and the
  // activation's own pass are faster there.
  if (x.size(0) <= kFewRowsMax) return false;
  if (!fits({&x, &w, &gate_up, &h}, x.size(0), h.size(1), x.size(1))) return false;
  return glu == Glu::swiglu ? forward<Silu>(x, w, gate_up, h) : forward<GeluTanh>(x, w, gate_up, h);
}

bool glu_linear_backward_input(Glu glu, const Tensor& dy, const Tensor& w_down, const Tensor& gate_up,
                               Tensor& dgate_up) {
  if (!fits({&dy, &w_down, &gate_up, &dgate_up}, dy.size(0), w_down.size(1), dy.size(1))) return false;
  return glu == Glu::swiglu ? backward<Silu>(dy, w_down, gate_up, dgate_up)
                            : backward<GeluTanh>(dy, w_down, gate_up, dgate_up);
}

#else

bool glu_linear_forward(Glu, const Tensor&, const Tensor&, Tensor&, Tensor&) { return false; }
bool glu_linear_backward_input(Glu, const Tensor&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool glu_epilogues(int) { return false; }

#endif

}  // namespace amber::cuda
