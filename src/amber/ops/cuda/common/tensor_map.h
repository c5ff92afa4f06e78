// Tensor maps for the bulk tensor copy engine (TMA), built on the host through the
// driver's cuTensorMapEncodeTiled (reached through the runtime, so nothing links
// libcuda directly).
#pragma once

#include <cuda.h>

#include "amber/core/tensor.h"

namespace amber::cuda {

// A [rows, ...] tensor of 16-bit elements seen as a 2-D matrix of rows x (row's
// elements), copied in boxes of 64 elements x box_rows rows in the 128-byte swizzle.
// Rows past the end arrive as zeros. `op` names the caller in errors.
CUtensorMap swizzled_rows_map(const Tensor& t, int box_rows, const char* op);

// t's elements (16-bit, contiguous) seen as a rows x cols matrix, copied in boxes of 64
// columns x box_rows rows in the 128-byte swizzle; columns and rows past the end arrive
// as zeros. cols must be a multiple of 8 (rows start 16-byte aligned).
CUtensorMap swizzled_matrix_map(const Tensor& t, int64_t rows, int64_t cols, int box_rows, const char* op);

}  // namespace amber::cuda
