// The GLU's backward quantized as it is computed: a block per 128 rows x 128 columns of
// dh, which make the 128x128 tiles of dgate_up's gate half and of its value half. The
// block computes both tiles from dh and gate_up (glu_math.cuh's glu_backward_pair,
// rounded to dh's dtype as the GLU's backward pass writes them) into shared memory, and
// encodes each into rows and columns as quantize_fp8_rows_and_columns does: dgate_up is
// never written, so its 4 bytes an element of writes and reads are saved. Its rows-only
// form writes dgate_up (the compute-dtype weight gradient's operand) and its row codes
// from one read of dh and gate_up, so the quantizer's read of dgate_up is saved.
#include "amber/ops/cuda/quant/glu_quant.h"

#include "amber/ops/cuda/activation/glu_math.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/quant/quant_kernels.cuh"

namespace amber::cuda {
namespace {

using namespace quant_kernels;

constexpr int kTilesSmem = 2 * sizeof(PairTile<__nv_bfloat16>);  // the gate's tile and the value's

// Tile t of dh's 128 x 128 tiles (H = width): thread i computes pack i % 16 of the rows
// i / 16 + 16k, four rows' loads in flight at once.
template <class Act, class T>
__global__ void __launch_bounds__(kThreads, 3)  // three blocks an SM, 64 KB of tiles each
    glu_backward_rows_columns_kernel(const T* dh, const T* gate_up, RowsColumnsOut out, int64_t rows,
                                     int64_t width) {
  constexpr int kPackElems = Pack<T>::n, kPacksPerRow = kTile / kPackElems;
  constexpr int kLoads = kTile * kPacksPerRow / kThreads, kRowStep = kThreads / kPacksPerRow, kBatch = 2;
  extern __shared__ __align__(16) unsigned char smem[];
  PairTile<T>& gate_tile = reinterpret_cast<PairTile<T>*>(smem)[0];
  PairTile<T>& value_tile = reinterpret_cast<PairTile<T>*>(smem)[1];
  const int64_t row_blocks = (rows + kTile - 1) / kTile, col_blocks = width / kTile;
  const int first_row = threadIdx.x / kPacksPerRow, pack = threadIdx.x % kPacksPerRow;
  for (int64_t t = blockIdx.x; t < row_blocks * col_blocks; t += gridDim.x) {
    const int64_t row_block = t / col_blocks, col_block = t % col_blocks;
    const int64_t r0 = row_block * kTile, c = col_block * kTile + pack * kPackElems;
#pragma unroll 1
    for (int k0 = 0; k0 < kLoads; k0 += kBatch) {
      Pack<T> d[kBatch], g[kBatch], v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t r = r0 + first_row + (k0 + k) * kRowStep;
        if (r < rows) {
          d[k] = *reinterpret_cast<const Pack<T>*>(dh + r * width + c);
          g[k] = *reinterpret_cast<const Pack<T>*>(gate_up + r * 2 * width + c);
          v[k] = *reinterpret_cast<const Pack<T>*>(gate_up + r * 2 * width + width + c);
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int rl = first_row + (k0 + k) * kRowStep;
        const bool inside = r0 + rl < rows;
#pragma unroll
        for (int e = 0; e < kPackElems; e += 2) {
          float dgate[2] = {0.0f, 0.0f}, dvalue[2] = {0.0f, 0.0f};
          if (inside) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
              glu_backward_pair<Act>(to_f32(g[k].v[e + h]), to_f32(v[k].v[e + h]), to_f32(d[k].v[e + h]), dgate[h],
                                     dvalue[h]);
          }
          const int pair = pack * kPackElems / 2 + e / 2;
          gate_tile.at(rl, pair) = Vec<T, 2>{{from_f32<T>(dgate[0]), from_f32<T>(dgate[1])}};
          value_tile.at(rl, pair) = Vec<T, 2>{{from_f32<T>(dvalue[0]), from_f32<T>(dvalue[1])}};
        }
      }
    }
    __syncthreads();
    encode_tile_rows_and_columns(gate_tile, out, rows, 2 * width, row_block, col_block);
    encode_tile_rows_and_columns(value_tile, out, rows, 2 * width, row_block, col_blocks + col_block);
    __syncthreads();  // before the next tiles overwrite these
  }
}

// Half a warp per block of 128 dh columns of a row, eight elements a lane: the gate's
// and the value's 1x128 blocks of that dgate_up row, written in T (glu_backward_pair
// rounded as the GLU's backward pass rounds it) and encoded from those rounded values.
// The loop runs over pairs of blocks so that a warp's shuffles stay uniform.
template <class Act, class T>
__global__ void __launch_bounds__(kThreads)
    glu_backward_rows_kernel(const T* dh, const T* gate_up, T* dgate_up, uint8_t* values, float* scales,
                             Fp8ScaleStrides strides, int64_t rows, int64_t width) {
  static_assert(Pack<T>::n == 8, "a lane's eight elements are one 16-byte pack");
  const int half = threadIdx.x % 32 / 16, half_lane = threadIdx.x % 16;
  const int64_t col_blocks = width / kTile, blocks = rows * col_blocks;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t g = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * 2; g < blocks; g += warps * 2) {
    const int64_t b = g + half, r = b / col_blocks, col_block = b % col_blocks;
    const int64_t c = col_block * kTile + half_lane * 8;
    const bool inside = b < blocks;
    float dgate[8] = {}, dvalue[8] = {};
    if (inside) {
      const Pack<T> d = *reinterpret_cast<const Pack<T>*>(dh + r * width + c);
      const Pack<T> gate = *reinterpret_cast<const Pack<T>*>(gate_up + r * 2 * width + c);
      const Pack<T> value = *reinterpret_cast<const Pack<T>*>(gate_up + r * 2 * width + width + c);
      Pack<T> dg, dv;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float a, v;
        glu_backward_pair<Act>(to_f32(gate.v[e]), to_f32(value.v[e]), to_f32(d.v[e]), a, v);
        dg.v[e] = from_f32<T>(a);
        dv.v[e] = from_f32<T>(v);
        dgate[e] = to_f32(dg.v[e]);
        dvalue[e] = to_f32(dv.v[e]);
      }
      *reinterpret_cast<Pack<T>*>(dgate_up + r * 2 * width + c) = dg;
      *reinterpret_cast<Pack<T>*>(dgate_up + r * 2 * width + width + c) = dv;
    }
    uint8_t q[8];
    const float gate_scale = block_codes<T, 16>(dgate, q);
    if (inside) store_row<true, 8>(values + r * 2 * width + c, 8, q);
    const float value_scale = block_codes<T, 16>(dvalue, q);
    if (inside) store_row<true, 8>(values + r * 2 * width + width + c, 8, q);
    if (inside && half_lane == 0) {
      scales[r * strides.row + col_block * strides.col] = gate_scale;
      scales[r * strides.row + (col_blocks + col_block) * strides.col] = value_scale;
    }
  }
}

