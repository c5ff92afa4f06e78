// The m-grouped forward products with MXFP4 weights (the gpt-oss storage: e2m1 pairs
// in bytes, one e8m0 scale per 32 along K) and bf16 activations, for the expert batches
// of decoding and small steps, where the weights' bytes set the time. Hopper has no FP4
// MMA, so the weights are dequantized in registers straight into mma.sync m16n8k16
// operand fragments (exact: an e2m1 value times a power of two is a bf16), never
// through shared memory.
//
// A block of four warps takes one work item: 64 weight rows (16 a warp; SwiGLU: 32 gate
// rows and the 32 up rows of the same outputs) against up to 64 of an expert's rows
// (eight n8 tiles). The items are walked from the device plan (grouped_tiles.cuh), so
// the launch is sized by the buffers and replays in a graph with any routing; an expert
// with more than 64 rows is several items that read its weights again.
//
// K is walked 32 at a time, one scale block. Within a block the reduction order is
// permuted so that a lane's eight values of a row are adjacent: lane t of a quad reads
// 4 code bytes (elements 8t .. 8t+7) and the activation's elements 8t .. 8t+7 (16 bytes)
// and places them at the fragment positions the two k16 products give that lane (2t,
// 2t+1, 2t+8, 2t+9 and 16 more); the weight and the activation share the permutation,
// so the sum is unchanged but for its fp32 order.
#include "amber/ops/cuda/grouped/grouped_m.cuh"
#include "amber/ops/cuda/quant/quant_codes.h"

