// CUDA quantizers: a warp per 1x128 row block, a 256-thread block per 128x128 tile (its
// transposed codes through shared memory), a 256-thread block per 128-row x 64-column
// panel for the column blocks, one per 128x128 tile for rows and columns in one pass,
// and four threads per 32-element MX block (MXFP4, MXFP8). Each reduces |x| to the
// block's amax, forms the scale with the CPU's fp32 operations (IEEE division, never
// the fast reciprocal), divides by it (16-bit sources: through its correctly rounded
// reciprocal, which quant_codes.h shows gives the same codes) and encodes with the
// hardware's e4m3 conversion (sm_89 on) or quant_codes.h's encoders, so the bits equal
// the CPU oracle's. Dequantizers are element-wise, four (FP8) or eight (MX) elements a
// thread.
#include <cuda_fp8.h>

#include <type_traits>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/quant/quant.h"
#include "amber/ops/cuda/quant/quant_codes.h"
#include "amber/ops/quant.h"

namespace amber::cuda {
namespace {

namespace qc = quant_codes;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = static_cast<int>(kFp8Block);
constexpr uint8_t kE4m3Nan = 0x7F;
constexpr uint32_t kFloatNan = 0x7FC00000u;  // std::numeric_limits<float>::quiet_NaN()'s bits
static_assert(kTile == 4 * 32, "a warp covers one 128-wide block, four elements a lane");
static_assert(kMxBlock == 4 * 8, "four threads cover one MX block, eight elements each");

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls fn(std::true_type{}) when the vectorised path applies, else fn(std::false_type{}).
template <class Fn>
void with_vec(bool vec, Fn&& fn) {
  if (vec)
    fn(std::true_type{});
  else
    fn(std::false_type{});
}

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
  const float s = __fdiv_rn(amax, 448.0f);
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
struct PairTile {
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
  bool word_columns;  // rows % 4 == 0 and t_values 4-byte aligned: a lane's column codes leave as one word
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
          rows % 4 == 0 && aligned_to(t_values.raw(), 4)};
}

// The tile at (row_block, col_block) of a [rows, cols] matrix (cols % 4 == 0, values
// 4-byte aligned; elements past the matrix zero in the tile), encoded by the block's
// kThreads threads: warp w the tile's rows 16w .. 16w + 15 as 1x128 row blocks (lane l
// their columns 4l .. 4l + 3), then the column pairs 8w .. 8w + 7 as blocks of the
// transpose, lane l the rows 4l .. 4l + 3 of each. The caller synchronizes the block
// before (the tile written) and after (before it is overwritten).
template <class T>
__device__ __forceinline__ void encode_tile_rows_and_columns(PairTile<T>& tile, const RowsColumnsOut& out,
                                                             int64_t rows, int64_t cols, int64_t row_block,
                                                             int64_t col_block) {
  constexpr int kRowsPerWarp = kTile / kWarps, kPairsPerWarp = PairTile<T>::kPairs / kWarps;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = row_block * kTile, c0 = col_block * kTile, c = c0 + lane * 4;
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int rl = warp * kRowsPerWarp + j;
    const int64_t r = r0 + rl;
    if (r >= rows) break;  // warp-uniform
    const Vec<T, 2> a = tile.at(rl, 2 * lane), b = tile.at(rl, 2 * lane + 1);
    const float v[4] = {to_f32(a.v[0]), to_f32(a.v[1]), to_f32(b.v[0]), to_f32(b.v[1])};
    uint8_t q[4];
    const float scale = block_codes<T, 32>(v, q);
    store_row<true, 4>(out.values + r * cols + c, cols - c, q);
    if (lane == 0) out.scales[r * out.strides.row + col_block * out.strides.col] = scale;
  }
  const int64_t r = r0 + 4 * lane;
  for (int p = warp * kPairsPerWarp; p < (warp + 1) * kPairsPerWarp; ++p) {
    const int64_t col = c0 + 2 * p;
    if (col >= cols) break;  // warp-uniform; an even cols puts col + 1 inside too
    float lo[4], hi[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Vec<T, 2> pair = tile.at(4 * lane + e, p);
      lo[e] = to_f32(pair.v[0]);
      hi[e] = to_f32(pair.v[1]);
    }
    uint8_t q_lo[4], q_hi[4];
    const float scale_lo = block_codes<T, 32>(lo, q_lo), scale_hi = block_codes<T, 32>(hi, q_hi);
    if (out.word_columns) {
      store_row<true, 4>(out.t_values + col * rows + r, rows - r, q_lo);
      store_row<true, 4>(out.t_values + (col + 1) * rows + r, rows - r, q_hi);
    } else {
      store_row<false, 4>(out.t_values + col * rows + r, rows - r, q_lo);
      store_row<false, 4>(out.t_values + (col + 1) * rows + r, rows - r, q_hi);
    }
    if (lane == 0) {
      out.t_scales[col * out.t_strides.row + row_block * out.t_strides.col] = scale_lo;
      out.t_scales[(col + 1) * out.t_strides.row + row_block * out.t_strides.col] = scale_hi;
    }
  }
}

