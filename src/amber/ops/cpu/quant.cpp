// CPU quantizers: one pass per scale block (amax, then the scale, then the codes), with
// the core's e4m3 and e2m1 encoders and the scale rules of docs/numerics.md. Blocks are
// independent, so the results do not depend on the thread count.
#include "amber/ops/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/quant.h"

namespace amber::cpu {
namespace {

constexpr uint8_t kE4m3Nan = 0x7F;
constexpr uint8_t kE8m0Nan = 0xFF;

// A stack of `batch` row-major [rows, cols] matrices cut into tiles of tile_rows x 128
// (1 x 128 for the row recipe); scale (b, i, j) of tile row i, tile column j lies where
// `strides` says (ops/quant.h).
struct Tiling {
  int64_t batch, rows, cols, tile_rows;
  Fp8ScaleStrides strides;
  int64_t row_tiles() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t col_tiles() const { return (cols + kFp8Block - 1) / kFp8Block; }
  int64_t tiles() const { return batch * row_tiles() * col_tiles(); }
  int64_t scale_at(int64_t b, int64_t i, int64_t j) const {
    return b * strides.matrix + i * strides.row + j * strides.col;
  }
  // The scale of element `e` of the stack (flat, row-major).
  int64_t scale_index(int64_t e) const {
    const int64_t b = e / (rows * cols), r = e / cols % rows, c = e % cols;
    return scale_at(b, r / tile_rows, c / kFp8Block);
  }
};

Tiling row_tiling(const Tensor& x, const Tensor& scales) {
  return {1, x.size(0), x.size(1), 1, fp8_scale_strides(scales)};
}
Tiling block_tiling(const Tensor& w, const Tensor& scales) {
  const int64_t rows = w.size(-2), cols = w.size(-1);
  return {w.numel() / (rows * cols), rows, cols, kFp8Block, fp8_scale_strides(scales)};
}

void quantize_fp8_tiles(const Tensor& src, Tensor& values, Tensor& scales, const Tiling& t) {
  const Tensor x = widened<float>(src);
  const float* px = x.data<float>();
  uint8_t* pv = static_cast<uint8_t*>(values.raw());
  float* ps = scales.data<float>();
  const int64_t col_tiles = t.col_tiles(), row_tiles = t.row_tiles(), tiles = t.tiles();
#pragma omp parallel for if (src.numel() > 65536)
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t b = i / (row_tiles * col_tiles), tr = i / col_tiles % row_tiles, tc = i % col_tiles;
    const int64_t r0 = tr * t.tile_rows, r1 = std::min(r0 + t.tile_rows, t.rows);
    const int64_t c0 = tc * kFp8Block, c1 = std::min(c0 + kFp8Block, t.cols);
    const int64_t base = b * t.rows * t.cols;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const float v = px[base + r * t.cols + c];
        finite = finite && std::isfinite(v);
        amax = std::max(amax, std::fabs(v));
      }
    float scale = amax / 448.0f;
    if (scale == 0.0f) scale = 1.0f;  // an all-zero block (or amax below 448 * 2^-149)
    if (!finite) scale = std::numeric_limits<float>::quiet_NaN();
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t e = base + r * t.cols + c;
        pv[e] = finite ? f8e4m3_from_float(px[e] / scale) : kE4m3Nan;
      }
    ps[t.scale_at(b, tr, tc)] = scale;
  }
}

// out = e4m3 value * scale: in double for f64 (exact), else one fp32 product, then
// rounded to out's dtype.
void dequantize_fp8_tiles(const Tensor& values, const Tensor& scales, Tensor& out, const Tiling& t) {
  const uint8_t* pv = static_cast<const uint8_t*>(values.raw());
  const float* ps = scales.data<float>();
  const int64_t n = out.numel();
  with_compute_type(out.dtype(), [&]<class T>() {
    Output<T> buffer(out);
    T* po = buffer.data();
#pragma omp parallel for if (n > 65536)
    for (int64_t e = 0; e < n; ++e) po[e] = T(f8e4m3_to_float(pv[e])) * T(ps[t.scale_index(e)]);
    buffer.store();
  });
}

// The e8m0 code of an MX block's scale, the OCP rule 2^(floor(log2 amax) - emax) with
// emax the element format's largest exponent (e2m1: 2, e4m3: 8), clamped to 2^-127; NaN
// for a block holding NaN or an infinity.
uint8_t mx_scale(float amax, bool finite, int emax) {
  if (!finite) return kE8m0Nan;
  if (amax == 0.0f) return 0;
  return static_cast<uint8_t>(std::max(std::ilogb(amax) - emax + 127, 0));
}

// The e8m0 code of block `in` [kMxBlock]'s scale.
uint8_t mx_block_scale(const float* in, int emax) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < kMxBlock; ++i) {
    finite = finite && std::isfinite(in[i]);
    amax = std::max(amax, std::fabs(in[i]));
  }
  return mx_scale(amax, finite, emax);
}

constexpr int kE2m1Emax = 2, kE4m3Emax = 8;

}  // namespace

