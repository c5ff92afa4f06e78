#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "amber/ops/elementwise.h"
#include "amber/ops/cpu/blas.h"
#include "amber/ops/gemm.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;
using testing::relative_error;

// y = x w^T + b in plain double loops.
Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const auto xs = x.to_doubles(), ws = w.to_doubles(), bs = b.to_doubles();
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  Tensor y = Tensor::empty({n, out}, DType::f64);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bs[o];
      for (int64_t i = 0; i < in; ++i) s += xs[r * in + i] * ws[o * in + i];
      y.data<double>()[r * out + o] = s;
    }
  return y;
}

TEST(Linear, ForwardMatchesFloat64) {
  const Tensor x = random_tensor({37, 48}, DType::f64, 1), w = random_tensor({29, 48}, DType::f64, 2);
  const Tensor b = random_tensor({29}, DType::f64, 3);
  const Tensor ref = reference_linear(x, w, b);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor y = Tensor::empty({37, 29}, dt);
    linear_forward(x.to(dt), w.to(dt), b.to(dt), y);
    const double err = relative_error(y, ref);
    std::cout << "linear forward " << dtype_name(dt) << " rel err " << err << "\n";
    EXPECT_LT(err, dt == DType::f32 ? 1e-6 : 1e-2);
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({7, 12}, DType::f64, 4), w = random_tensor({5, 12}, DType::f64, 5);
  Tensor b = random_tensor({5}, DType::f64, 6);
  const Tensor proj = random_tensor({7, 5}, DType::f64, 7);
  auto loss = [&] {
    Tensor y = Tensor::empty({7, 5}, DType::f64);
    linear_forward(x, w, b, y);
    return testing::project(y, proj);
  };
  Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::zeros(w.shape(), DType::f64);
  Tensor db = Tensor::zeros(b.shape(), DType::f64);
  linear_backward(proj, x, w, dx, dw, db);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss), 1e-5);
  EXPECT_LT(testing::finite_difference_error(w, dw, loss), 1e-5);
  EXPECT_LT(testing::finite_difference_error(b, db, loss), 1e-5);
  // Parameter gradients accumulate.
  linear_backward(proj, x, w, dx, dw, db);
  Tensor dw_once = Tensor::zeros(w.shape(), DType::f64), db_once = Tensor::zeros(b.shape(), DType::f64);
  linear_backward(proj, x, w, dx, dw_once, db_once);
  add_scaled(dw_once, dw_once);
  EXPECT_LT(relative_error(dw, dw_once), 1e-15);
  // Without accumulate_dw the weight gradient is written, its old values (NaN) unread.
  Tensor dw_fresh = Tensor::full(w.shape(), NAN, DType::f64), db_fresh = Tensor::zeros(b.shape(), DType::f64);
  Tensor dw_zeroed = Tensor::zeros(w.shape(), DType::f64);
  linear_backward(proj, x, w, dx, dw_fresh, db_fresh, false);
  linear_backward(proj, x, w, dx, dw_zeroed, db_fresh);
  EXPECT_EQ(dw_fresh.to_doubles(), dw_zeroed.to_doubles());
}

// A residual stream's add done by the product: y = r + s (x w^T + b), y's old
// contents (NaN) never read; a bias beside a scale other than 1 is refused.
TEST(Linear, ResidualAddedByTheProduct) {
  const Tensor x = random_tensor({9, 16}, DType::f64, 10), w = random_tensor({7, 16}, DType::f64, 11);
  const Tensor b = random_tensor({7}, DType::f64, 12), r = random_tensor({9, 7}, DType::f64, 13);
  const Tensor none;
  for (const double scale : {1.0, 0.25}) {
    const Tensor bias = scale == 1.0 ? b : none;
    const Tensor plain = reference_linear(x, w, bias.defined() ? bias : Tensor::zeros({7}, DType::f64));
    std::vector<double> want = r.to_doubles();
    const std::vector<double> product = plain.to_doubles();
    for (size_t i = 0; i < want.size(); ++i) want[i] += scale * product[i];
    const Tensor expected = Tensor::from_vector(want, {9, 7});
    for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
      Tensor y = Tensor::full({9, 7}, NAN, dt);
      linear_forward(x.to(dt), w.to(dt), bias.defined() ? bias.to(dt) : none, y, r.to(dt), scale);
      EXPECT_LT(relative_error(y, expected), dt == DType::bf16 ? 1e-2 : 1e-6) << dtype_name(dt) << " scale " << scale;
    }
  }
  Tensor y = Tensor::empty({9, 7}, DType::f64);
  try {
    linear_forward(x, w, b, y, r, 0.5);
    FAIL() << "a bias with a scaled residual add was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scale 1"), std::string::npos) << e.what();
  }
}

TEST(Gemm, TransposesAndRejectsBadShapes) {
  const Tensor a = random_tensor({6, 4}, DType::f64, 8), b = random_tensor({6, 3}, DType::f64, 9);
  Tensor c = Tensor::empty({4, 3}, DType::f64);
  gemm(a, true, b, false, c);
  double s = 0;
  for (int k = 0; k < 6; ++k) s += a.item(k * 4 + 2) * b.item(k * 3 + 1);
  EXPECT_NEAR(c.item(2 * 3 + 1), s, 1e-12);
  Tensor bad = Tensor::empty({5, 3}, DType::f64);
  try {
    gemm(a, true, b, false, bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 3]"), std::string::npos) << e.what();
  }
}

