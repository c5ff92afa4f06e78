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
  return swizzled_parts_map(t, rows, 1, cols, box_rows, op);
}

CUtensorMap swizzled_parts_map(const Tensor& t, int64_t rows, int64_t parts, int64_t cols, int box_rows,
                               const char* op) {
  const size_t size = dtype_size(t.dtype());
  const bool wide = t.dtype() == DType::bf16 || t.dtype() == DType::f16;
  const bool narrow = t.dtype() == DType::f8e4m3 || t.dtype() == DType::f8e5m2 || t.dtype() == DType::e8m0 ||
                      t.dtype() == DType::u8;
  AMBER_CHECK(wide || narrow, op, ": tensor maps here take 16-bit or 8-bit elements, got ", dtype_name(t.dtype()));
  const int64_t row_multiple = static_cast<int64_t>(16 / size);
  AMBER_CHECK(cols % row_multiple == 0 && rows * parts * cols <= t.numel(), op, ": ", t.shape(), " seen as ", rows,
              " x ", parts, " x ", cols, " needs pieces of a multiple of ", row_multiple,
              " elements within the tensor");
  const CUtensorMapDataType type = t.dtype() == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : t.dtype() == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const cuuint32_t rank = parts == 1 ? 2 : 3;
  const cuuint64_t piece = static_cast<cuuint64_t>(cols * static_cast<int64_t>(size));
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(parts == 1 ? rows : parts),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {piece, piece * static_cast<cuuint64_t>(parts)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / size),
                             static_cast<cuuint32_t>(parts == 1 ? box_rows : 1), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult rc = encoder(op)(&map, type, rank, const_cast<void*>(t.raw()), dims, strides, box, steps,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  AMBER_CHECK(rc == CUDA_SUCCESS, op, ": cuTensorMapEncodeTiled failed (error ", static_cast<int>(rc), ") for ",
              t.shape(), " seen as ", rows, " x ", parts, " x ", cols, " in boxes of ", 128 / size, " x ", box_rows);
  return map;
}

}  // namespace amber::cuda
