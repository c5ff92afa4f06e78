// GPU ops against the CPU oracle: every CUDA op runs on fresh Philox inputs next to
// its CPU path, prints the relative error and checks it (f32 < 1e-5, bf16/f16 < 1e-2),
// with odd sizes, parameter-gradient accumulation, run-to-run determinism of the
// backward reductions and outputs poisoned with NaN before the op.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "amber/ops/activation.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/embedding.h"
#include "amber/ops/gemm.h"
#include "amber/ops/glu_linear.h"
#include "amber/ops/loss.h"
#include "amber/ops/norm.h"
#include "amber/ops/rope.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

double limit(DType dt) { return dt == DType::f32 ? 1e-5 : 1e-2; }

// Compares a GPU result with the CPU reference; NaN anywhere fails.
void expect_close(const std::string& what, const Tensor& on_gpu, const Tensor& on_cpu, DType dt) {
  const double err = testing::relative_error(on_gpu.to(Device::cpu()), on_cpu);
  std::cout << what << " " << dtype_name(dt) << " rel err " << err << "\n";
  ASSERT_TRUE(std::isfinite(err)) << what << ": NaN or infinity in the GPU result";
  EXPECT_LT(err, limit(dt)) << what;
}

// Both results as doubles, asserted equal bit for bit.
void expect_identical(const std::string& what, const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(Device::cpu()).to_doubles(), y = b.to(Device::cpu()).to_doubles();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " differs at " << i;
}

Tensor nan_tensor(Shape shape, DType dt) { return gpu(Tensor::full(shape, NAN, dt)); }

// Token ids (or positions) in [0, range) with repeats, drawn from the Philox stream.
Tensor random_ids(int64_t n, int64_t range, uint64_t seed) {
  const std::vector<double> r = random_tensor({n}, DType::f64, seed).to_doubles();
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[i] = static_cast<int32_t>(static_cast<int64_t>(std::floor(std::fabs(r[i]) * 997.0)) % range);
  return Tensor::from_vector(ids, {n});
}

TEST(ElementwiseGpu, AddScaledAddScaledIntoAndScaleIntoMatchCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t cols : {1000, 1003}) {
      const Tensor x = random_tensor({7, cols}, dt, 1), y = random_tensor({7, cols}, dt, 2);
      Tensor cx = x.clone(), gx = gpu(x);
      add_scaled(cx, y, -0.75);
      add_scaled(gx, gpu(y), -0.75);
      expect_close("add_scaled " + std::to_string(cols), gx, cx, dt);
      Tensor cinto = Tensor::empty(x.shape(), dt), ginto = nan_tensor(x.shape(), dt);
      add_scaled_into(cinto, x, y, 0.5);
      add_scaled_into(ginto, gpu(x), gpu(y), 0.5);
      expect_close("add_scaled_into (poisoned) " + std::to_string(cols), ginto, cinto, dt);
      Tensor cout_ = Tensor::empty(x.shape(), dt), gout = nan_tensor(x.shape(), dt);
      scale_into(cout_, y, 1.5);
      scale_into(gout, gpu(y), 1.5);
      expect_close("scale_into (poisoned) " + std::to_string(cols), gout, cout_, dt);
    }
    // A view one element in: misaligned for 16-byte packs, so the scalar path runs.
    const Tensor base = random_tensor({1025}, dt, 3), y = random_tensor({1024}, dt, 4);
    Tensor c = base.slice(0, 1, 1025).clone(), g = gpu(base).slice(0, 1, 1025);
    add_scaled(c, y, 2.0);
    add_scaled(g, gpu(y), 2.0);
    expect_close("add_scaled misaligned", g, c, dt);
  }
}

// zero_all on views of two buffers (f32, and bf16 for views that start off a 16-byte
// boundary): 140 tensors, so more than one launch's table, of lengths from 0 to several
// 64 KiB chunks with ragged ends. The views' elements become zero and everything
// between them keeps its value, as on the CPU.
TEST(ElementwiseGpu, ZeroAllZeroesEveryTensorAndNothingElse) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t n = 400000;
    const Tensor values = random_tensor({n}, dt, 5);
    Tensor on_cpu = values.clone(), on_gpu = gpu(values);
    std::vector<Tensor> cpu_views, gpu_views;
    int64_t at = dt == DType::bf16 ? 1 : 0, last_end = 0;
    const int64_t lengths[] = {0, 1, 7, 64, 1000, 16387, 65536, 70001};
    for (int i = 0; i < 140; ++i) {
      const int64_t length = i < 8 ? lengths[i] : 1 + (i * 37) % 300;
      cpu_views.push_back(on_cpu.slice(0, at, at + length));
      gpu_views.push_back(on_gpu.slice(0, at, at + length));
      last_end = at + length;
      at = last_end + 1 + i % 3;  // a gap of 1-3 elements that must keep its value
    }
    ASSERT_LT(at, n);
    zero_all(cpu_views);
    zero_all(gpu_views);
    expect_identical("zero_all " + std::string(dtype_name(dt)), on_gpu, on_cpu);
    const std::vector<double> after = on_cpu.to_doubles();
    EXPECT_EQ(after[last_end - 1], 0.0) << "the last view was not zeroed";
    EXPECT_NE(after[last_end], 0.0) << "the gap after the last view was zeroed";
  }
}

