// The linear layer's bias on the GPU: the broadcast add and the bias gradient in a
// fixed order (row blocks, then the ordered column sums).
#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/gemm/gemm.h"

namespace amber::cuda {
namespace {

template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols; i += stride)
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[i % cols]));
}

// partial[blockIdx.y, c] = sum of dy[r, c] over the rows of block y, in row order.
template <class T>
__global__ void column_partials_kernel(const T* dy, float* partial, int64_t rows, int64_t cols,
                                       int64_t rows_per_block) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t first = blockIdx.y * rows_per_block;
  const int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  float s = 0.0f;
  for (int64_t r = first; r < last; ++r) s += to_f32(dy[r * cols + c]);
  partial[blockIdx.y * cols + c] = s;
}

}  // namespace

void add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "linear_forward bias";
  require_contiguous(y, op);
  require_contiguous(bias, op);
  AMBER_CHECK(bias.dtype() == y.dtype(), op, ": on the GPU the bias (", dtype_name(bias.dtype()),
              ") needs the output's dtype (", dtype_name(y.dtype()), ")");
  const int64_t rows = y.size(0), cols = y.size(1);
  if (rows * cols == 0) return;
  with_element_type(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(rows * cols, 256), 256, 0, current_stream()>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(bias.raw()), rows, cols);
  });
  check_launch(op, y.shape());
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const char* op = "linear_backward bias";
  require_contiguous(dy, op);
  const int64_t rows = dy.size(0), cols = dy.size(1);
  if (rows == 0 || cols == 0) return;
  // A fixed split of the rows (shape-dependent only) keeps the sums deterministic.
  const int64_t row_blocks = rows < 64 ? rows : 64;
  const int64_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
  const int64_t used = (rows + rows_per_block - 1) / rows_per_block;
  Tensor partial = Tensor::empty({used, cols}, DType::f32, dy.device());
  with_element_type(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(used));
    column_partials_kernel<T><<<grid, 256, 0, current_stream()>>>(
        static_cast<const T*>(dy.raw()), static_cast<float*>(partial.raw()), rows, cols, rows_per_block);
  });
  check_launch(op, dy.shape());
  add_column_sums(partial, dbias, op);
}

}  // namespace amber::cuda