// Half a warp per 1x128 row block, eight elements a lane; a warp takes 2 * kSteps
// blocks at once (blocks 2s + h of its group to half h), their loads all issued before
// the first is encoded, so each warp keeps 1 KB of a 16-bit source in flight.
// Warp-uniform loop over groups of blocks b = (row, column block).
template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads) quantize_fp8_rows_kernel(const T* x, uint8_t* values, float* scales,
                                                                     Fp8ScaleStrides strides, int64_t rows,
                                                                     int64_t cols) {
  constexpr int kSteps = 2, kGroup = 2 * kSteps;
  const int half = threadIdx.x % 32 / 16, half_lane = threadIdx.x % 16;
  const int64_t col_tiles = (cols + kTile - 1) / kTile, blocks = rows * col_tiles;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t g = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kGroup; g < blocks;
       g += warps * kGroup) {
    float v[kSteps][8];
    int64_t at[kSteps], left[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t b = g + 2 * s + half, c = b % col_tiles * kTile + half_lane * 8;
      at[s] = b / col_tiles * cols + c;
      left[s] = b < blocks ? cols - c : 0;
      load_row<T, kVec, 8>(x + at[s], left[s], v[s]);
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t b = g + 2 * s + half;
      uint8_t q[8];
      const float scale = block_codes<T, 16>(v[s], q);
      store_row<kVec, 8>(values + at[s], left[s], q);
      if (half_lane == 0 && b < blocks) scales[b / col_tiles * strides.row + b % col_tiles * strides.col] = scale;
    }
  }
}

// A tile's codes, `codes` [column][row] in shared memory, written as the rows of the
// transposed matrix [cols, rows] (4-byte words where whole, else bytes).
__device__ __forceinline__ void store_transposed_tile(const uint8_t (*codes)[kTile + 4], uint8_t* transposed,
                                                      int64_t rows, int64_t cols, int64_t r0, int64_t c0) {
  constexpr int kWords = kTile * kTile / 4;
  for (int word = threadIdx.x; word < kWords; word += kThreads) {
    const int cl = word / (kTile / 4), rl = word % (kTile / 4) * 4;
    const int64_t c = c0 + cl, r = r0 + rl;
    if (c >= cols || r >= rows) continue;
    uint8_t* out = transposed + c * rows + r;
    if (r + 4 <= rows && rows % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
      *reinterpret_cast<uint32_t*>(out) = *reinterpret_cast<const uint32_t*>(&codes[cl][rl]);
    } else {
      for (int e = 0; e < 4 && r + e < rows; ++e) out[e] = codes[cl][rl + e];
    }
  }
}

