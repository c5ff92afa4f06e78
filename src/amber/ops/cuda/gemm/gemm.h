// CUDA implementations behind ops/gemm.h: cuBLASLt products (fp32 accumulation, a cached
// heuristic per shape, one workspace per thread and device) and the linear-layer bias helpers.
#pragma once

#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber::cuda {

// ops/gemm.h's gemm: c = alpha op(a) op(b) + beta addend (c itself when undefined).
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha, double beta, const Tensor& addend = Tensor());
// The product of at most kFewRowsMax rows of a [m, k] (rows contiguous) against a
// linear layer's weight b [n, k] (transposed), c = alpha a b^T + beta addend (c when
// undefined; c's rows ldc elements apart), by a kernel that streams each weight row once
// (gemm/few_rows.cu): a decode step's products. Returns false where it does not apply
// (other layouts, k not a whole number of 16-byte vectors); gemm() then runs cuBLASLt.
inline constexpr int kFewRowsMax = 8;
bool few_rows_gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
                   double beta, const Tensor& addend, int64_t ldc);
// ops/gemm.h's set_gemm_tuning (file empty: the choices stay in memory).
void set_gemm_tuning(bool measured, const std::string& file);
// For `amber bench kernel gemm`: c = op(a) op(b) + beta c (c overwritten) timed with
// each of cuBLASLt's first `count` heuristic answers (best of `repeats`, ms; -1 for an
// answer that does not run); entry 0 is the algorithm gemm() uses.
std::vector<double> time_gemm_algorithms(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                                         Tensor& c, double beta, int count, int repeats);
// y [N, out] += bias [out] broadcast over rows.
void add_bias(Tensor& y, const Tensor& bias);
// dbias [out] += column sums of dy [N, out], summed in a fixed order.
void bias_grad(const Tensor& dy, Tensor& dbias);

}  // namespace amber::cuda