TEST(ActivationGpu, GatedAndPlainMatchCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t width : {1000, 37}) {
      const Tensor gu = random_tensor({5, 2 * width}, dt, 10), dh = random_tensor({5, width}, dt, 11);
      for (int form = 0; form < 2; ++form) {
        const std::string name = std::string(form == 0 ? "swiglu" : "geglu") + " " + std::to_string(width);
        auto fwd = form == 0 ? swiglu_forward : geglu_forward;
        auto bwd = form == 0 ? swiglu_backward : geglu_backward;
        Tensor ch = Tensor::empty({5, width}, dt), gh = nan_tensor({5, width}, dt);
        fwd(gu, ch);
        fwd(gpu(gu), gh);
        expect_close(name + " forward", gh, ch, dt);
        Tensor cd = Tensor::empty(gu.shape(), dt), gd = nan_tensor(gu.shape(), dt);
        bwd(dh, gu, cd);
        bwd(gpu(dh), gpu(gu), gd);
        expect_close(name + " backward", gd, cd, dt);
      }
    }
    const Tensor x = random_tensor({9, 1001}, dt, 12, 2.0f), dy = random_tensor({9, 1001}, dt, 13);
    Tensor cy = Tensor::empty(x.shape(), dt), gy = nan_tensor(x.shape(), dt);
    gelu_forward(x, cy);
    gelu_forward(gpu(x), gy);
    expect_close("gelu forward", gy, cy, dt);
    Tensor cdx = Tensor::empty(x.shape(), dt), gdx = nan_tensor(x.shape(), dt);
    gelu_backward(dy, x, cdx);
    gelu_backward(gpu(dy), gpu(x), gdx);
    expect_close("gelu backward", gdx, cdx, dt);
  }
}

// The MLP's products with the GLU beside them (ops/glu_linear.h): bf16 on an sm_90 card
// runs the GLU in the products' epilogues, which must agree with the CPU's product and
// pass to bf16 rounding; rows and widths off the kernels' 128-tiles check their edges,
// and a width that is no multiple of 16 bytes takes the product and the pass, as does a
// forward of at most eight rows (a decode step: the few-rows product is faster there).
TEST(GluLinearGpu, EpiloguesMatchCpu) {
  REQUIRE_GPU();
  struct Case {
    int64_t rows, in, hidden, out;
  };
  for (const Case& c : {Case{1000, 136, 200, 72}, Case{256, 64, 128, 96}, Case{1, 64, 128, 32}, Case{33, 40, 44, 24}}) {
    for (DType dt : {DType::bf16, DType::f32}) {
      for (Glu glu : {Glu::swiglu, Glu::geglu}) {
        const std::string name = std::string(glu == Glu::swiglu ? "swiglu" : "geglu") + " " +
                                 std::to_string(c.rows) + "x" + std::to_string(c.hidden) + "x" + std::to_string(c.in);
        const bool epilogue = glu_epilogues(Device::cuda()) && dt == DType::bf16 && c.hidden % 8 == 0;
        const Tensor x = random_tensor({c.rows, c.in}, dt, 20), w = random_tensor({2 * c.hidden, c.in}, dt, 21, 0.2f);
        const Tensor w_down = random_tensor({c.out, c.hidden}, dt, 22, 0.2f), dy = random_tensor({c.rows, c.out}, dt, 23);
        Tensor cgu = Tensor::empty({c.rows, 2 * c.hidden}, dt), ch = Tensor::empty({c.rows, c.hidden}, dt);
        Tensor cdgu = Tensor::empty(cgu.shape(), dt), cdh = Tensor::empty(ch.shape(), dt);
        EXPECT_FALSE(glu_linear_forward(glu, x, w, Tensor(), cgu, ch));
        EXPECT_FALSE(glu_linear_backward_input(glu, dy, w_down, cgu, cdgu, cdh));
        Tensor ggu = nan_tensor(cgu.shape(), dt), gh = nan_tensor(ch.shape(), dt);
        Tensor gdgu = nan_tensor(cgu.shape(), dt), gdh = nan_tensor(ch.shape(), dt);
        EXPECT_EQ(glu_linear_forward(glu, gpu(x), gpu(w), Tensor(), ggu, gh), epilogue && c.rows > 8) << name;
        expect_close(name + " gate_up", ggu, cgu, dt);
        expect_close(name + " h", gh, ch, dt);
        EXPECT_EQ(glu_linear_backward_input(glu, gpu(dy), gpu(w_down), gpu(cgu), gdgu, gdh), epilogue) << name;
        expect_close(name + " dgate_up", gdgu, cdgu, dt);
      }
    }
  }
}

struct NormShape {
  int64_t rows, cols;
};

TEST(NormGpu, RmsNormMatchesCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    // 64 and 128 columns take the sub-warp teams (QK-norm rows); the rest whole blocks,
    // 1280 of a warp count that is no power of two (160 threads in bf16).
    for (NormShape s : {NormShape{33, 1000}, NormShape{1, 4096}, NormShape{300, 37}, NormShape{500, 64},
                        NormShape{77, 128}, NormShape{40, 1280}}) {
      const std::string tag = "rmsnorm " + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      const Tensor x = random_tensor({s.rows, s.cols}, dt, 20, 2.0f);
      const Tensor w = random_tensor({s.cols}, dt, 21, 0.2f, 1.0f), dy = random_tensor(x.shape(), dt, 22);
      for (bool affine : {true, false}) {
        const Tensor weight = affine ? w : Tensor();
        Tensor cy = Tensor::empty(x.shape(), dt), cr = Tensor::empty({s.rows}, DType::f32);
        Tensor gy = nan_tensor(x.shape(), dt), gr = nan_tensor({s.rows}, DType::f32);
        rmsnorm_forward(x, weight, 1e-6, cy, cr);
        rmsnorm_forward(gpu(x), affine ? gpu(w) : Tensor(), 1e-6, gy, gr);
        expect_close(tag + " forward", gy, cy, dt);
        expect_close(tag + " rstd", gr, cr, DType::f32);
        // Parameter gradients accumulate: start from a nonzero f32 gradient.
        const Tensor dw0 = random_tensor({s.cols}, DType::f32, 23);
        Tensor cdx = Tensor::empty(x.shape(), dt), cdw = affine ? dw0.clone() : Tensor();
        Tensor gdx = nan_tensor(x.shape(), dt), gdw = affine ? gpu(dw0) : Tensor();
        rmsnorm_backward(dy, x, weight, cr, cdx, cdw);
        rmsnorm_backward(gpu(dy), gpu(x), affine ? gpu(w) : Tensor(), gr, gdx, gdw);
        expect_close(tag + " dx", gdx, cdx, dt);
        if (affine) expect_close(tag + " dweight (+=)", gdw, cdw, dt);
        // dx += (the residual stream's gradient): the add inside the norm's pass.
        const Tensor prior = random_tensor(x.shape(), dt, 24);
        Tensor cacc = prior.clone(), gacc = gpu(prior);
        Tensor cdw2 = affine ? dw0.clone() : Tensor(), gdw2 = affine ? gpu(dw0) : Tensor();
        rmsnorm_backward(dy, x, weight, cr, cacc, cdw2, true);
        rmsnorm_backward(gpu(dy), gpu(x), affine ? gpu(w) : Tensor(), gr, gacc, gdw2, true);
        expect_close(tag + " dx (+=)", gacc, cacc, dt);
      }
    }
  }
}