// One 128x128 tile per block iteration: warp w holds rows w, w + 8, ..., lane l the
// columns 4l .. 4l + 3, all 64 elements in registers between the reduction and the
// encoding. With `transposed` (2-D w), the codes also pass through shared memory to
// leave as rows of w^T.
template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_blocks_kernel(const T* w, uint8_t* values, float* scales, Fp8ScaleStrides strides,
                               uint8_t* transposed, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int kRowsPerWarp = kTile / kWarps;
  __shared__ uint32_t warp_max[kWarps];
  __shared__ __align__(16) uint8_t codes[kTile][kTile + 4];  // [column][row]: +4 keeps words aligned
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = batch * row_tiles * col_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t matrix = t / (row_tiles * col_tiles) * rows * cols;
    const int64_t r0 = t / col_tiles % row_tiles * kTile + warp, c = t % col_tiles * kTile + lane * 4;
    float v[kRowsPerWarp][4];
    uint32_t amax = 0;
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int64_t r = r0 + j * kWarps;
      load_row<T, kVec, 4>(w + matrix + r * cols + c, r < rows ? cols - c : 0, v[j]);
      amax = abs_bits_max(v[j], amax);
    }
    amax = lanes_max<32>(amax);
    if (lane == 0) warp_max[warp] = amax;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kWarps; ++k) amax = max(amax, warp_max[k]);
    __syncthreads();  // every warp has read warp_max before the next tile writes it
    const bool finite = amax < kInfinityBits;
    const float scale = fp8_scale(bits_float(amax), finite);
    const ScaleDivisor divide = scale_divisor<T>(scale);
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int64_t r = r0 + j * kWarps;
      uint8_t q[4];
      encode(v[j], divide, finite, q);
      store_row<kVec, 4>(values + matrix + r * cols + c, r < rows ? cols - c : 0, q);
      if (transposed) {
#pragma unroll
        for (int e = 0; e < 4; ++e) codes[lane * 4 + e][warp + j * kWarps] = q[e];
      }
    }
    const int64_t tile_row = t / col_tiles % row_tiles, tile_col = t % col_tiles;
    if (threadIdx.x == 0)
      scales[t / (row_tiles * col_tiles) * strides.matrix + tile_row * strides.row + tile_col * strides.col] = scale;
    if (transposed) {
      __syncthreads();
      store_transposed_tile(codes, transposed, rows, cols, tile_row * kTile, tile_col * kTile);
      __syncthreads();  // before the next tile's codes land
    }
  }
}

// x [rows, cols] in panels of 128 rows x 64 columns through shared memory: each warp
// takes eight columns, each lane the rows l, l + 32, l + 64, l + 96 of one (a 65-float
// pitch keeps those reads conflict-free), and writes the codes as rows of x^T and one
// scale per 128-row block of a column.
// kVec: 16-byte loads (cols a multiple of 16 / sizeof(T), x aligned to 16 bytes).
template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_columns_kernel(const T* x, uint8_t* values, float* scales, Fp8ScaleStrides strides, int64_t rows,
                                int64_t cols) {
  constexpr int kPanelCols = 64, kPitch = kPanelCols + 1, V = kVec ? 16 / sizeof(T) : 1;
  __shared__ float panel[kTile][kPitch];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row_blocks = (rows + kTile - 1) / kTile, col_panels = (cols + kPanelCols - 1) / kPanelCols;
  for (int64_t p = blockIdx.x; p < row_blocks * col_panels; p += gridDim.x) {
    const int64_t block = p / col_panels, r0 = block * kTile, c0 = p % col_panels * kPanelCols;
    for (int i = threadIdx.x; i < kTile * kPanelCols / V; i += kThreads) {
      const int rl = i / (kPanelCols / V), cl = i % (kPanelCols / V) * V;
      const int64_t r = r0 + rl, c = c0 + cl;
      float f[V];
      if (r < rows && c < cols) {
        if constexpr (kVec)
          load_f32<T, V>(x + r * cols + c, f);
        else
          f[0] = to_f32(x[r * cols + c]);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) f[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < V; ++e) panel[rl][cl + e] = f[e];
    }
    __syncthreads();
    for (int cl = warp * 8; cl < warp * 8 + 8; ++cl) {
      const int64_t c = c0 + cl;
      if (c >= cols) break;  // warp-uniform
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = panel[lane + 32 * e][cl];
      uint8_t q[4];
      const float scale = block_codes<T, 32>(v, q);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r0 + lane + 32 * e < rows) values[c * rows + r0 + lane + 32 * e] = q[e];
      if (lane == 0) scales[c * strides.row + block * strides.col] = scale;
    }
    __syncthreads();  // before the next panel overwrites this one
  }
}