// fn.template operator()<Act>() with the GLU's activation.
template <class Fn>
void with_activation(Glu glu, Fn&& fn) {
  if (glu == Glu::swiglu)
    fn.template operator()<Silu>();
  else
    fn.template operator()<GeluTanh>();
}

}  // namespace

bool glu_backward_fp8_rows_and_columns(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& values,
                                       Tensor& scales, Tensor& t_values, Tensor& t_scales) {
  const char* op = "glu_backward_fp8_rows_and_columns";
  const int64_t rows = dh.size(0), width = dh.size(1);
  const bool fits = (dh.dtype() == DType::bf16 || dh.dtype() == DType::f16) && gate_up.dtype() == dh.dtype() &&
                    width % kTile == 0 && aligned16(dh.raw()) && aligned16(gate_up.raw()) &&
                    reinterpret_cast<uintptr_t>(values.raw()) % 8 == 0;
  if (!fits) return false;
  const RowsColumnsOut out = rows_columns_out(values, scales, t_values, t_scales, rows);
  with_element_type(dh.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      with_activation(glu, [&]<class Act>() {
        const auto kernel = glu_backward_rows_columns_kernel<Act, T>;
        allow_smem(reinterpret_cast<const void*>(kernel), kTilesSmem, op);
        const int64_t tiles = (rows + kTile - 1) / kTile * (width / kTile);
        kernel<<<grid_for(tiles, 1), kThreads, kTilesSmem, current_stream()>>>(
            static_cast<const T*>(dh.raw()), static_cast<const T*>(gate_up.raw()), out, rows, width);
      });
    }
  });
  check_launch(op, dh.shape());
  return true;
}

bool glu_backward_fp8_rows(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, Tensor& values,
                           Tensor& scales) {
  const char* op = "glu_backward_fp8_rows";
  const int64_t rows = dh.size(0), width = dh.size(1);
  const bool fits = (dh.dtype() == DType::bf16 || dh.dtype() == DType::f16) && gate_up.dtype() == dh.dtype() &&
                    dgate_up.dtype() == dh.dtype() && width % kTile == 0 && aligned16(dh.raw()) &&
                    aligned16(gate_up.raw()) && aligned16(dgate_up.raw()) &&
                    reinterpret_cast<uintptr_t>(values.raw()) % 8 == 0;
  if (!fits) return false;
  with_element_type(dh.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      with_activation(glu, [&]<class Act>() {
        glu_backward_rows_kernel<Act, T><<<grid_for(rows * (width / kTile), kThreads / 16), kThreads, 0,
                                           current_stream()>>>(
            static_cast<const T*>(dh.raw()), static_cast<const T*>(gate_up.raw()), static_cast<T*>(dgate_up.raw()),
            static_cast<uint8_t*>(values.raw()), static_cast<float*>(scales.raw()), fp8_scale_strides(scales), rows,
            width);
      });
    }
  });
  check_launch(op, dh.shape());
  return true;
}

}  // namespace amber::cuda
