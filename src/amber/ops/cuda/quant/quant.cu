// CUDA quantizers: a warp per 1x128 row block, a 256-thread block per 128x128 tile (its
// transposed codes through shared memory), a 256-thread block per 128-row x 64-column
// panel for the column blocks, one per 128x128 tile for rows and columns in one pass,
// and four threads per 32-element MX block (MXFP4, MXFP8). Each reduces |x| to the
// block's amax, forms the CPU's scale RN(amax / 448) (through 1/448 and one correction,
// which quant_codes.h shows is the IEEE quotient; never the fast reciprocal), divides
// by it (16-bit sources: through its correctly rounded reciprocal, which quant_codes.h
// shows gives the same codes) and encodes with the
// hardware's e4m3 conversion (sm_89 on) or quant_codes.h's encoders, so the bits equal
// the CPU oracle's. Dequantizers are element-wise, four (FP8) or eight (MX) elements a
// thread.
#include <type_traits>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/quant/quant.h"
#include "amber/ops/cuda/quant/quant_kernels.cuh"
#include "amber/ops/quant.h"

namespace amber::cuda {
namespace {

using namespace quant_kernels;

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls fn(std::true_type{}) when the vectorised path applies, else fn(std::false_type{}).
template <class Fn>
void with_vec(bool vec, Fn&& fn) {
  if (vec)
    fn(std::true_type{});
  else
    fn(std::false_type{});
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
// encoding. With `transposed`, the codes also pass through shared memory to leave as
// rows of each matrix's transpose.
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
      store_transposed_tile(codes, transposed + matrix, rows, cols, tile_row * kTile, tile_col * kTile);
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
  if (x.dtype() == DType::f32 || cols % 8 != 0 || !aligned_to(x.raw(), 16) || !aligned_to(values.raw(), 8)) {
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