// The residual add fused into the norm: the sum and the normalised output against the
// CPU's add-then-norm, for both norms, at a block-wide and a sub-warp row width.
TEST(NormGpu, ResidualAddMatchesCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (NormShape s : {NormShape{33, 1000}, NormShape{500, 64}, NormShape{40, 1280}}) {
      const std::string tag = "residual norm " + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      const Tensor x = random_tensor({s.rows, s.cols}, dt, 40, 2.0f), r = random_tensor(x.shape(), dt, 41);
      const Tensor w = random_tensor({s.cols}, dt, 42, 0.2f, 1.0f), b = random_tensor({s.cols}, dt, 43);
      Tensor c_sum = Tensor::empty(x.shape(), dt), cy = Tensor::empty(x.shape(), dt);
      Tensor cm = Tensor::empty({s.rows}, DType::f32), cr = Tensor::empty({s.rows}, DType::f32);
      const Tensor gr_in = gpu(r);
      Tensor g_sum = nan_tensor(x.shape(), dt), gy = nan_tensor(x.shape(), dt);
      Tensor gm = nan_tensor({s.rows}, DType::f32), gr = nan_tensor({s.rows}, DType::f32);
      rmsnorm_forward(x, w, 1e-6, cy, cr, {&r, 0.5, &c_sum});
      rmsnorm_forward(gpu(x), gpu(w), 1e-6, gy, gr, {&gr_in, 0.5, &g_sum});
      expect_close(tag + " rms sum", g_sum, c_sum, dt);
      expect_close(tag + " rms forward", gy, cy, dt);
      expect_close(tag + " rms rstd", gr, cr, DType::f32);
      // The fused sum has the bits of the GPU's own add.
      Tensor g_add = gpu(x);
      add_scaled(g_add, gr_in, 0.5);
      expect_identical(tag + " sum against add_scaled", g_sum, g_add);
      layernorm_forward(x, w, b, 1e-5, cy, cm, cr, {&r, -1.0, &c_sum});
      layernorm_forward(gpu(x), gpu(w), gpu(b), 1e-5, gy, gm, gr, {&gr_in, -1.0, &g_sum});
      expect_close(tag + " layernorm sum", g_sum, c_sum, dt);
      expect_close(tag + " layernorm forward", gy, cy, dt);
      expect_close(tag + " layernorm mean", gm, cm, DType::f32);
    }
  }
}

TEST(NormGpu, LayerNormMatchesCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (NormShape s : {NormShape{33, 1000}, NormShape{1, 4096}, NormShape{300, 37}, NormShape{40, 1280}}) {
      const std::string tag = "layernorm " + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      const Tensor x = random_tensor({s.rows, s.cols}, dt, 30, 2.0f, 3.0f);
      const Tensor w = random_tensor({s.cols}, dt, 31, 0.2f, 1.0f), b = random_tensor({s.cols}, dt, 32);
      const Tensor dy = random_tensor(x.shape(), dt, 33);
      Tensor cy = Tensor::empty(x.shape(), dt), cm = Tensor::empty({s.rows}, DType::f32);
      Tensor cr = Tensor::empty({s.rows}, DType::f32);
      Tensor gy = nan_tensor(x.shape(), dt), gm = nan_tensor({s.rows}, DType::f32);
      Tensor gr = nan_tensor({s.rows}, DType::f32);
      layernorm_forward(x, w, b, 1e-5, cy, cm, cr);
      layernorm_forward(gpu(x), gpu(w), gpu(b), 1e-5, gy, gm, gr);
      expect_close(tag + " forward", gy, cy, dt);
      expect_close(tag + " mean", gm, cm, DType::f32);
      expect_close(tag + " rstd", gr, cr, DType::f32);
      const Tensor dw0 = random_tensor({s.cols}, DType::f32, 34), db0 = random_tensor({s.cols}, DType::f32, 35);
      Tensor cdx = Tensor::empty(x.shape(), dt), cdw = dw0.clone(), cdb = db0.clone();
      Tensor gdx = nan_tensor(x.shape(), dt), gdw = gpu(dw0), gdb = gpu(db0);
      layernorm_backward(dy, x, w, cm, cr, cdx, cdw, cdb);
      layernorm_backward(gpu(dy), gpu(x), gpu(w), gm, gr, gdx, gdw, gdb);
      expect_close(tag + " dx", gdx, cdx, dt);
      expect_close(tag + " dweight (+=)", gdw, cdw, dt);
      expect_close(tag + " dbias (+=)", gdb, cdb, dt);
      const Tensor prior = random_tensor(x.shape(), dt, 36);
      Tensor cacc = prior.clone(), gacc = gpu(prior), cdw2 = dw0.clone(), gdw2 = gpu(dw0);
      Tensor cdb2 = db0.clone(), gdb2 = gpu(db0);
      layernorm_backward(dy, x, w, cm, cr, cacc, cdw2, cdb2, true);
      layernorm_backward(gpu(dy), gpu(x), gpu(w), gm, gr, gacc, gdw2, gdb2, true);
      expect_close(tag + " dx (+=)", gacc, cacc, dt);
    }
  }
}