// The rows and the columns of x [rows, cols] (T 16-bit, cols % 8 == 0, x aligned to 16
// bytes) from one read of x, a 128x128 tile per block iteration: the block loads the
// tile into shared memory (eight 16-byte loads a thread, all in flight at once, so few
// registers hold them) and encodes it (encode_tile_rows_and_columns).
template <class T>
__global__ void __launch_bounds__(kThreads, 4)  // four blocks an SM, 128 KB of loads in flight
    quantize_fp8_rows_columns_kernel(const T* x, RowsColumnsOut out, int64_t rows, int64_t cols) {
  constexpr int kPackElems = Pack<T>::n, kPacksPerRow = kTile / kPackElems;
  constexpr int kLoads = kTile * kPacksPerRow / kThreads, kRowStep = kThreads / kPacksPerRow;
  __shared__ PairTile<T> tile;
  const int64_t row_blocks = (rows + kTile - 1) / kTile, col_blocks = (cols + kTile - 1) / kTile;
  // Thread i loads pack i % 16 of the rows i / 16 + 16k, k < kLoads.
  const int first_row = threadIdx.x / kPacksPerRow, pack = threadIdx.x % kPacksPerRow;
  for (int64_t t = blockIdx.x; t < row_blocks * col_blocks; t += gridDim.x) {
    const int64_t row_block = t / col_blocks, col_block = t % col_blocks;
    const int64_t r0 = row_block * kTile, c0 = col_block * kTile;
    const bool inside = c0 + pack * kPackElems < cols;
    const T* src = x + (r0 + first_row) * cols + c0 + pack * kPackElems;
    Pack<T> packs[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      if (inside && r0 + first_row + k * kRowStep < rows) {
        packs[k] = *reinterpret_cast<const Pack<T>*>(src + k * kRowStep * cols);
      } else {
#pragma unroll
        for (int e = 0; e < kPackElems; ++e) packs[k].v[e] = from_f32<T>(0.0f);
      }
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
#pragma unroll
      for (int e = 0; e < kPackElems; e += 2)
        tile.at(first_row + k * kRowStep, pack * kPackElems / 2 + e / 2) = Vec<T, 2>{{packs[k].v[e], packs[k].v[e + 1]}};
    }
    __syncthreads();
    encode_tile_rows_and_columns(tile, out, rows, cols, row_block, col_block);
    __syncthreads();  // before the next tile overwrites this one
  }
}

// Eight consecutive elements (16-byte packs when kVec: p aligned to 16 bytes).
template <class T, bool kVec>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if (kVec) {
    constexpr int n = Pack<T>::n < 8 ? Pack<T>::n : 8;
#pragma unroll
    for (int k = 0; k < 8 / n; ++k) {
      const Pack<T> a = reinterpret_cast<const Pack<T>*>(p)[k];
#pragma unroll
      for (int e = 0; e < n; ++e) v[k * n + e] = to_f32(a.v[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = to_f32(p[e]);
  }
}

// Thread group g holds elements 8g .. 8g + 7 of an MX tensor; the four groups of a
// block are four neighbouring lanes (so loops over groups run warp-uniform). Loads the
// group's elements (zeros for an inactive thread) and returns its block's scale code,
// met over two shuffles.
template <class T, bool kVec>
__device__ __forceinline__ uint8_t mx_group(const T* w, int64_t g, bool active, int emax, float (&v)[8]) {
  float amax = 0.0f;
  int finite = 1;
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = 0.0f;
  if (active) load8<T, kVec>(w + g * 8, v);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    finite = finite && isfinite(v[e]);
    amax = fmaxf(amax, fabsf(v[e]));
  }
  for (int o = 1; o < 4; o <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    finite = finite & __shfl_xor_sync(0xffffffffu, finite, o);
  }
  return qc::mx_scale_code(amax, finite, emax);
}

// The two MX element formats: their largest exponent, a group's eight codes as they
// sit in memory (MXFP4: four bytes, element 2i in the low nibble of byte i; MXFP8: eight
// bytes) and the values those codes stand for.
struct Mxfp4 {
  static constexpr int kEmax = qc::kE2m1Emax;
  static constexpr int kBytes = 4;  // a group's bytes
  using Codes = uint32_t;
  __device__ static Codes encode(const float (&v)[8], float scale) {
    Codes packed = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) packed |= static_cast<uint32_t>(qc::e2m1_code(__fdiv_rn(v[e], scale))) << (4 * e);
    return packed;
  }
  __device__ static float value(Codes c, int e) { return qc::e2m1_value((c >> (4 * e)) & 0xFu); }
};