// 3-D operands are a batch of independent products: each matrix of c is what the 2-D
// product of the same matrices gives, for every pair of transposes, with beta, and with
// a separate addend; a batch whose sizes differ and mixed 2-D/3-D operands are refused.
TEST(Gemm, BatchOfProductsMatchesOneAtATime) {
  const int64_t n = 3, rows = 5, inner = 7, cols = 4;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Tensor a = random_tensor(ta ? Shape{n, inner, rows} : Shape{n, rows, inner}, DType::f32, 10);
    const Tensor b = random_tensor(tb ? Shape{n, cols, inner} : Shape{n, inner, cols}, DType::f32, 11);
    const Tensor c0 = random_tensor({n, rows, cols}, DType::f32, 12);
    Tensor batched = c0.clone();
    gemm(a, ta, b, tb, batched, 0.5, 0.25);
    for (int64_t i = 0; i < n; ++i) {
      Tensor one = c0.select(0, i).clone();
      gemm(a.select(0, i), ta, b.select(0, i), tb, one, 0.5, 0.25);
      EXPECT_EQ(batched.select(0, i).to_doubles(), one.to_doubles()) << "transposes " << t << ", matrix " << i;
    }
  }
  const Tensor a = random_tensor({n, rows, inner}, DType::f32, 13), b = random_tensor({n, inner, cols}, DType::f32, 14);
  const Tensor addend = random_tensor({n, rows, cols}, DType::f32, 15);
  Tensor c = Tensor::empty({n, rows, cols}, DType::f32);
  gemm(a, false, b, false, c, -1.5, 0.75, addend);
  for (int64_t i = 0; i < n; ++i) {
    Tensor one = Tensor::empty({rows, cols}, DType::f32);
    gemm(a.select(0, i), false, b.select(0, i), false, one, -1.5, 0.75, addend.select(0, i));
    EXPECT_EQ(c.select(0, i).to_doubles(), one.to_doubles()) << "with an addend, matrix " << i;
  }
  Tensor wrong_batch = Tensor::empty({n + 1, rows, cols}, DType::f32);
  EXPECT_THROW(gemm(a, false, b, false, wrong_batch), Error);
  EXPECT_THROW(gemm(a, false, b.select(0, 0), false, c), Error);
}

// cuBLASLt's algorithms (bench kernel gemm) exist on a GPU only: CPU tensors get an
// error that says so, not a silent empty answer.
// The CPU splits a product into BLAS calls over its threads; the bits of every element
// must not depend on the thread count, for every transpose, written or accumulated,
// at shapes of the training step's products, ragged token counts included (128 x 32 x
// 458 caught a split by threads: OpenBLAS sums differently in calls of other rows).
TEST(Gemm, ThreadCountDoesNotChangeBits) {
  const int saved = omp_get_max_threads();
  struct Dims {
    int64_t m, n, k;
  };
  for (const Dims s : {Dims{1000, 384, 128}, Dims{384, 1000, 300}, Dims{77, 1500, 33}, Dims{2048, 96, 512},
                       Dims{192, 32, 512}, Dims{32, 192, 512}, Dims{512, 32, 4096}, Dims{4096, 32, 512},
                       Dims{512, 4096, 32}, Dims{512, 128, 32}, Dims{128, 32, 512}, Dims{128, 32, 458}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const Tensor a = random_tensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, DType::f32, 7);
        const Tensor b = random_tensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, DType::f32, 8);
        const Tensor c0 = random_tensor({s.m, s.n}, DType::f32, 9);
        for (const double beta : {0.0, 1.0}) {  // written, or added to (a gradient accumulating)
          std::vector<std::vector<double>> results;
          for (const int threads : {1, 2, 3, 8}) {
            omp_set_num_threads(threads);
            Tensor c = c0.clone();
            gemm(a, ta, b, tb, c, 1.0, beta);
            results.push_back(c.to_doubles());
          }
          for (size_t i = 1; i < results.size(); ++i)
            EXPECT_EQ(results[i], results[0])
                << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb << " beta " << beta;
        }
      }
  omp_set_num_threads(saved);
}

TEST(Gemm, AlgorithmTimesNeedAGpu) {
  const Tensor a = random_tensor({4, 3}, DType::f32, 5), b = random_tensor({3, 2}, DType::f32, 6);
  Tensor c = Tensor::zeros({4, 2}, DType::f32);
  try {
    gemm_algorithm_times(a, false, b, false, c, 0.0, 4, 1);
    FAIL() << "no error on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
}

// amber restarts with OpenBLAS's AVX-512 kernels only where OpenBLAS chose its AVX2
// ones on an AVX-512 CPU and was built with every kernel family to switch to.
TEST(Blas, WiderKernelsOnlyForAvx2KernelsOnAnAvx512Cpu) {
  const char* dynamic = "OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64";
  EXPECT_EQ(cpu::wider_blas_core(true, dynamic, "Haswell"), "SkylakeX");
  EXPECT_EQ(cpu::wider_blas_core(true, dynamic, "SkylakeX"), "");
  EXPECT_EQ(cpu::wider_blas_core(true, dynamic, "Cooperlake"), "");
  EXPECT_EQ(cpu::wider_blas_core(false, dynamic, "Haswell"), "") << "an AVX2 CPU keeps its kernels";
  EXPECT_EQ(cpu::wider_blas_core(true, "OpenBLAS 0.3.26 NO_AFFINITY Haswell", "Haswell"), "")
      << "a build of one kernel family cannot switch";
}

}  // namespace
}  // namespace amber