// QK-norm on the heads of a stacked projection [T, H + 2 Hkv, D]: the input and the
// input gradient are token-strided views (heads from the second on, so rows start at an
// offset), the gradient's other heads stay untouched. Sub-warp teams (64, 128; head
// counts that are and are not powers of two, Kohaku-500M's q among them) and a
// block-wide row (1280, the staged backward).
TEST(NormGpu, TokenStridedHeadsMatchCpu) {
  REQUIRE_GPU();
  struct Case {
    int64_t tokens, heads, stacked, d;
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    for (Case c : {Case{300, 5, 8, 64}, Case{4096, 20, 28, 64}, Case{77, 2, 5, 128}, Case{40, 1, 3, 1280}}) {
      const std::string tag = "token-strided rmsnorm " + std::to_string(c.tokens) + "x" + std::to_string(c.heads) +
                              " of " + std::to_string(c.stacked) + "x" + std::to_string(c.d);
      const Tensor stack = random_tensor({c.tokens, c.stacked, c.d}, dt, 50, 2.0f);
      const Tensor x = stack.slice(1, 1, 1 + c.heads), gx = gpu(stack).slice(1, 1, 1 + c.heads);
      const Tensor w = random_tensor({c.d}, dt, 51, 0.2f, 1.0f), dy = random_tensor(x.shape(), dt, 52);
      const int64_t rows = c.tokens * c.heads;
      Tensor cy = Tensor::empty(x.shape(), dt), cr = Tensor::empty({rows}, DType::f32);
      Tensor gy = nan_tensor(x.shape(), dt), gr = nan_tensor({rows}, DType::f32);
      rmsnorm_forward(x, w, 1e-6, cy, cr);
      rmsnorm_forward(gx, gpu(w), 1e-6, gy, gr);
      expect_close(tag + " forward", gy, cy, dt);
      expect_close(tag + " rstd", gr, cr, DType::f32);
      for (bool accumulate : {false, true}) {
        const Tensor grads = random_tensor(stack.shape(), dt, 53);
        Tensor c_stack = grads.clone(), g_stack = gpu(grads);
        Tensor cdx = c_stack.slice(1, 1, 1 + c.heads), gdx = g_stack.slice(1, 1, 1 + c.heads);
        Tensor cdw = Tensor::zeros({c.d}, DType::f32), gdw = gpu(cdw);
        rmsnorm_backward(dy, x, w, cr, cdx, cdw, accumulate);
        rmsnorm_backward(gpu(dy), gx, gpu(w), gr, gdx, gdw, accumulate);
        // The whole stack: the heads the norm must not touch compare too.
        expect_close(tag + (accumulate ? " dx (+=), whole stack" : " dx, whole stack"), g_stack, c_stack, dt);
        expect_close(tag + " dweight", gdw, cdw, dt);
      }
    }
  }
}

TEST(NormGpu, WeightGradientsAreBitIdenticalAcrossRuns) {
  REQUIRE_GPU();
  const DType dt = DType::bf16;
  const Tensor x = gpu(random_tensor({2000, 512}, dt, 40)), dy = gpu(random_tensor({2000, 512}, dt, 41));
  const Tensor w = gpu(random_tensor({512}, dt, 42, 0.2f, 1.0f)), b = gpu(random_tensor({512}, dt, 43));
  Tensor y = Tensor::empty(x.shape(), dt, Device::cuda()), dx = Tensor::empty(x.shape(), dt, Device::cuda());
  Tensor mean = Tensor::empty({2000}, DType::f32, Device::cuda()), rstd = Tensor::empty({2000}, DType::f32, Device::cuda());
  std::vector<Tensor> dws, dbs;
  for (int run = 0; run < 2; ++run) {
    Tensor dw = Tensor::zeros({512}, DType::f32, Device::cuda()), db = Tensor::zeros({512}, DType::f32, Device::cuda());
    layernorm_forward(x, w, b, 1e-5, y, mean, rstd);
    layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
    Tensor rw = Tensor::zeros({512}, DType::f32, Device::cuda());
    rmsnorm_forward(x, w, 1e-6, y, rstd);
    rmsnorm_backward(dy, x, w, rstd, dx, rw);
    dws.push_back(dw);
    dbs.push_back(db);
    dws.push_back(rw);
  }
  expect_identical("layernorm dweight", dws[0], dws[2]);
  expect_identical("layernorm dbias", dbs[0], dbs[1]);
  expect_identical("rmsnorm dweight", dws[1], dws[3]);
}

TEST(EmbeddingGpu, GatherAndScatterAddMatchCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t dim : {1000, 37}) {
      const std::string tag = "embedding dim " + std::to_string(dim);
      const int64_t vocab = 50, tokens = 300;
      const Tensor table = random_tensor({vocab, dim}, dt, 50), ids = random_ids(tokens, vocab, 51);
      Tensor cout_ = Tensor::empty({tokens, dim}, dt), gout = nan_tensor({tokens, dim}, dt);
      embedding_forward(table, ids, cout_);
      embedding_forward(gpu(table), gpu(ids), gout);
      expect_close(tag + " forward", gout, cout_, dt);
      // dtable is an f32 master gradient that accumulates.
      const Tensor dout = random_tensor({tokens, dim}, dt, 52), dt0 = random_tensor({vocab, dim}, DType::f32, 53);
      Tensor cdt = dt0.clone();
      embedding_backward(dout, ids, cdt);
      std::vector<Tensor> runs;
      for (int run = 0; run < 2; ++run) {
        Tensor gdt = gpu(dt0);
        embedding_backward(gpu(dout), gpu(ids), gdt);
        runs.push_back(gdt);
      }
      expect_close(tag + " backward (+=)", runs[0], cdt, DType::f32);
      expect_identical(tag + " backward run to run", runs[0], runs[1]);
    }
  }
}

