// Device-side dtype conversion behind Tensor::copy_from: f32, bf16 and f16 in any
// pair, rounding to nearest even (the refresh of bf16 working copies after every
// optimizer step goes through here); copies between strided views whose rows are
// contiguous; and Tensor::fill, as a bit pattern per element.
#include <cstring>

#include "amber/core/cuda/kernel_base.cuh"
#include "amber/core/cuda_runtime.h"
#include "amber/core/stream.h"

namespace amber::cuda {
namespace {

template <class Out, class In>
__global__ void convert_kernel(Out* out, const In* in, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f32<Out>(to_f32(in[i]));
}

template <class Bits>
__global__ void fill_kernel(Bits* out, Bits value, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class Bits>
void launch_fill(void* dst, const void* element, size_t n) {
  Bits value;
  std::memcpy(&value, element, sizeof(Bits));
  const int threads = 256;
  fill_kernel<Bits><<<grid_for(static_cast<int64_t>(n), threads), threads, 0, current_stream()>>>(
      static_cast<Bits*>(dst), value, static_cast<int64_t>(n));
}

bool is_gpu_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A view's rows (every index but the last) and where each starts, in elements.
struct RowViews {
  int64_t outer[kMaxDims];  // sizes of the leading dims, innermost last
  int64_t dst_stride[kMaxDims], src_stride[kMaxDims];
  int dims;      // leading dims
  int64_t rows;  // product of outer
};

// Each thread moves one Word (the row's elements split into words_per_row of them)
// per step of a grid-stride loop over rows x words.
template <class Word>
__global__ void copy_rows_kernel(uint8_t* dst, const uint8_t* src, RowViews v, int64_t words_per_row,
                                 int64_t element_bytes) {
  const int64_t n = v.rows * words_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t row = i / words_per_row, d = 0, s = 0;
    for (int k = v.dims - 1; k >= 0; --k) {
      const int64_t index = row % v.outer[k];
      row /= v.outer[k];
      d += index * v.dst_stride[k];
      s += index * v.src_stride[k];
    }
    const int64_t word = i % words_per_row;
    reinterpret_cast<Word*>(dst + d * element_bytes)[word] = reinterpret_cast<const Word*>(src + s * element_bytes)[word];
  }
}

}  // namespace

bool convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
  if (!is_gpu_float(dst_type) || !is_gpu_float(src_type)) return false;
  if (n == 0) return true;
  const char* op = "convert";
  with_element_type(dst_type, op, [&](auto out_tag) {
    using Out = decltype(out_tag);
    with_element_type(src_type, op, [&](auto in_tag) {
      using In = decltype(in_tag);
      const int threads = 256;
      convert_kernel<Out, In><<<grid_for(static_cast<int64_t>(n), threads), threads, 0, current_stream()>>>(
          static_cast<Out*>(dst), static_cast<const In*>(src), static_cast<int64_t>(n));
    });
  });
  check_launch(op, Shape{static_cast<int64_t>(n)});
  return true;
}

void copy_rows(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
               const int64_t* shape, int ndim, size_t element_bytes) {
  const char* op = "copy_rows";
  AMBER_CHECK(ndim >= 1 && ndim <= kMaxDims && dst_strides[ndim - 1] == 1 && src_strides[ndim - 1] == 1, op,
              ": the views' last dimension must be contiguous");
  RowViews v{};
  v.dims = ndim - 1;
  v.rows = 1;
  for (int k = 0; k < v.dims; ++k) {
    v.outer[k] = shape[k];
    v.dst_stride[k] = dst_strides[k];
    v.src_stride[k] = src_strides[k];
    v.rows *= shape[k];
  }
  const int64_t row_bytes = shape[ndim - 1] * static_cast<int64_t>(element_bytes);
  if (v.rows == 0 || row_bytes == 0) return;
  // The widest word that divides every row's bytes and start on both sides.
  uint64_t common = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | row_bytes;
  for (int k = 0; k < v.dims; ++k) common |= (v.dst_stride[k] | v.src_stride[k]) * element_bytes;
  const auto launch = [&](auto word) {
    using Word = decltype(word);
    const int64_t words = row_bytes / sizeof(Word);
    const int threads = 256;
    copy_rows_kernel<Word><<<grid_for(v.rows * words, threads), threads, 0, current_stream()>>>(
        static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), v, words, static_cast<int64_t>(element_bytes));
  };
  if (common % 16 == 0) launch(uint4{});
  else if (common % 8 == 0) launch(uint2{});
  else if (common % 4 == 0) launch(uint32_t{});
  else if (common % 2 == 0) launch(uint16_t{});
  else launch(uint8_t{});
  check_launch(op, Shape{v.rows, shape[ndim - 1]});
}

void fill(void* dst, size_t element_bytes, const void* element, size_t n) {
  if (n == 0) return;
  switch (element_bytes) {
    case 1: launch_fill<uint8_t>(dst, element, n); break;
    case 2: launch_fill<uint16_t>(dst, element, n); break;
    case 4: launch_fill<uint32_t>(dst, element, n); break;
    case 8: launch_fill<uint64_t>(dst, element, n); break;
    default: fail("fill: elements of ", element_bytes, " bytes are not supported on the GPU");
  }
  check_launch("fill", Shape{static_cast<int64_t>(n)});
}

}  // namespace amber::cuda