void quantize_fp8_rows(const Tensor& x, Tensor& values, Tensor& scales) {
  quantize_fp8_tiles(x, values, scales, row_tiling(x, scales));
}
// By its definition: the rows of x^T.
void quantize_fp8_columns(const Tensor& x, Tensor& values, Tensor& scales) {
  const Tensor transposed = x.transpose(0, 1).contiguous();
  quantize_fp8_tiles(transposed, values, scales, row_tiling(transposed, scales));
}
void quantize_fp8_rows_and_columns(const Tensor& x, Tensor& values, Tensor& scales, Tensor& t_values,
                                   Tensor& t_scales) {
  cpu::quantize_fp8_rows(x, values, scales);
  cpu::quantize_fp8_columns(x, t_values, t_scales);
}
void dequantize_fp8_rows(const Tensor& values, const Tensor& scales, Tensor& x) {
  dequantize_fp8_tiles(values, scales, x, row_tiling(x, scales));
}
void quantize_fp8_blocks(const Tensor& w, Tensor& values, Tensor& scales, Tensor* transposed) {
  quantize_fp8_tiles(w, values, scales, block_tiling(w, scales));
  if (transposed) transposed->copy_from(values.transpose(values.ndim() - 2, values.ndim() - 1));
}
void dequantize_fp8_blocks(const Tensor& values, const Tensor& scales, Tensor& w) {
  dequantize_fp8_tiles(values, scales, w, block_tiling(w, scales));
}

namespace {

// w's 32-element blocks (K % 32 == 0, so block b is elements 32b .. 32b + 31 of the flat
// tensor): scale b is the block's code, and encode(b, elements, scale) writes its values
// unless the scale is NaN (a block with NaN or an infinity keeps zeros, its NaN scale
// carrying the news; the values start zeroed here).
template <class Encode>
void quantize_mx_blocks(const Tensor& w, Tensor& values, Tensor& scales, int emax, Encode encode) {
  const Tensor x = widened<float>(w);
  const float* px = x.data<float>();
  uint8_t* ps = static_cast<uint8_t*>(scales.raw());
  std::memset(values.raw(), 0, values.numel() * dtype_size(values.dtype()));
  const int64_t blocks = w.numel() / kMxBlock;
#pragma omp parallel for if (w.numel() > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const float* in = px + b * kMxBlock;
    const uint8_t code = mx_block_scale(in, emax);
    if (code != kE8m0Nan) encode(b, in, e8m0_to_float(code));
    ps[b] = code;
  }
}

}  // namespace

// Block b's values are bytes 16b .. 16b + 15, element 2i in the low nibble of byte i.
void quantize_mxfp4(const Tensor& w, Tensor& values, Tensor& scales) {
  uint8_t* pv = static_cast<uint8_t*>(values.raw());
  quantize_mx_blocks(w, values, scales, kE2m1Emax, [pv](int64_t b, const float* in, float scale) {
    uint8_t* out = pv + b * (kMxBlock / 2);
    for (int64_t i = 0; i < kMxBlock / 2; ++i)
      out[i] = static_cast<uint8_t>(e2m1_from_float(in[2 * i] / scale) | (e2m1_from_float(in[2 * i + 1] / scale) << 4));
  });
}

namespace {

// w = value(e) * the scale of element e's block, rounded once from T.
template <class Value>
void dequantize_mx_elements(const Tensor& scales, Tensor& w, Value value) {
  const uint8_t* ps = static_cast<const uint8_t*>(scales.raw());
  const int64_t n = w.numel();
  with_compute_type(w.dtype(), [&]<class T>() {
    Output<T> buffer(w);
    T* po = buffer.data();
#pragma omp parallel for if (n > 65536)
    for (int64_t e = 0; e < n; ++e) po[e] = T(value(e)) * T(e8m0_to_float(ps[e / kMxBlock]));
    buffer.store();
  });
}

}  // namespace

// Every product e2m1 * 2^k is exact in f32, bf16 and f64 (at most two significant
// bits, and the quantizer's scales keep it within range).
void dequantize_mxfp4(const Tensor& values, const Tensor& scales, Tensor& w) {
  const uint8_t* pv = static_cast<const uint8_t*>(values.raw());
  dequantize_mx_elements(scales, w, [pv](int64_t e) {
    const uint8_t byte = pv[e / 2];
    return e2m1_to_float(e % 2 ? byte >> 4 : byte & 0xF);
  });
}

// Block b's values are elements 32b .. 32b + 31.
void quantize_mxfp8(const Tensor& w, Tensor& values, Tensor& scales) {
  uint8_t* pv = static_cast<uint8_t*>(values.raw());
  quantize_mx_blocks(w, values, scales, kE4m3Emax, [pv](int64_t b, const float* in, float scale) {
    for (int64_t i = 0; i < kMxBlock; ++i) pv[b * kMxBlock + i] = f8e4m3_from_float(in[i] / scale);
  });
}

// Every product e4m3 * 2^k the quantizer writes is exact in f32, bf16 and f64 (at most
// four significant bits, within range).
void dequantize_mxfp8(const Tensor& values, const Tensor& scales, Tensor& w) {
  const uint8_t* pv = static_cast<const uint8_t*>(values.raw());
  dequantize_mx_elements(scales, w, [pv](int64_t e) { return f8e4m3_to_float(pv[e]); });
}

}  // namespace amber::cpu