TEST(RopeGpu, ForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  RopeConfig plain;
  plain.head_dim = 64;
  RopeConfig yarn;
  yarn.head_dim = 80;
  yarn.partial = 0.5;
  yarn.scaling = RopeScaling::yarn;
  yarn.factor = 4.0;
  yarn.original_context = 2048;
  for (const RopeConfig& config : {plain, yarn}) {
    const RopeTable table(config);
    const std::string tag = "rope head_dim " + std::to_string(config.head_dim) + " rotary " +
                            std::to_string(table.rotary_dim);
    for (DType dt : {DType::f32, DType::bf16}) {
      const int64_t tokens = 77, heads = 3;
      const Tensor x = random_tensor({tokens, heads, config.head_dim}, dt, 60);
      const Tensor pos = random_ids(tokens, 8192, 61);
      Tensor cy = Tensor::empty(x.shape(), dt), gy = nan_tensor(x.shape(), dt);
      rope_forward(x, pos, table, cy);
      rope_forward(gpu(x), gpu(pos), table, gy);
      expect_close(tag + " forward", gy, cy, dt);
      Tensor cdx = Tensor::empty(x.shape(), dt);
      rope_backward(x, pos, table, cdx);
      Tensor gdx = gpu(x);  // in place: dx aliases dy
      rope_backward(gdx, gpu(pos), table, gdx);
      expect_close(tag + " backward in place", gdx, cdx, dt);
    }
  }
}

// QK-norm fused with RoPE against the two CPU ops per side, q and k as the heads of one
// stacked projection (token-strided input and input gradient; k with its own gain):
// head_dim 64 and 128 with full rotation and a YaRN head with partial rotation (the
// fused kernel, which passes the unrotated columns through), head_dim 96 (12 packs a
// row: the two GPU ops per side), with and without the norms' gains; and q and k of 80
// heads of 128, whose rows of one token outnumber a block's row slots (several passes);
// 1201 tokens make 151 blocks of weight partials, summed in two launches.
TEST(RopeGpu, QkNormRopeMatchesTheTwoOps) {
  REQUIRE_GPU();
  RopeConfig d64, d128, partial, d96;
  d64.head_dim = 64;
  d96.head_dim = 96;
  d128.head_dim = 128;
  d128.theta = 1e5;
  partial.head_dim = 64;
  partial.partial = 0.5;
  partial.scaling = RopeScaling::yarn;
  partial.factor = 4.0;
  partial.original_context = 2048;
  // q's heads, then k's, then v's (untouched) in the stack.
  struct Stack {
    int64_t q, k, v;
  };
  for (const auto& [config, heads_of] : {std::pair{d64, Stack{5, 2, 2}}, std::pair{d128, Stack{5, 2, 2}},
                                         std::pair{partial, Stack{5, 2, 2}}, std::pair{d96, Stack{5, 2, 2}},
                                         std::pair{d128, Stack{60, 20, 4}}}) {
    const RopeTable table(config);
    for (DType dt : {DType::f32, DType::bf16}) {
      for (bool affine : {true, false}) {
        const std::string tag = "qk_norm_rope head_dim " + std::to_string(config.head_dim) + " rotary " +
                                std::to_string(table.rotary_dim) + " heads " + std::to_string(heads_of.q) + "/" +
                                std::to_string(heads_of.k) + (affine ? " gain" : "");
        const int64_t tokens = 1201, stacked = heads_of.q + heads_of.k + heads_of.v, d = config.head_dim;
        const int64_t ranges[2][2] = {{0, heads_of.q}, {heads_of.q, heads_of.q + heads_of.k}};
        const Tensor stack = random_tensor({tokens, stacked, d}, dt, 70, 2.0f), gstack = gpu(stack);
        const Tensor pos = random_ids(tokens, 8192, 72), gpos = gpu(pos);
        const Tensor grads = random_tensor(stack.shape(), dt, 74);
        Tensor c_stack = grads.clone(), g_stack = gpu(grads);
        QkNormRopeForward cf[2], gf[2];
        QkNormRopeBackward cb[2], gb[2];
        for (int side = 0; side < 2; ++side) {
          const int64_t h0 = ranges[side][0], h1 = ranges[side][1], heads = h1 - h0;
          const Tensor w = affine ? random_tensor({d}, dt, 71 + 10 * side, 0.2f, 1.0f) : Tensor();
          const Tensor dy = random_tensor({tokens, heads, d}, dt, 73 + 10 * side);
          const Tensor dw0 = random_tensor({d}, DType::f32, 75 + 10 * side);
          cf[side] = {stack.slice(1, h0, h1), w, 1e-6, Tensor::empty({tokens, heads, d}, dt),
                      Tensor::empty({tokens * heads}, DType::f32)};
          gf[side] = {gstack.slice(1, h0, h1), affine ? gpu(w) : Tensor(), 1e-6, nan_tensor({tokens, heads, d}, dt),
                      nan_tensor({tokens * heads}, DType::f32)};
          cb[side] = {dy, cf[side].x, w, cf[side].rstd, c_stack.slice(1, h0, h1), affine ? dw0.clone() : Tensor()};
          gb[side] = {gpu(dy), gf[side].x, gf[side].weight, gf[side].rstd, g_stack.slice(1, h0, h1),
                      affine ? gpu(dw0) : Tensor()};
        }
        qk_norm_rope_forward(cf[0], cf[1], pos, table);
        qk_norm_rope_forward(gf[0], gf[1], gpos, table);
        for (int side = 0; side < 2; ++side) {
          const std::string which = tag + (side == 0 ? " q" : " k");
          expect_close(which + " forward", gf[side].y, cf[side].y, dt);
          expect_close(which + " rstd", gf[side].rstd, cf[side].rstd, DType::f32);
        }
        qk_norm_rope_backward(cb[0], cb[1], pos, table);
        qk_norm_rope_backward(gb[0], gb[1], gpos, table);
        expect_close(tag + " dq and dk, whole stack", g_stack, c_stack, dt);
        if (affine)
          for (int side = 0; side < 2; ++side)
            expect_close(tag + (side == 0 ? " q" : " k") + " dweight (+=)", gb[side].dweight, cb[side].dweight, dt);
      }
    }
  }
}

