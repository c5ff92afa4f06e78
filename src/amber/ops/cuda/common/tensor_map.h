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

// t's elements (16-bit, or 8-bit: fp8 and e8m0, contiguous) seen as a rows x cols
// matrix, copied in boxes of 128 bytes (64 or 128 columns) x box_rows rows in the
// 128-byte swizzle; columns and rows past the end arrive as zeros. Rows must start
// 16-byte aligned (cols a multiple of 8 or 16).
CUtensorMap swizzled_matrix_map(const Tensor& t, int64_t rows, int64_t cols, int box_rows, const char* op);

// As swizzled_matrix_map for rows that hold `parts` pieces of `cols` elements each (a
// [rows, parts, cols] view): a box is 64 or 128 columns x 1 part x box_rows rows, and
// never crosses into the next part.
CUtensorMap swizzled_parts_map(const Tensor& t, int64_t rows, int64_t parts, int64_t cols, int box_rows,
                               const char* op);

}  // namespace amber::cuda
