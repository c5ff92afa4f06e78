// The m-grouped forward products with MXFP4 weights (the gpt-oss storage: e2m1 pairs
// in bytes, one e8m0 scale per 32 along K) and bf16 activations, for the expert batches
// of decoding and small steps, where the weights' bytes set the time. Hopper has no FP4
// MMA, so the weights are dequantized in registers straight into mma.sync m16n8k16
// operand fragments (exact: an e2m1 value times a power of two is a bf16), never
// through shared memory: at these sizes the kernel is a stream of weight bytes, and
// each lane's 16-byte loads go from memory to the tensor cores with nothing between.
//
// A block of four warps takes one work item: 64 weight rows (16 a warp; SwiGLU: 32 gate
// rows and the 32 up rows of the same outputs) against up to 32 of an expert's rows
// (four n8 tiles). The items are walked from the device plan (grouped_tiles.cuh), so
// the launch is sized by the buffers and replays in a graph with any routing; an expert
// with more than 32 rows is several items that read its weights again.
//
// K is walked 128 at a time, a span of four scale blocks: lane t of a quad owns block t
// of the span, the 16 code bytes of its two rows (g and g + 8) in one load each and
// one scale each. Within the span the reduction order is permuted so that each of the
// eight k16 products takes, from every lane, elements of that lane's own block: a code
// word's nibbles i and i + 4 become one operand register (both sit 16 bits apart, so
// one shift and mask serve the pair), and the activations are loaded whole and paired
// the same way. Weight and activation share the permutation, so the sum is unchanged
// but for its fp32 order. A span past the end of K (2880 is 22.5 spans) leaves its last
// lanes' blocks zero, weights and activations alike.
#include "amber/ops/cuda/grouped/grouped_m.cuh"