namespace amber::cuda {
namespace {

using grouped::Epilogue;
using grouped::Plan;

constexpr int kThreads = 128;
constexpr int kItemRows = 64;     // activation rows of an item: eight n8 tiles
constexpr int kItemWeights = 64;  // weight rows of an item: four warps of 16
constexpr int kBlockK = 32;       // one e8m0 scale
constexpr int kAhead = 4;         // scale blocks whose weights are loaded ahead of their products

struct Mxfp4Args {
  const int* offsets;
  int experts, rows, n, k;     // rows of x and y; n weight rows per expert; k reduction
  const __nv_bfloat16* x;      // [rows, k]
  const uint8_t* codes;        // [experts, n, k / 2]
  const uint8_t* scales;       // [experts, n, k / 32]
  __nv_bfloat16* y;            // [rows, y_cols]: n, or n / 2 for SwiGLU
  __nv_bfloat16* gate_up;      // SwiGLU: [rows, n], or null
  const float* row_scale;      // row_scale epilogue: [rows]
};

// A code byte's two e2m1 values times the block's scale, as the bf16 pair of an operand
// register (the low nibble first, the element order of ops/quant.h).
__device__ __forceinline__ uint32_t dequantize_pair(uint32_t byte, float scale) {
  return pack2<__nv_bfloat16>(quant_codes::e2m1_value(static_cast<uint8_t>(byte & 0xFu)) * scale,
                              quant_codes::e2m1_value(static_cast<uint8_t>(byte >> 4)) * scale);
}

template <Epilogue kE>
__global__ void __launch_bounds__(kThreads) grouped_mxfp4_kernel(Mxfp4Args a) {
  __shared__ Plan plan;
  __shared__ float up_half[2][16][kItemRows + 1];  // SwiGLU: the up rows' products, by warp pair
  const int n_tiles = a.n / kItemWeights;
  grouped::make_plan(plan, a.offsets, a.experts, a.rows,
                     [n_tiles](int rows) { return (rows + kItemRows - 1) / kItemRows * n_tiles; });
  const int items = plan.first[a.experts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t code_pitch = a.k / 2, scale_pitch = a.k / kBlockK;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const int e = grouped::expert_of(plan, a.experts, w), r = w - plan.first[e];
    const int groups = (plan.count[e] + kItemRows - 1) / kItemRows, n_tile = r / groups, group = r % groups;
    const int row0 = plan.begin[e] + group * kItemRows, valid = min(kItemRows, plan.count[e] - group * kItemRows);
    // This warp's 16 weight rows: SwiGLU's warps 0-1 the gate rows of the item's 32
    // outputs, warps 2-3 the up rows of the same outputs.
    const int weight0 = kE == Epilogue::swiglu ? (warp / 2) * (a.n / 2) + n_tile * 32 + (warp % 2) * 16
                                               : n_tile * kItemWeights + warp * 16;
    const int64_t wrow = static_cast<int64_t>(e) * a.n + weight0 + g;
    const uint8_t* codes0 = a.codes + wrow * code_pitch + 4 * t;
    const uint8_t* codes1 = codes0 + 8 * code_pitch;
    const uint8_t* scales0 = a.scales + wrow * scale_pitch;
    const uint8_t* scales1 = scales0 + 8 * scale_pitch;
    const int tiles = (valid + 7) / 8;  // n8 tiles holding rows
    float acc[8][4] = {};
    const int k_blocks = a.k / kBlockK;
    // kAhead scale blocks' codes and scales are loaded before any is used, so that
    // enough weight bytes are in flight to stream them at the memory's rate.
    for (int kb0 = 0; kb0 < k_blocks; kb0 += kAhead) {
      uint32_t c0[kAhead], c1[kAhead];
      float s0[kAhead], s1[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int kb = min(kb0 + u, k_blocks - 1);
        c0[u] = *reinterpret_cast<const uint32_t*>(codes0 + kb * (kBlockK / 2));
        c1[u] = *reinterpret_cast<const uint32_t*>(codes1 + kb * (kBlockK / 2));
        s0[u] = quant_codes::e8m0_value(scales0[kb]);
        s1[u] = quant_codes::e8m0_value(scales1[kb]);
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int kb = kb0 + u;
        if (kb >= k_blocks) break;
        // Fragments of the two k16 products: rows g and g + 8, code bytes 0-1 then 2-3.
        const uint32_t first[4] = {dequantize_pair(c0[u] & 0xFFu, s0[u]), dequantize_pair(c1[u] & 0xFFu, s1[u]),
                                   dequantize_pair((c0[u] >> 8) & 0xFFu, s0[u]),
                                   dequantize_pair((c1[u] >> 8) & 0xFFu, s1[u])};
        const uint32_t second[4] = {dequantize_pair((c0[u] >> 16) & 0xFFu, s0[u]),
                                    dequantize_pair((c1[u] >> 16) & 0xFFu, s1[u]), dequantize_pair(c0[u] >> 24, s0[u]),
                                    dequantize_pair(c1[u] >> 24, s1[u])};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j >= tiles) break;
          const int local = j * 8 + g;
          uint4 xb = make_uint4(0, 0, 0, 0);
          if (local < valid)
            xb = *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(row0 + local) * a.k + kb * kBlockK + 8 * t);
          mma_16816<__nv_bfloat16>(acc[j], first, xb.x, xb.y);
          mma_16816<__nv_bfloat16>(acc[j], second, xb.z, xb.w);
        }
      }
    }
    // acc[j]: weight rows g (0-1) and g + 8 (2-3), activation rows j * 8 + 2t, 2t + 1.
    if constexpr (kE == Epilogue::swiglu) {
      if (warp >= 2) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) up_half[warp - 2][g + 8 * (i / 2)][j * 8 + 2 * t + i % 2] = acc[j][i];
      }
      __syncthreads();
      if (warp < 2) {
        const int half = a.n / 2;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int local = j * 8 + 2 * t + i % 2, out = n_tile * 32 + warp * 16 + g + 8 * (i / 2);
            if (local >= valid) continue;
            const float gate = acc[j][i], up = up_half[warp][g + 8 * (i / 2)][local];
            const int64_t row = row0 + local;
            if (a.gate_up != nullptr) {
              a.gate_up[row * a.n + out] = __float2bfloat16_rn(gate);
              a.gate_up[row * a.n + half + out] = __float2bfloat16_rn(up);
            }
            a.y[row * half + out] = __float2bfloat16_rn(Silu::value(gate) * up);
          }
      }
      __syncthreads();  // up_half is the next item's
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int local = j * 8 + 2 * t + i % 2;
          if (local >= valid) continue;
          const int64_t row = row0 + local;
          const float scale = kE == Epilogue::row_scale ? a.row_scale[row] : 1.0f;
          a.y[row * a.n + weight0 + g + 8 * (i / 2)] = __float2bfloat16_rn(acc[j][i] * scale);
        }
    }
  }
}