TEST(GemmGpu, EveryTransposeMatchesCpu) {
  REQUIRE_GPU();
  const int64_t m = 33, n = 65, k = 47;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::string tag = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
      const Tensor a = ta ? random_tensor({k, m}, dt, 70) : random_tensor({m, k}, dt, 70);
      const Tensor b = tb ? random_tensor({n, k}, dt, 71) : random_tensor({k, n}, dt, 71);
      const Tensor c0 = random_tensor({m, n}, dt, 72);
      Tensor cc = c0.clone(), gc = gpu(c0);
      gemm(a, ta, b, tb, cc, 0.5, 0.25);
      gemm(gpu(a), ta, gpu(b), tb, gc, 0.5, 0.25);
      expect_close(tag + " alpha/beta", gc, cc, dt);
      // Narrow operands into an f32 output, the parameter-gradient case.
      Tensor cf = Tensor::empty({m, n}, DType::f32), gf = nan_tensor({m, n}, DType::f32);
      gemm(a, ta, b, tb, cf);
      gemm(gpu(a), ta, gpu(b), tb, gf);
      expect_close(tag + " into f32", gf, cf, dt);
    }
  }
}

// A batch of products (3-D operands, one strided-batched cuBLASLt call) against the
// CPU's products one at a time, for every pair of transposes, alpha and beta, and the
// narrow operands into f32; sizes off every tile.
TEST(GemmGpu, BatchOfProductsMatchesCpu) {
  REQUIRE_GPU();
  const int64_t n = 5, m = 33, cols = 65, k = 47;
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::string tag = std::string("batched gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
      const Tensor a = ta ? random_tensor({n, k, m}, dt, 80) : random_tensor({n, m, k}, dt, 80);
      const Tensor b = tb ? random_tensor({n, cols, k}, dt, 81) : random_tensor({n, k, cols}, dt, 81);
      const Tensor c0 = random_tensor({n, m, cols}, dt, 82);
      Tensor cc = c0.clone(), gc = gpu(c0);
      gemm(a, ta, b, tb, cc, 0.5, 0.25);
      gemm(gpu(a), ta, gpu(b), tb, gc, 0.5, 0.25);
      expect_close(tag + " alpha/beta", gc, cc, dt);
      Tensor cf = Tensor::empty({n, m, cols}, DType::f32), gf = nan_tensor({n, m, cols}, DType::f32);
      gemm(a, ta, b, tb, cf);
      gemm(gpu(a), ta, gpu(b), tb, gf);
      expect_close(tag + " into f32", gf, cf, dt);
      // A separate addend, read by the epilogue (Newton-Schulz's aX + alpha P X).
      Tensor ca = Tensor::empty({n, m, cols}, dt), ga = nan_tensor({n, m, cols}, dt);
      gemm(a, ta, b, tb, ca, -1.5, 0.75, c0);
      gemm(gpu(a), ta, gpu(b), tb, ga, -1.5, 0.75, gpu(c0));
      expect_close(tag + " with an addend", ga, ca, dt);
    }
  }
}