namespace amber::cuda {
namespace {

using grouped::Epilogue;
using grouped::Plan;

constexpr int kThreads = 128;
constexpr int kItemRows = 32;     // activation rows of an item: four n8 tiles
constexpr int kTiles = kItemRows / 8;
constexpr int kItemWeights = 64;  // weight rows of an item: four warps of 16
constexpr int kBlockK = 32;       // one e8m0 scale
constexpr int kSpanBlocks = 4;    // scale blocks of a span: one a lane of each quad
constexpr int kAhead = 2;         // spans whose codes are loaded before the current one's products

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

// A lane's share of a span: the code bytes of its block in rows g and g + 8, and their
// e8m0 scales (zero past the end of K).
struct SpanCodes {
  uint4 codes[2];
  uint32_t scales[2];
};

__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t bits) {
  __nv_bfloat162 v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

__device__ __forceinline__ uint32_t as_bits(__nv_bfloat162 v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Weights are read once per item, so they bypass L1 and leave it to the activations,
// which the block's four warps and its next items read again.
__device__ __forceinline__ uint4 load_streaming(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// bf16 operand registers from a word of eight e2m1 codes: register i holds nibbles i
// and i + 4. A code's exponent and mantissa bits placed at a bf16's lowest exponent
// and highest mantissa bits are a bf16 (subnormal for the code 0.5) that is exactly
// 2^-126 times the code's value, so the scale times 2^126, a power of two, makes the
// product exact. Scales above 2^1 would overflow that factor in bf16; they are applied
// in two factors, which every lane of the warp then takes.
__device__ __forceinline__ void dequantize_word(uint32_t c, uint32_t factor, uint32_t extra, bool two_factors,
                                                uint32_t (&r)[4]) {
  constexpr uint32_t kMagnitude = 0x01C001C0u, kSign = 0x80008000u;
  r[0] = ((c << 6) & kMagnitude) | ((c << 12) & kSign);
  r[1] = ((c << 2) & kMagnitude) | ((c << 8) & kSign);
  r[2] = ((c >> 2) & kMagnitude) | ((c << 4) & kSign);
  r[3] = ((c >> 6) & kMagnitude) | (c & kSign);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 v = __hmul2(as_bf162(r[i]), as_bf162(factor));
    if (two_factors) v = __hmul2(v, as_bf162(extra));
    r[i] = as_bits(v);
  }
}

// The bf16 pair 2^e, 2^e as bit patterns, for a biased exponent field e in 1 .. 254.
__device__ __forceinline__ uint32_t power_of_two_pair(uint32_t e) { return (e << 7) * 0x00010001u; }

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
  const int k_blocks = a.k / kBlockK, spans = (k_blocks + kSpanBlocks - 1) / kSpanBlocks;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const int e = grouped::expert_of(plan, a.experts, w), r = w - plan.first[e];
    const int groups = (plan.count[e] + kItemRows - 1) / kItemRows, n_tile = r / groups, group = r % groups;
    const int row0 = plan.begin[e] + group * kItemRows, valid = min(kItemRows, plan.count[e] - group * kItemRows);
    // This warp's 16 weight rows: SwiGLU's warps 0-1 the gate rows of the item's 32
    // outputs, warps 2-3 the up rows of the same outputs.
    const int weight0 = kE == Epilogue::swiglu ? (warp / 2) * (a.n / 2) + n_tile * 32 + (warp % 2) * 16
                                               : n_tile * kItemWeights + warp * 16;
    const int64_t wrow = static_cast<int64_t>(e) * a.n + weight0 + g;
    const uint8_t* codes0 = a.codes + wrow * code_pitch + t * (kBlockK / 2);
    const uint8_t* scales0 = a.scales + wrow * scale_pitch + t;
    const int tiles = (valid + 7) / 8;  // n8 tiles holding rows
    // The lane's activation rows, one per tile (clamped: rows past `valid` are loaded
    // as zeros), from the start of its block.
    const __nv_bfloat16* x0 = a.x + static_cast<int64_t>(row0 + g) * a.k + t * kBlockK;
    auto load_span = [&](int span) {
      SpanCodes s{};
      const int kb = span * kSpanBlocks;
      if (kb + t < k_blocks) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          s.codes[h] = load_streaming(codes0 + h * 8 * code_pitch + kb * (kBlockK / 2));
          s.scales[h] = scales0[h * 8 * scale_pitch + kb];
        }
      }
      return s;
    };
    float acc[kTiles][4] = {};
    // The products of one span, from its codes.
    auto consume = [&](const SpanCodes& cur, int span) {
      const bool live = span * kSpanBlocks + t < k_blocks;
      uint32_t factor[2], extra[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        factor[h] = power_of_two_pair(min(cur.scales[h], 128u) + 126u);
        extra[h] = power_of_two_pair(max(cur.scales[h], 128u) - 1u);
      }
      const bool two_factors = __any_sync(0xFFFFFFFFu, cur.scales[0] > 128u || cur.scales[1] > 128u);
      // Rows g and g + 8: four words of eight codes, four registers each.
      uint32_t wg[2][4][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t words[4] = {cur.codes[h].x, cur.codes[h].y, cur.codes[h].z, cur.codes[h].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) dequantize_word(words[q], factor[h], extra[h], two_factors, wg[h][q]);
      }
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        if (j >= tiles) break;
        uint4 xs[4] = {};
        if (live && j * 8 + g < valid) {
          const uint4* src = reinterpret_cast<const uint4*>(x0 + static_cast<int64_t>(j * 8) * a.k +
                                                            span * kSpanBlocks * kBlockK);
#pragma unroll
          for (int q = 0; q < 4; ++q) xs[q] = src[q];
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          // Word q's codes i and i + 4 against activations 8q + i and 8q + i + 4: the
          // product over registers 0-1 takes elements 0, 4, 1, 5; over 2-3, 2, 6, 3, 7.
          const uint32_t a01[4] = {wg[0][q][0], wg[1][q][0], wg[0][q][1], wg[1][q][1]};
          const uint32_t a23[4] = {wg[0][q][2], wg[1][q][2], wg[0][q][3], wg[1][q][3]};
          mma_16816<__nv_bfloat16>(acc[j], a01, __byte_perm(xs[q].x, xs[q].z, 0x5410),
                                   __byte_perm(xs[q].x, xs[q].z, 0x7632));
          mma_16816<__nv_bfloat16>(acc[j], a23, __byte_perm(xs[q].y, xs[q].w, 0x5410),
                                   __byte_perm(xs[q].y, xs[q].w, 0x7632));
        }
      }
    };
    // kAhead spans' codes are in flight while a span's products run: a ring of
    // registers, so its slots are named at compile time.
    SpanCodes ring[kAhead];
#pragma unroll
    for (int d = 0; d < kAhead; ++d)
      if (d < spans) ring[d] = load_span(d);
    for (int span0 = 0; span0 < spans; span0 += kAhead) {
#pragma unroll
      for (int d = 0; d < kAhead; ++d) {
        const int span = span0 + d;
        if (span >= spans) break;
        const SpanCodes cur = ring[d];
        if (span + kAhead < spans) ring[d] = load_span(span + kAhead);
        consume(cur, span);
      }
    }
    // acc[j]: weight rows g (0-1) and g + 8 (2-3), activation rows j * 8 + 2t, 2t + 1.
    if constexpr (kE == Epilogue::swiglu) {
      if (warp >= 2) {
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) up_half[warp - 2][g + 8 * (i / 2)][j * 8 + 2 * t + i % 2] = acc[j][i];
      }
      __syncthreads();
      if (warp < 2) {
        const int half = a.n / 2;
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
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
      for (int j = 0; j < kTiles; ++j)
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