// The operands' checks, and the arguments both products start from.
Mxfp4Args mxfp4_args(const Tensor& x, const Tensor& codes, const Tensor& scales, const Tensor& offsets,
                     const char* op) {
  grouped::check_supported(x, static_cast<int>(codes.size(0)), op);
  AMBER_CHECK(x.dtype() == DType::bf16, op, ": the GPU takes bf16 activations beside MXFP4 weights, got ",
              dtype_name(x.dtype()));
  const int64_t k = x.size(1), n = codes.size(1);
  AMBER_CHECK(k % kBlockK == 0 && n % kItemWeights == 0, op, ": reduction length ", k, " must be a multiple of ",
              kBlockK, " and the experts' ", n, " weight rows a multiple of ", kItemWeights, " on the GPU");
  return Mxfp4Args{static_cast<const int*>(offsets.raw()),
                   static_cast<int>(codes.size(0)),
                   static_cast<int>(x.size(0)),
                   static_cast<int>(n),
                   static_cast<int>(k),
                   static_cast<const __nv_bfloat16*>(x.raw()),
                   static_cast<const uint8_t*>(codes.raw()),
                   static_cast<const uint8_t*>(scales.raw()),
                   nullptr,
                   nullptr,
                   nullptr};
}

template <Epilogue kE>
void launch(const Mxfp4Args& a, const Tensor& x, const char* op) {
  const int64_t bound = ((int64_t{a.rows} + kItemRows - 1) / kItemRows + a.experts) * (a.n / kItemWeights);
  if (bound == 0 || a.rows == 0) return;
  // Enough resident warps to keep the weights streaming: eight blocks an SM.
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(bound, int64_t{8} * sm_count()));
  grouped_mxfp4_kernel<kE><<<blocks, kThreads, 0, current_stream()>>>(a);
  check_launch(op, x.shape());
}

}  // namespace

void grouped_gemm_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales, const Tensor& offsets,
                                Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward_mxfp4";
  Mxfp4Args a = mxfp4_args(x, codes, scales, offsets, op);
  AMBER_CHECK(y.dtype() == DType::bf16, op, ": the GPU writes bf16, got ", dtype_name(y.dtype()));
  a.y = static_cast<__nv_bfloat16*>(y.raw());
  if (row_scale.defined()) {
    a.row_scale = static_cast<const float*>(row_scale.raw());
    launch<Epilogue::row_scale>(a, x, op);
  } else {
    launch<Epilogue::plain>(a, x, op);
  }
}

void grouped_gemm_swiglu_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales,
                                       const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward_mxfp4";
  Mxfp4Args a = mxfp4_args(x, codes, scales, offsets, op);
  AMBER_CHECK(h.dtype() == DType::bf16 && (!gate_up.defined() || gate_up.dtype() == DType::bf16), op,
              ": the GPU writes bf16, got ", dtype_name(h.dtype()));
  a.y = static_cast<__nv_bfloat16*>(h.raw());
  a.gate_up = gate_up.defined() ? static_cast<__nv_bfloat16*>(gate_up.raw()) : nullptr;
  launch<Epilogue::swiglu>(a, x, op);
}

}  // namespace amber::cuda
