// The FP8 product's oracle: each e4m3 value times its fp32 scale is exact in float64,
// so the operands dequantize exactly, and one float64 product (plus beta c) is rounded
// once into c's dtype.
#include "amber/ops/cpu/fp8_gemm.h"

#include "amber/ops/gemm.h"
#include "amber/ops/quant.h"

namespace amber::cpu {

void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales, Fp8Scaling b_scaling,
              Tensor& c, double alpha, double beta) {
  Tensor a64 = Tensor::empty(a.shape(), DType::f64), b64 = Tensor::empty(b.shape(), DType::f64);
  dequantize_fp8_rows(a, a_scales, a64);
  if (b_scaling == Fp8Scaling::rows)
    dequantize_fp8_rows(b, b_scales, b64);
  else
    dequantize_fp8_blocks(b, b_scales, b64);
  // beta = 0 never reads c (which may hold anything, NaN included).
  Tensor c64 = beta == 0.0 ? Tensor::zeros(c.shape(), DType::f64) : c.to(DType::f64);
  gemm(a64, false, b64, true, c64, alpha, beta);
  c.copy_from(c64);
}

}  // namespace amber::cpu
