#include "amber/ops/cuda/common/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "amber/core/error.h"

namespace amber::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder(const char* op) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t rc =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found);
    return rc == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry)
               : nullptr;
  }();
  AMBER_CHECK(fn != nullptr, op, ": the driver has no cuTensorMapEncodeTiled (CUDA 12 or later is needed)");
  return fn;
}

}  // namespace

CUtensorMap swizzled_rows_map(const Tensor& t, int box_rows, const char* op) {
  const int64_t rows = t.size(0), row_elems = t.numel() / rows;
  AMBER_CHECK(row_elems % 64 == 0, op, ": rows of ", row_elems, " elements are not whole 64-element boxes");
  return swizzled_matrix_map(t, rows, row_elems, box_rows, op);
}

CUtensorMap swizzled_matrix_map(const Tensor& t, int64_t rows, int64_t cols, int box_rows, const char* op) {
  AMBER_CHECK(t.dtype() == DType::bf16 || t.dtype() == DType::f16, op,
              ": tensor maps here take 16-bit elements, got ", dtype_name(t.dtype()));
  AMBER_CHECK(cols % 8 == 0 && rows * cols <= t.numel(), op, ": ", t.shape(), " seen as ", rows, " x ", cols,
              " needs rows of a multiple of 8 elements within the tensor");
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * 2)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult rc = encoder(op)(
      &map, t.dtype() == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(t.raw()), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  AMBER_CHECK(rc == CUDA_SUCCESS, op, ": cuTensorMapEncodeTiled failed (error ", static_cast<int>(rc), ") for ",
              t.shape(), " seen as ", rows, " x ", cols, " in boxes of 64 x ", box_rows);
  return map;
}

}  // namespace amber::cuda