// Measured algorithms: the first product of a shape is tuned and recorded under the
// file's header; a process that names the file again reuses the choice (the same
// bits, no new line); a damaged line or a file from another cuBLASLt or card is
// refused; without a file the choices stay in memory.
TEST(GemmGpu, TuningFileRecordsAndReusesChoices) {
  REQUIRE_GPU();
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "amber_gemm_tuning_test.tsv";
  std::filesystem::remove(file);
  const auto lines = [&] {
    std::ifstream in(file);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  const int64_t m = 520, n = 264, k = 136;  // a shape no other test runs
  const Tensor a = random_tensor({m, k}, DType::bf16, 90), b = random_tensor({n, k}, DType::bf16, 91);
  Tensor cc = Tensor::empty({m, n}, DType::f32), first = nan_tensor({m, n}, DType::f32);
  Tensor again = nan_tensor({m, n}, DType::f32);
  gemm(a, false, b, true, cc);
  set_gemm_tuning({.measured = true, .file = file.string()});
  gemm(gpu(a), false, gpu(b), true, first);
  expect_close("tuned gemm", first, cc, DType::bf16);
  EXPECT_EQ(lines(), 2) << "the header and the one product tuned";
  set_gemm_tuning({.measured = true, .file = file.string()});  // as a resumed run: read back, nothing re-timed
  gemm(gpu(a), false, gpu(b), true, again);
  EXPECT_EQ(again.to_doubles(), first.to_doubles());
  EXPECT_EQ(lines(), 2);
  set_gemm_tuning({});
  {
    std::ofstream damaged(file, std::ios::app);
    damaged << "not a product\n";
  }
  EXPECT_THROW(set_gemm_tuning({.measured = true, .file = file.string()}), Error);
  {
    std::ofstream other(file);
    other << "amber-gemm-algorithms cublasLt=1 device=elsewhere\n";
  }
  EXPECT_THROW(set_gemm_tuning({.measured = true, .file = file.string()}), Error);
  set_gemm_tuning({});
  std::filesystem::remove(file);
  // Measured without a file: the choices last for the process, nothing is written.
  Tensor in_memory = nan_tensor({m, n}, DType::f32);
  set_gemm_tuning({.measured = true, .file = ""});
  gemm(gpu(a), false, gpu(b), true, in_memory);
  expect_close("tuned gemm, choices in memory", in_memory, cc, DType::bf16);
  EXPECT_FALSE(std::filesystem::exists(file));
  set_gemm_tuning({});
}

// Products of at most eight rows against a weight (a decode step's: one row per
// sequence), which run the few-rows kernel: alpha/beta, narrow operands into f32, a
// separate addend, k off the 16-byte vectors' steps (and 36: not a whole number of
// bf16 vectors, which goes to cuBLASLt), columns off the warps' groups; nine rows for
// cuBLASLt's side of the boundary. Bits repeat.
TEST(GemmGpu, FewRowsMatchCpu) {
  REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t m : {1, 3, 8, 9})
      for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1, 8}, {100, 776}, {777, 2048}, {65, 6144}, {33, 36}}) {
        const std::string tag = std::string(dtype_name(dt)) + " " + std::to_string(m) + "x" + std::to_string(k) +
                                " by " + std::to_string(n);
        const Tensor a = random_tensor({m, k}, dt, ++seed), b = random_tensor({n, k}, dt, ++seed);
        const Tensor c0 = random_tensor({m, n}, dt, ++seed);
        Tensor cc = c0.clone(), gc = gpu(c0);
        gemm(a, false, b, true, cc, 0.5, 0.25);
        gemm(gpu(a), false, gpu(b), true, gc, 0.5, 0.25);
        expect_close(tag + " alpha/beta", gc, cc, dt);
        Tensor cf = Tensor::empty({m, n}, DType::f32), gf = nan_tensor({m, n}, DType::f32);
        gemm(a, false, b, true, cf);
        gemm(gpu(a), false, gpu(b), true, gf);
        expect_close(tag + " into f32", gf, cf, dt);
        Tensor ca = Tensor::empty({m, n}, dt), ga = nan_tensor({m, n}, dt), again = nan_tensor({m, n}, dt);
        gemm(a, false, b, true, ca, -1.5, 0.75, c0);
        gemm(gpu(a), false, gpu(b), true, ga, -1.5, 0.75, gpu(c0));
        expect_close(tag + " with an addend", ga, ca, dt);
        gemm(gpu(a), false, gpu(b), true, again, -1.5, 0.75, gpu(c0));
        expect_identical(tag + " repeated", again, ga);
      }
}

// A product into a column slice of a wider tensor (how the GLU's forward writes the
// gate half): the slice's rows are written and the other columns keep their values;
// one row too, whose pitch no stride states.
TEST(GemmGpu, WritesIntoAColumnSlice) {
  REQUIRE_GPU();
  const int64_t n = 48, k = 40;
  for (const auto& [m, dt] : {std::pair{int64_t{70}, DType::f32}, std::pair{int64_t{70}, DType::bf16},
                              std::pair{int64_t{1}, DType::bf16}}) {
    const Tensor a = random_tensor({m, k}, dt, 30), b = random_tensor({n, k}, dt, 31);
    Tensor expected = Tensor::empty({m, n}, dt);
    gemm(a, false, b, true, expected);
    Tensor wide = gpu(random_tensor({m, 3 * n}, dt, 32));
    const std::vector<double> before = wide.to(Device::cpu()).to_doubles();
    Tensor middle = wide.slice(1, n, 2 * n);
    gemm(gpu(a), false, gpu(b), true, middle);
    expect_close("gemm into a column slice", middle.contiguous(), expected, dt);
    const std::vector<double> after = wide.to(Device::cpu()).to_doubles();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < 3 * n; ++col)
        if (col < n || col >= 2 * n) {
          ASSERT_EQ(after[r * 3 * n + col], before[r * 3 * n + col]) << r << ", " << col;
        }
  }
}

TEST(GemmGpu, LinearForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  const int64_t rows = 37, in = 96, out = 80;
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = random_tensor({rows, in}, dt, 80), w = random_tensor({out, in}, dt, 81, 0.1f);
    const Tensor bias = random_tensor({out}, dt, 82), dy = random_tensor({rows, out}, dt, 83);
    Tensor cy = Tensor::empty({rows, out}, dt), gy = nan_tensor({rows, out}, dt);
    linear_forward(x, w, bias, cy);
    linear_forward(gpu(x), gpu(w), gpu(bias), gy);
    expect_close("linear forward", gy, cy, dt);
    // The residual add in the product's epilogue (cuBLASLt's C beside its D).
    const Tensor r = random_tensor({rows, out}, dt, 86);
    Tensor cyr = Tensor::empty({rows, out}, dt), gyr = nan_tensor({rows, out}, dt);
    linear_forward(x, w, Tensor(), cyr, r, 0.5);
    linear_forward(gpu(x), gpu(w), Tensor(), gyr, gpu(r), 0.5);
    expect_close("linear forward + 0.5 residual", gyr, cyr, dt);
    const Tensor dw0 = random_tensor({out, in}, DType::f32, 84), db0 = random_tensor({out}, DType::f32, 85);
    Tensor cdx = Tensor::empty(x.shape(), dt), cdw = dw0.clone(), cdb = db0.clone();
    linear_backward(dy, x, w, cdx, cdw, cdb);
    std::vector<Tensor> dbs;
    for (int run = 0; run < 2; ++run) {
      Tensor gdx = nan_tensor(x.shape(), dt), gdw = gpu(dw0), gdb = gpu(db0);
      linear_backward(gpu(dy), gpu(x), gpu(w), gdx, gdw, gdb);
      if (run == 0) {
        expect_close("linear dx", gdx, cdx, dt);
        expect_close("linear dw (+=, f32)", gdw, cdw, dt);
        expect_close("linear dbias (+=, f32)", gdb, cdb, dt);
      }
      dbs.push_back(gdb);
    }
    expect_identical("linear dbias run to run", dbs[0], dbs[1]);
    // Without accumulate_dw: dw written, its old values (NaN) never read.
    Tensor fresh_dw = Tensor::zeros(w.shape(), DType::f32), fresh_db = db0.clone();
    linear_backward(dy, x, w, cdx, fresh_dw, fresh_db);
    Tensor gdx = nan_tensor(x.shape(), dt), gdw = nan_tensor(w.shape(), DType::f32), gdb = gpu(db0);
    linear_backward(gpu(dy), gpu(x), gpu(w), gdx, gdw, gdb, false);
    expect_close("linear dw (=, f32)", gdw, fresh_dw, dt);
  }
}

