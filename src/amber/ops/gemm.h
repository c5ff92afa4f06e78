// Dense matrix products. Linear layers store weights [out, in] (Hugging Face
// layout) and compute y = x W^T (+ b). CPU products go through OpenBLAS with fp32
// (or fp64) accumulation; bf16/f16 operands are widened first.
#pragma once

#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

// c = alpha * op(a) * op(b) + beta * addend for 2-D contiguous tensors; op is an
// optional transpose; addend (shaped like c) is c itself when undefined. On the GPU a
// separate addend is read by the product's epilogue (cuBLASLt's C beside its D).
// With 3-D a [n, ., .], b [n, ., .] and c [n, ., .] (contiguous, as is an addend) the
// call is a batch of n independent products c[i] = alpha op(a[i]) op(b[i]) + beta
// addend[i]: on the GPU one strided-batched cuBLASLt call, on the CPU one product after
// another.
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0, const Tensor& addend = Tensor());

// How the GPU picks each product's cuBLASLt algorithm. Not measured (the process's
// default): cuBLASLt's first heuristic answer, the same choice in every process.
// Measured: each new product shape is timed with cuBLASLt's first 16 answers on a
// scratch output and the fastest is kept; with a file the choices are appended to it
// and read back by every later process that names it, so a resumed run makes the same
// choices and keeps its bits (the file records cuBLASLt's version and the card; another
// pair is refused); without one they last for the process. CPU products have one
// algorithm and ignore it.
struct GemmTuning {
  bool measured = false;
  std::string file;
};
void set_gemm_tuning(const GemmTuning& tuning);

// For `amber bench kernel gemm` (GPU only): c = op(a) op(b) + beta c timed with each
// of cuBLASLt's first `count` heuristic answers (ms, best of `repeats`; -1 where an
// answer does not run); entry 0 is the one gemm() runs.
std::vector<double> gemm_algorithm_times(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                                         Tensor& c, double beta, int count, int repeats);

// y [N, out] = x [N, in] * w [out, in]^T + bias [out] (bias may be undefined). With a
// residual r [N, out]: y = r + scale * (x w^T + bias), the add done by the product as it
// writes y (a residual stream's add without a pass of its own); a bias then needs
// scale 1.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                    const Tensor& residual = Tensor(), double scale = 1.0);

// dx = dy * w (skipped when dx is undefined), dw += dy^T * x (dw = with
// accumulate_dw false: its old values are never read), dbias += column sums of dy
// (when defined).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& dbias, bool accumulate_dw = true);

}  // namespace amber