struct Mxfp8 {
  static constexpr int kEmax = qc::kE4m3Emax;
  static constexpr int kBytes = 8;
  using Codes = uint2;  // elements 0-3 in x, 4-7 in y, one byte each
  __device__ static Codes encode(const float (&v)[8], float scale) {
    Codes c = make_uint2(0, 0);
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      c.x |= e4m3_pair(__fdiv_rn(v[e], scale), __fdiv_rn(v[e + 1], scale)) << (8 * e);
      c.y |= e4m3_pair(__fdiv_rn(v[e + 4], scale), __fdiv_rn(v[e + 5], scale)) << (8 * e);
    }
    return c;
  }
  __device__ static float value(Codes c, int e) { return qc::e4m3_value(((e < 4 ? c.x : c.y) >> (8 * (e % 4))) & 0xFFu); }
};

// A group's codes at `p` (kVec: aligned to their size) in one access, or byte by byte.
template <class F, bool kVec>
__device__ __forceinline__ void store_codes(uint8_t* p, typename F::Codes c) {
  if (kVec) {
    *reinterpret_cast<typename F::Codes*>(p) = c;
  } else {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&c);
#pragma unroll
    for (int k = 0; k < F::kBytes; ++k) p[k] = bytes[k];
  }
}

template <class F, bool kVec>
__device__ __forceinline__ typename F::Codes load_codes(const uint8_t* p) {
  if (kVec) return *reinterpret_cast<const typename F::Codes*>(p);
  typename F::Codes c;
  uint8_t* bytes = reinterpret_cast<uint8_t*>(&c);
#pragma unroll
  for (int k = 0; k < F::kBytes; ++k) bytes[k] = p[k];
  return c;
}

// Group g writes its F::kBytes bytes of codes at g * F::kBytes and, from the first lane
// of its block, the block's scale.
template <class F, class T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    quantize_mx_kernel(const T* w, uint8_t* values, uint8_t* scales, int64_t groups) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x - lane; base < groups;
       base += stride) {
    const int64_t g = base + lane;
    const bool active = g < groups;
    float v[8];
    const uint8_t code = mx_group<T, kVec>(w, g, active, F::kEmax, v);
    typename F::Codes codes{};
    // A block with NaN or an infinity keeps zeros: its NaN scale carries the news.
    if (code != 0xFF) codes = F::encode(v, qc::e8m0_value(code));
    if (!active) continue;
    store_codes<F, kVec>(values + g * F::kBytes, codes);
    if (lane % 4 == 0) scales[g / 4] = code;
  }
}

// The FP8 scales of both recipes: `batch` matrices [rows, cols], tiles of tile_rows x
// 128, scale (b, i, j) where `strides` says (ops/quant.h).
struct Tiling {
  int64_t batch, rows, cols, tile_rows;
  Fp8ScaleStrides strides;
  __device__ int64_t scale_index(int64_t e) const {
    const int64_t b = e / (rows * cols), r = e / cols % rows, c = e % cols;
    return b * strides.matrix + r / tile_rows * strides.row + c / kTile * strides.col;
  }
};

// V = 4 (kVec: cols % 4 == 0, out aligned to 16 bytes, values to 4) or 1 element a
// step; the four elements of a step share a row and hence a scale.
template <class O, int V>
__global__ void __launch_bounds__(kThreads)
    dequantize_fp8_kernel(const uint8_t* values, const float* scales, O* out, Tiling t, int64_t n) {
  const int64_t steps = n / V, stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < steps; i += stride) {
    const int64_t e = i * V;
    const float scale = scales[t.scale_index(e)];
    uint32_t codes = V == 4 ? *reinterpret_cast<const uint32_t*>(values + e) : values[e];
    Vec<O, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = from_f32<O>(__fmul_rn(qc::e4m3_value((codes >> (8 * k)) & 0xFFu), scale));
    *reinterpret_cast<Vec<O, V>*>(out + e) = o;
  }
}

