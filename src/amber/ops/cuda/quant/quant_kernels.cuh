// The FP8 quantizers' device building blocks, shared by the quantizer kernels
// (quant.cu) and the kernels that quantize what they compute (glu_quant.cu): bounded
// row loads and code stores, a 1x128 block's scale and codes (the CPU oracle's bits:
// quant.cu's header says how), and the rows-and-columns encoding of a 128x128 tile
// held in shared memory.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/quant/quant_codes.h"
#include "amber/ops/quant.h"

namespace amber::cuda::quant_kernels {

namespace qc = quant_codes;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = static_cast<int>(kFp8Block);
constexpr uint8_t kE4m3Nan = 0x7F;
constexpr uint32_t kFloatNan = 0x7FC00000u;  // std::numeric_limits<float>::quiet_NaN()'s bits
static_assert(kTile == 4 * 32, "a warp covers one 128-wide block, four elements a lane");
static_assert(kMxBlock == 4 * 8, "four threads cover one MX block, eight elements each");

// N elements p[0..N-1] of a row with `left` elements from p on (<= 0: past the row's
// end), zeros past it. kVec: the row width is a multiple of N and p is aligned to N
// elements or 16 bytes, whichever is less (wider rows load in 16-byte parts).
template <class T, bool kVec, int N>
__device__ __forceinline__ void load_row(const T* p, int64_t left, float (&v)[N]) {
  if (kVec) {
    constexpr int n = N * sizeof(T) > 16 ? 16 / static_cast<int>(sizeof(T)) : N;  // elements a load
#pragma unroll
    for (int k = 0; k < N / n; ++k) {
      float part[n];
      if (left > 0) {
        load_f32<T, n>(p + k * n, part);
      } else {
#pragma unroll
        for (int e = 0; e < n; ++e) part[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < n; ++e) v[k * n + e] = part[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = e < left ? to_f32(p[e]) : 0.0f;
  }
}

// The codes q of N elements at p, as load_row reads them (kVec: one store of N bytes).
template <bool kVec, int N>
__device__ __forceinline__ void store_row(uint8_t* p, int64_t left, const uint8_t (&q)[N]) {
  if (kVec) {
    if (left <= 0) return;
    Vec<uint32_t, N / 4> words;
#pragma unroll
    for (int k = 0; k < N / 4; ++k)
      words.v[k] = q[4 * k] | (q[4 * k + 1] << 8) | (q[4 * k + 2] << 16) | (static_cast<uint32_t>(q[4 * k + 3]) << 24);
    *reinterpret_cast<Vec<uint32_t, N / 4>*>(p) = words;
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e)
      if (e < left) p[e] = q[e];
  }
}

// The largest |x| of v as float bits, folded into m: NaN and infinities order above
// every finite value, so a block is finite exactly when its maximum is below an
// infinity's bits (one integer max an element, no test of its own for finiteness).
template <int N>
__device__ __forceinline__ uint32_t abs_bits_max(const float (&v)[N], uint32_t m) {
#pragma unroll
  for (int e = 0; e < N; ++e) m = max(m, float_bits(v[e]) & 0x7FFFFFFFu);
  return m;
}

// The same over kLanes neighbouring lanes (xor shuffles within aligned groups).
template <int kLanes>
__device__ __forceinline__ uint32_t lanes_max(uint32_t m) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

constexpr uint32_t kInfinityBits = 0x7F800000u;

// scale = amax / 448; 1 when that is zero; NaN for a block holding NaN or an infinity.
__device__ __forceinline__ float fp8_scale(float amax, bool finite) {
  if (!finite) return bits_float(kFloatNan);
  const float s = qc::fp8_scale_quotient(amax);
  return s == 0.0f ? 1.0f : s;
}

// The e4m3 codes of a and b (a in the low byte). From sm_89 the hardware conversion:
// round to nearest even, finite saturation to +-448, the bits of qc::e4m3_code for
// every finite input (the quantizers never encode NaN or an infinity: such a block
// takes NaN codes whole).
__device__ __forceinline__ uint32_t e4m3_pair(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
#else
  return qc::e4m3_code(a) | (static_cast<uint32_t>(qc::e4m3_code(b)) << 8);
#endif
}

// Division by a block's scale with the codes of __fdiv_rn: for bf16 and f16 sources
// through the scale's reciprocal (quant_codes.h proves the codes equal for scales from
// kReciprocalMinScale on), else by IEEE division. Uniform across the block.
struct ScaleDivisor {
  float scale, reciprocal;
  bool by_reciprocal;
  __device__ float operator()(float v) const {
    return by_reciprocal ? qc::divide_by_reciprocal(v, scale, reciprocal) : __fdiv_rn(v, scale);
  }
};

template <class T>
__device__ __forceinline__ ScaleDivisor scale_divisor(float scale) {
  const bool by_reciprocal = sizeof(T) == 2 && scale >= qc::kReciprocalMinScale;
  return {scale, by_reciprocal ? __frcp_rn(scale) : 0.0f, by_reciprocal};
}

template <int N>
__device__ __forceinline__ void encode(const float (&v)[N], const ScaleDivisor& divide, bool finite,
                                       uint8_t (&q)[N]) {
  if (!finite) {
#pragma unroll
    for (int e = 0; e < N; ++e) q[e] = kE4m3Nan;
    return;
  }
#pragma unroll
  for (int e = 0; e < N; e += 2) {
    const uint32_t pair = e4m3_pair(divide(v[e]), divide(v[e + 1]));
    q[e] = static_cast<uint8_t>(pair & 0xFFu);
    q[e + 1] = static_cast<uint8_t>(pair >> 8);
  }
}

// A 1x128 block of T held by kLanes neighbouring lanes (a warp: four elements a lane;
// half a warp: eight): the lane's codes, and the block's scale from the lanes' amax.
template <class T, int kLanes, int N>
__device__ __forceinline__ float block_codes(const float (&v)[N], uint8_t (&q)[N]) {
  static_assert(kLanes * N == kTile, "the lanes hold one block");
  const uint32_t amax = lanes_max<kLanes>(abs_bits_max(v, 0u));
  const bool finite = amax < kInfinityBits;
  const float scale = fp8_scale(bits_float(amax), finite);
  encode(v, scale_divisor<T>(scale), finite, q);
  return scale;
}

// A 128x128 tile of a 16-bit source in shared memory as column pairs (one word each).
// Pair p of row r sits at word p ^ (r / 4) of the row, so the 32 rows 4l + e a column
// read meets (lane l, fixed e) lie in 32 banks.
template <class T>
struct alignas(16) PairTile {
  static_assert(sizeof(T) == 2, "a column pair is one shared-memory word");
  static constexpr int kPairs = kTile / 2;
  Vec<T, 2> words[kTile][kPairs];
  __device__ Vec<T, 2>& at(int r, int pair) { return words[r][pair ^ (r / 4 % kPairs)]; }
};

// Where a tile's codes go: the rows' (1x128 blocks along cols) and the columns' (rows
// of the transposed matrix, 1x128 blocks along rows), each with its scales.
struct RowsColumnsOut {
  uint8_t* values;
  float* scales;
  Fp8ScaleStrides strides;
  uint8_t* t_values;
  float* t_scales;
  Fp8ScaleStrides t_strides;
  bool long_columns;  // rows % 8 == 0 and t_values 8-byte aligned: a lane's column codes leave as one 8-byte word
};

// The outputs of quantize_fp8_rows_and_columns (ops/quant.h) for a source of `rows` rows.
inline RowsColumnsOut rows_columns_out(Tensor& values, Tensor& scales, Tensor& t_values, Tensor& t_scales,
                                       int64_t rows) {
  return {static_cast<uint8_t*>(values.raw()),
          static_cast<float*>(scales.raw()),
          fp8_scale_strides(scales),
          static_cast<uint8_t*>(t_values.raw()),
          static_cast<float*>(t_scales.raw()),
          fp8_scale_strides(t_scales),
          rows % 8 == 0 && reinterpret_cast<uintptr_t>(t_values.raw()) % 8 == 0};
}

// The tile at (row_block, col_block) of a [rows, cols] matrix (cols % 8 == 0, values
// 8-byte aligned; elements past the matrix zero in the tile), encoded by the block's
// kThreads threads, half a warp per 128-block and eight elements a lane, so that a
// block's reduction and scale are paid once per eight elements: warp w takes the
// tile's rows 16w .. 16w + 15, two at a time (lane l of a half their columns 8l ..
// 8l + 7, one 16-byte read), then the column pairs 8w .. 8w + 7, two at a time (lane l
// the rows 8l .. 8l + 7 of a pair's two columns, whose codes leave as 8-byte words).
// Both phases read the tile without bank conflicts. The caller synchronizes the block
// before (the tile written) and after (before it is overwritten).
template <class T>
__device__ __forceinline__ void encode_tile_rows_and_columns(PairTile<T>& tile, const RowsColumnsOut& out,
                                                             int64_t rows, int64_t cols, int64_t row_block,
                                                             int64_t col_block) {
  constexpr int kRowsPerWarp = kTile / kWarps, kPairsPerWarp = PairTile<T>::kPairs / kWarps;
  const int half = threadIdx.x % 32 / 16, lane = threadIdx.x % 16, warp = threadIdx.x / 32;
  const int64_t r0 = row_block * kTile, c0 = col_block * kTile;
  for (int j = 0; j < kRowsPerWarp; j += 2) {
    const int rl = warp * kRowsPerWarp + j + half;
    const int64_t r = r0 + rl;
    if (r0 + warp * kRowsPerWarp + j >= rows) break;  // warp-uniform: the pair's first row is past the end
    // Pairs 4l .. 4l + 3 sit in the aligned 4-word group l ^ (q / 4) of the row (q = rl / 4,
    // the same for both rows), in the order k ^ (q % 4).
    const int q = rl / 4 % PairTile<T>::kPairs;
    const Vec<Vec<T, 2>, 4> group = *reinterpret_cast<const Vec<Vec<T, 2>, 4>*>(&tile.words[rl][4 * (lane ^ (q / 4))]);
    float v[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const Vec<T, 2> pair = group.v[k ^ (q % 4)];
      v[2 * k] = to_f32(pair.v[0]);
      v[2 * k + 1] = to_f32(pair.v[1]);
    }
    uint8_t codes[8];
    const float scale = block_codes<T, 16>(v, codes);
    if (r < rows) {
      store_row<true, 8>(out.values + r * cols + c0 + 8 * lane, cols - c0 - 8 * lane, codes);
      if (lane == 0) out.scales[r * out.strides.row + col_block * out.strides.col] = scale;
    }
  }
  const int64_t r = r0 + 8 * lane;
  for (int j = 0; j < kPairsPerWarp; j += 2) {
    const int p = warp * kPairsPerWarp + j + half;
    const int64_t col = c0 + 2 * p;
    if (c0 + 2 * (warp * kPairsPerWarp + j) >= cols) break;  // warp-uniform; an even cols keeps pairs whole
    float lo[8], hi[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const Vec<T, 2> pair = tile.at(8 * lane + e, p);
      lo[e] = to_f32(pair.v[0]);
      hi[e] = to_f32(pair.v[1]);
    }
    uint8_t q_lo[8], q_hi[8];
    const float scale_lo = block_codes<T, 16>(lo, q_lo), scale_hi = block_codes<T, 16>(hi, q_hi);
    if (col < cols) {
      if (out.long_columns) {
        store_row<true, 8>(out.t_values + col * rows + r, rows - r, q_lo);
        store_row<true, 8>(out.t_values + (col + 1) * rows + r, rows - r, q_hi);
      } else {
        store_row<false, 8>(out.t_values + col * rows + r, rows - r, q_lo);
        store_row<false, 8>(out.t_values + (col + 1) * rows + r, rows - r, q_hi);
      }
      if (lane == 0) {
        out.t_scales[col * out.t_strides.row + row_block * out.t_strides.col] = scale_lo;
        out.t_scales[(col + 1) * out.t_strides.row + row_block * out.t_strides.col] = scale_hi;
      }
    }
  }
}

}  // namespace amber::cuda::quant_kernels