// Chunks of more rows than an H200 has SMs (the row kernels' blocks then take several
// rows each), and a vocabulary of whole 16-byte groups as well as one of single floats.
TEST(LossGpu, ChunkedLinearCrossEntropyMatchesCpu) {
  REQUIRE_GPU();
  const int64_t tokens = 300, dim = 64;
  CrossEntropyOptions o;
  o.z_loss_weight = 1e-3;
  o.chunk_tokens = 160;  // two chunks, the last one partial
  for (const int64_t vocab : {1000, 1001}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    Tensor targets = random_ids(tokens, vocab, 90);
    for (int64_t t = 0; t < tokens; t += 7) targets.data<int32_t>()[t] = o.ignore_index;
    for (DType dt : {DType::f32, DType::bf16}) {
      const Tensor x = random_tensor({tokens, dim}, dt, 91), w = random_tensor({vocab, dim}, dt, 92, 0.2f);
      Tensor cl = Tensor::empty({tokens}, DType::f32), cs = Tensor::empty({tokens}, DType::f32);
      Tensor gl = nan_tensor({tokens}, DType::f32), gs = nan_tensor({tokens}, DType::f32);
      linear_cross_entropy_forward(x, w, targets, o, cl, cs);
      linear_cross_entropy_forward(gpu(x), gpu(w), gpu(targets), o, gl, gs);
      expect_close("cross-entropy losses", gl, cl, dt);
      expect_close("cross-entropy lse", gs, cs, dt);
      const Tensor dl = random_tensor({tokens}, DType::f32, 93);
      const Tensor dw0 = random_tensor({vocab, dim}, DType::f32, 94);
      Tensor cdx = Tensor::empty(x.shape(), dt), cdw = dw0.clone();
      linear_cross_entropy_backward(dl, x, w, targets, cs, o, cdx, cdw);
      Tensor gdx = nan_tensor(x.shape(), dt), gdw = gpu(dw0);
      linear_cross_entropy_backward(gpu(dl), gpu(x), gpu(w), gpu(targets), gs, o, gdx, gdw);
      expect_close("cross-entropy dx", gdx, cdx, dt);
      expect_close("cross-entropy dw (+=, f32)", gdw, cdw, dt);
      // Training's one-pass call gives the two-call results bit for bit.
      Tensor fl = nan_tensor({tokens}, DType::f32), fs = nan_tensor({tokens}, DType::f32);
      Tensor fdx = nan_tensor(x.shape(), dt), fdw = gpu(dw0);
      linear_cross_entropy_forward_backward(gpu(dl), gpu(x), gpu(w), gpu(targets), o, fl, fs, fdx, fdw);
      expect_identical("fused losses", fl, gl);
      expect_identical("fused lse", fs, gs);
      expect_identical("fused dx", fdx, gdx);
      expect_identical("fused dw", fdw, gdw);
      // Without accumulate_dw: dw written from the first chunk on, its NaN never read.
      Tensor zdw = Tensor::zeros(w.shape(), DType::f32);
      linear_cross_entropy_backward(dl, x, w, targets, cs, o, cdx, zdw);
      Tensor odw = nan_tensor(w.shape(), DType::f32);
      linear_cross_entropy_forward_backward(gpu(dl), gpu(x), gpu(w), gpu(targets), o, fl, fs, fdx, odw, false);
      expect_close("cross-entropy dw (=, f32)", odw, zdw, dt);
    }
  }
}

// The per-step loss sums: GPU chunks (4096 tokens) summed in order against the CPU's
// running sum, added onto sums that are not zero, and the same bits on a second run.
TEST(LossGpu, SumsMatchCpuAndRepeatBitForBit) {
  REQUIRE_GPU();
  const int64_t tokens = 10007;  // two full chunks and a partial one
  CrossEntropyOptions o;
  o.z_loss_weight = 1e-3;
  Tensor targets = random_ids(tokens, 1000, 95);
  for (int64_t t = 0; t < tokens; t += 3) targets.data<int32_t>()[t] = o.ignore_index;
  const Tensor losses = random_tensor({tokens}, DType::f32, 96, 1.0f, 6.0f);
  const Tensor lse = random_tensor({tokens}, DType::f32, 97, 1.0f, 9.0f);
  const Tensor start = Tensor::from_vector<double>({1.5, 0.25, 7.0}, {3});
  Tensor cpu_sums = start.clone();
  linear_cross_entropy_sums(losses, lse, targets, o, cpu_sums);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor g = gpu(start);
    linear_cross_entropy_sums(gpu(losses), gpu(lse), gpu(targets), o, g);
    runs.push_back(g.to_doubles());
  }
  const std::vector<double> want = cpu_sums.to_doubles(), got = runs[0];
  for (int k = 0; k < 2; ++k) {
    const double err = std::abs(got[k] - want[k]) / std::abs(want[k]);
    std::cout << (k == 0 ? "loss" : "z-loss") << " sum gpu vs cpu rel err " << err << "\n";
    EXPECT_LT(err, 1e-12);
  }
  EXPECT_EQ(got[2], want[2]);
  EXPECT_EQ(want[2], 7.0 + static_cast<double>(tokens - (tokens + 2) / 3));
  EXPECT_EQ(runs[0], runs[1]) << "loss sums differ between runs";
}

}  // namespace
}  // namespace amber