// Eight outputs p[0..7]; kVec: p is aligned to 16 bytes.
template <class O, bool kVec>
__device__ __forceinline__ void store8(O* p, const float (&v)[8]) {
  if (kVec) {
    constexpr int n = Pack<O>::n < 8 ? Pack<O>::n : 8;
#pragma unroll
    for (int k = 0; k < 8 / n; ++k) {
      Pack<O> a;
#pragma unroll
      for (int e = 0; e < n; ++e) a.v[e] = from_f32<O>(v[k * n + e]);
      reinterpret_cast<Pack<O>*>(p)[k] = a;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) p[e] = from_f32<O>(v[e]);
  }
}

__device__ __forceinline__ float mx_scale_value(uint8_t code) {
  return code == 0xFF ? bits_float(kFloatNan) : qc::e8m0_value(code);
}

template <class F, class O, bool kVec>
__global__ void __launch_bounds__(kThreads)
    dequantize_mx_kernel(const uint8_t* values, const uint8_t* scales, O* out, int64_t groups) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups; g += stride) {
    const typename F::Codes codes = load_codes<F, kVec>(values + g * F::kBytes);
    const float scale = mx_scale_value(scales[g / 4]);
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = __fmul_rn(F::value(codes, e), scale);
    store8<O, kVec>(out + g * 8, v);
  }
}

void quantize_fp8_tiles(const Tensor& src, Tensor& values, Tensor& scales, int64_t tile_rows, Tensor* transposed,
                        const char* op) {
  const int64_t rows = src.size(-2), cols = src.size(-1);
  const int64_t batch = src.numel() / (rows * cols);
  const Fp8ScaleStrides strides = fp8_scale_strides(scales);
  with_element_type(src.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(src.raw());
    uint8_t* out = static_cast<uint8_t*>(values.raw());
    float* s = static_cast<float*>(scales.raw());
    uint8_t* t = transposed ? static_cast<uint8_t*>(transposed->raw()) : nullptr;
    if (tile_rows == 1) {
      with_vec(cols % 8 == 0 && aligned_to(in, 16) && aligned_to(out, 8), [&](auto v) {
        // A warp per four blocks.
        quantize_fp8_rows_kernel<T, decltype(v)::value>
            <<<grid_for(scales.numel() * 8, kThreads), kThreads, 0, current_stream()>>>(in, out, s, strides, rows,
                                                                                         cols);
      });
    } else {
      const bool vec = cols % 4 == 0 && aligned_to(in, 4 * sizeof(T)) && aligned_to(out, 4) && aligned_to(t, 4);
      with_vec(vec, [&](auto v) {
        quantize_fp8_blocks_kernel<T, decltype(v)::value>
            <<<grid_for(scales.numel(), 1), kThreads, 0, current_stream()>>>(in, out, s, strides, t, batch, rows, cols);
      });
    }
  });
  check_launch(op, src.shape());
}

void dequantize_fp8_tiles(const Tensor& values, const Tensor& scales, Tensor& out, int64_t tile_rows,
                          const char* op) {
  const int64_t rows = out.size(-2), cols = out.size(-1), n = out.numel();
  const Tiling tiling{n / (rows * cols), rows, cols, tile_rows, fp8_scale_strides(scales)};
  const uint8_t* v = static_cast<const uint8_t*>(values.raw());
  const float* s = static_cast<const float*>(scales.raw());
  with_element_type(out.dtype(), op, [&](auto tag) {
    using O = decltype(tag);
    O* o = static_cast<O*>(out.raw());
    if (cols % 4 == 0 && aligned16(o) && aligned_to(v, 4))
      dequantize_fp8_kernel<O, 4><<<grid_for(n / 4, kThreads), kThreads, 0, current_stream()>>>(v, s, o, tiling, n);
    else
      dequantize_fp8_kernel<O, 1><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(v, s, o, tiling, n);
  });
  check_launch(op, out.shape());
}

}  // namespace

void quantize_fp8_rows(const Tensor& x, Tensor& values, Tensor& scales) {
  quantize_fp8_tiles(x, values, scales, 1, nullptr, "quantize_fp8_rows");
}
void quantize_fp8_columns(const Tensor& x, Tensor& values, Tensor& scales) {
  const char* op = "quantize_fp8_columns";
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t panels = (rows + kTile - 1) / kTile * ((cols + 63) / 64);
  with_element_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw());
    const bool vec = cols % static_cast<int64_t>(16 / sizeof(T)) == 0 && aligned_to(in, 16);
    with_vec(vec, [&](auto v) {
      quantize_fp8_columns_kernel<T, decltype(v)::value><<<grid_for(panels, 1), kThreads, 0, current_stream()>>>(
          in, static_cast<uint8_t*>(values.raw()), static_cast<float*>(scales.raw()), fp8_scale_strides(scales), rows,
          cols);
    });
  });
  check_launch(op, x.shape());
}
void quantize_fp8_rows_and_columns(const Tensor& x, Tensor& values, Tensor& scales, Tensor& t_values,
                                   Tensor& t_scales) {
  const char* op = "quantize_fp8_rows_and_columns";
  const int64_t rows = x.size(0), cols = x.size(1);
  if (x.dtype() == DType::f32 || cols % 8 != 0 || !aligned_to(x.raw(), 16) || !aligned_to(values.raw(), 4)) {
    cuda::quantize_fp8_rows(x, values, scales);
    cuda::quantize_fp8_columns(x, t_values, t_scales);
    return;
  }
  const int64_t tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
  with_element_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      quantize_fp8_rows_columns_kernel<T>
          <<<grid_for(tiles, 1), kThreads, 0, current_stream()>>>(
              static_cast<const T*>(x.raw()), rows_columns_out(values, scales, t_values, t_scales, rows), rows, cols);
    }
  });
  check_launch(op, x.shape());
}
void dequantize_fp8_rows(const Tensor& values, const Tensor& scales, Tensor& x) {
  dequantize_fp8_tiles(values, scales, x, 1, "dequantize_fp8_rows");
}
void quantize_fp8_blocks(const Tensor& w, Tensor& values, Tensor& scales, Tensor* transposed) {
  quantize_fp8_tiles(w, values, scales, kFp8Block, transposed, "quantize_fp8_blocks");
}
void dequantize_fp8_blocks(const Tensor& values, const Tensor& scales, Tensor& w) {
  dequantize_fp8_tiles(values, scales, w, kFp8Block, "dequantize_fp8_blocks");
}

namespace {

// An MX quantizer over w's groups of eight.
template <class F>
void quantize_mx(const Tensor& w, Tensor& values, Tensor& scales, const char* op) {
  const int64_t groups = w.numel() / 8;
  with_element_type(w.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(w.raw());
    uint8_t* out = static_cast<uint8_t*>(values.raw());
    uint8_t* s = static_cast<uint8_t*>(scales.raw());
    with_vec(aligned16(in) && aligned_to(out, F::kBytes), [&](auto v) {
      quantize_mx_kernel<F, T, decltype(v)::value>
          <<<grid_for(groups, kThreads), kThreads, 0, current_stream()>>>(in, out, s, groups);
    });
  });
  check_launch(op, w.shape());
}

template <class F>
void dequantize_mx(const Tensor& values, const Tensor& scales, Tensor& w, const char* op) {
  const int64_t groups = w.numel() / 8;
  const uint8_t* v = static_cast<const uint8_t*>(values.raw());
  const uint8_t* s = static_cast<const uint8_t*>(scales.raw());
  with_element_type(w.dtype(), op, [&](auto tag) {
    using O = decltype(tag);
    O* o = static_cast<O*>(w.raw());
    with_vec(aligned16(o) && aligned_to(v, F::kBytes), [&](auto vec) {
      dequantize_mx_kernel<F, O, decltype(vec)::value>
          <<<grid_for(groups, kThreads), kThreads, 0, current_stream()>>>(v, s, o, groups);
    });
  });
  check_launch(op, w.shape());
}

}  // namespace

void quantize_mxfp4(const Tensor& w, Tensor& values, Tensor& scales) {
  quantize_mx<Mxfp4>(w, values, scales, "quantize_mxfp4");
}
void dequantize_mxfp4(const Tensor& values, const Tensor& scales, Tensor& w) {
  dequantize_mx<Mxfp4>(values, scales, w, "dequantize_mxfp4");
}
void quantize_mxfp8(const Tensor& w, Tensor& values, Tensor& scales) {
  quantize_mx<Mxfp8>(w, values, scales, "quantize_mxfp8");
}
void dequantize_mxfp8(const Tensor& values, const Tensor& scales, Tensor& w) {
  dequantize_mx<Mxfp8>(values, scales, w, "dequantize_mxfp8");
}

}  // namespace amber::cuda
