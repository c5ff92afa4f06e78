// Tests of the CPU attention op: the forward against a naive float64 reference, the
// backward against finite differences, and the invariants any attention kernel keeps
// (GQA, windows, document isolation, determinism, errors that name the shape).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "amber/ops/attention.h"
#include "amber/ops/rope.h"
#include "ops/testing.h"

namespace amber {
namespace {

// The kernels work in 32- and 64-row blocks; these lengths sit on both sides of 32- and 64-row
// tiles, include a single-token document and one longer than two 64-row tiles.
const std::vector<int32_t> kLengths = {1, 31, 32, 33, 63, 64, 65, 130, 7};

struct Case {
  const char* name;
  std::vector<int32_t> lengths;
  int64_t heads, kv_heads, dim;
  int window;
  bool sinks;
};

// One problem: its layout and inputs in a single dtype; sinks undefined when absent.
struct Problem {
  SeqInfo seq;
  AttentionOptions options;
  Tensor q, k, v, sinks;
  int64_t heads() const { return q.size(1); }
};

Problem make_problem(const Case& c, uint64_t seed) {
  Problem p;
  p.seq = SeqInfo::from_lengths(c.lengths);
  const int64_t t = p.seq.total_tokens;
  p.options.softmax_scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  p.options.window = c.window;
  // A wider q makes the softmax peaked, so the online rescaling actually matters.
  p.q = testing::random_tensor({t, c.heads, c.dim}, DType::f64, seed, 1.5f);
  p.k = testing::random_tensor({t, c.kv_heads, c.dim}, DType::f64, seed + 1);
  p.v = testing::random_tensor({t, c.kv_heads, c.dim}, DType::f64, seed + 2);
  if (c.sinks) p.sinks = testing::random_tensor({c.heads}, DType::f64, seed + 3);
  return p;
}

Problem cast(const Problem& p, DType dtype) {
  Problem out = p;
  out.q = p.q.to(dtype);
  out.k = p.k.to(dtype);
  out.v = p.v.to(dtype);
  // Sinks stay f32 beside narrow activations, as a model's f32 master copy would.
  if (p.sinks.defined()) out.sinks = p.sinks.to(dtype == DType::f64 ? DType::f64 : DType::f32);
  return out;
}

struct Forward {
  Tensor out, lse;
};

Forward forward(const Problem& p) {
  Forward f;
  f.out = Tensor::empty(p.q.shape(), p.q.dtype());
  f.lse = Tensor::empty({p.seq.total_tokens, p.heads()},
                        p.q.dtype() == DType::f64 ? DType::f64 : DType::f32);
  attention_forward(p.q, p.k, p.v, p.seq, p.options, p.sinks, f.out, f.lse);
  return f;
}

struct Grads {
  Tensor dq, dk, dv, dsinks;
};

Grads backward(const Problem& p, const Forward& f, const Tensor& dout) {
  Grads g;
  g.dq = Tensor::empty(p.q.shape(), p.q.dtype());
  g.dk = Tensor::empty(p.k.shape(), p.k.dtype());
  g.dv = Tensor::empty(p.v.shape(), p.v.dtype());
  if (p.sinks.defined()) g.dsinks = Tensor::zeros(p.sinks.shape(), p.sinks.dtype());
  attention_backward(dout.to(p.q.dtype()), p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, p.sinks,
                     g.dq, g.dk, g.dv, g.dsinks);
  return g;
}

// Naive float64 attention: materialises each document's score matrix.
Forward reference(const Problem& p) {
  const std::vector<double> q = p.q.to_doubles(), k = p.k.to_doubles(), v = p.v.to_doubles();
  const std::vector<double> sinks =
      p.sinks.defined() ? p.sinks.to_doubles() : std::vector<double>{};
  const int64_t H = p.q.size(1), Hkv = p.k.size(1), D = p.q.size(2), T = p.seq.total_tokens;
  const int w = p.options.window;
  std::vector<double> out(static_cast<size_t>(T * H * D), 0.0), lse(static_cast<size_t>(T * H));
  for (int doc = 0; doc < p.seq.num_docs; ++doc) {
    const int64_t start = p.seq.doc_start(doc), L = p.seq.doc_length(doc);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      std::vector<double> scores(static_cast<size_t>(L * L), -INFINITY);
      for (int64_t i = 0; i < L; ++i) {
        double m = sinks.empty() ? -INFINITY : sinks[h];
        for (int64_t j = 0; j <= i; ++j) {
          if (w > 0 && j <= i - w) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += q[((start + i) * H + h) * D + d] * k[((start + j) * Hkv + g) * D + d];
          }
          scores[i * L + j] = s * p.options.softmax_scale;
          m = std::max(m, scores[i * L + j]);
        }
        double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - m);
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(scores[i * L + j] - m);
        const double row_lse = m + std::log(sum);
        lse[(start + i) * H + h] = row_lse;
        for (int64_t j = 0; j <= i; ++j) {
          const double prob = std::exp(scores[i * L + j] - row_lse);
          for (int64_t d = 0; d < D; ++d) {
            out[((start + i) * H + h) * D + d] += prob * v[((start + j) * Hkv + g) * D + d];
          }
        }
      }
    }
  }
  return {Tensor::from_vector(out, p.q.shape()), Tensor::from_vector(lse, {T, H})};
}

// Number of elements whose bits differ (shapes and dtypes must match).
int64_t differing(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  const size_t es = dtype_size(a.dtype());
  const char* x = static_cast<const char*>(a.contiguous().raw());
  const char* y = static_cast<const char*>(b.contiguous().raw());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += std::memcmp(x + i * es, y + i * es, es) != 0;
  return n;
}

int64_t differing(const Forward& a, const Forward& b) {
  return differing(a.out, b.out) + differing(a.lse, b.lse);
}

int64_t differing(const Grads& a, const Grads& b) {
  int64_t n = differing(a.dq, b.dq) + differing(a.dk, b.dk) + differing(a.dv, b.dv);
  if (a.dsinks.defined()) n += differing(a.dsinks, b.dsinks);
  return n;
}

const std::vector<Case> kForwardCases = {
    {"mha d64", kLengths, 4, 4, 64, 0, false},
    {"mha d16 window5", kLengths, 4, 4, 16, 5, false},
    {"gqa d16 window5 sinks", kLengths, 4, 2, 16, 5, true},
    {"gqa d64 window40", kLengths, 4, 2, 64, 40, false},
    {"mqa d64 sinks", kLengths, 4, 1, 64, 0, true},
};

TEST(Attention, ForwardMatchesFloat64Reference) {
  uint64_t seed = 100;
  for (const Case& c : kForwardCases) {
    const Problem p = make_problem(c, seed += 10);
    for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      // Narrow dtypes are judged on what the kernel saw: the reference reads the
      // rounded inputs, so the error left is the kernel's own plus the output rounding.
      const Problem narrow = cast(p, dtype);
      const Forward ref = reference(cast(narrow, DType::f64));
      const Forward got = forward(narrow);
      const double out_err = testing::relative_error(got.out, ref.out);
      const double lse_err = testing::relative_error(got.lse, ref.lse);
      std::printf("attention forward %-22s %-4s out rel err %.2e  lse rel err %.2e\n", c.name,
                  std::string(dtype_name(dtype)).c_str(), out_err, lse_err);
      const double tol = dtype == DType::f64 ? 1e-13 : dtype == DType::f32 ? 1e-5 : 1e-2;
      EXPECT_LT(out_err, tol);
      // lse is stored in f32 for every narrow input, so it keeps f32 accuracy.
      EXPECT_LT(lse_err, dtype == DType::f64 ? 1e-13 : 1e-5);
    }
  }
}

const std::vector<Case> kBackwardCases = {
    {"gqa d16 sinks", {1, 33, 70, 6}, 4, 2, 16, 0, true},
    {"gqa d16 window5 sinks", {1, 33, 70, 6}, 4, 2, 16, 5, true},
    {"mqa d16 window40", {1, 33, 70, 6}, 4, 1, 16, 40, false},
    {"mha d64", {1, 33, 70, 6}, 2, 2, 64, 0, false},
};

// The loss sums thousands of terms, so a step of 1e-6 leaves central differences at the
// mercy of its rounding (~1e-6 relative on small gradients); at 1e-4 the truncation
// error is still far below 1e-7.
constexpr double kStep = 1e-4;

TEST(Attention, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 200;
  for (const Case& c : kBackwardCases) {
    SCOPED_TRACE(c.name);
    Problem p = make_problem(c, seed += 10);
    const Tensor weights = testing::random_tensor(p.q.shape(), DType::f64, seed + 5);
    const Grads g = backward(p, forward(p), weights);
    const auto loss = [&] { return testing::project(forward(p).out, weights); };
    const double dq = testing::finite_difference_error(p.q, g.dq, loss, 48, kStep);
    const double dk = testing::finite_difference_error(p.k, g.dk, loss, 48, kStep);
    const double dv = testing::finite_difference_error(p.v, g.dv, loss, 48, kStep);
    const double ds = p.sinks.defined()
                          ? testing::finite_difference_error(p.sinks, g.dsinks, loss, 48, kStep)
                          : 0;
    std::printf("attention backward fd %-22s dq %.2e  dk %.2e  dv %.2e  dsinks %.2e\n", c.name, dq,
                dk, dv, ds);
    EXPECT_LT(dq, 1e-6);
    EXPECT_LT(dk, 1e-6);
    EXPECT_LT(dv, 1e-6);
    EXPECT_LT(ds, 1e-6);
  }
}

TEST(Attention, NarrowBackwardMatchesFloat64Backward) {
  uint64_t seed = 300;
  for (const Case& c : kForwardCases) {
    const Problem p = make_problem(c, seed += 10);
    const Tensor dout = testing::random_tensor(p.q.shape(), DType::f64, seed + 5);
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      const Problem narrow = cast(p, dtype);
      const Problem wide = cast(narrow, DType::f64);
      const Tensor dout_narrow = dout.to(dtype).to(DType::f64);
      const Grads ref = backward(wide, forward(wide), dout_narrow);
      const Grads got = backward(narrow, forward(narrow), dout_narrow);
      const double dq = testing::relative_error(got.dq, ref.dq);
      const double dk = testing::relative_error(got.dk, ref.dk);
      const double dv = testing::relative_error(got.dv, ref.dv);
      const double ds = p.sinks.defined() ? testing::relative_error(got.dsinks, ref.dsinks) : 0;
      std::printf("attention backward %-22s %-4s dq %.2e  dk %.2e  dv %.2e  dsinks %.2e\n", c.name,
                  std::string(dtype_name(dtype)).c_str(), dq, dk, dv, ds);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
      EXPECT_LT(dq, tol);
      EXPECT_LT(dk, tol);
      EXPECT_LT(dv, tol);
      EXPECT_LT(ds, tol);
    }
  }
}

TEST(Attention, DsinksAccumulates) {
  const Problem p = make_problem({"gqa sinks", {5, 40}, 4, 2, 16, 0, true}, 400);
  const Tensor dout = testing::random_tensor(p.q.shape(), DType::f64, 405);
  const Forward f = forward(p);
  const Grads once = backward(p, f, dout);
  Grads twice = once;
  twice.dsinks = Tensor::full(p.sinks.shape(), 0.5, DType::f64);
  attention_backward(dout, p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, p.sinks, twice.dq,
                     twice.dk, twice.dv, twice.dsinks);
  const std::vector<double> a = once.dsinks.to_doubles(), b = twice.dsinks.to_doubles();
  for (size_t h = 0; h < a.size(); ++h) EXPECT_DOUBLE_EQ(b[h], 0.5 + a[h]) << "head " << h;
}

// K and V [T, Hkv, D] with every KV head repeated for its query heads: [T, H, D].
Tensor repeat_heads(const Tensor& x, int64_t heads) {
  const int64_t group = heads / x.size(1);
  Tensor out = Tensor::empty({x.size(0), heads, x.size(2)}, x.dtype());
  for (int64_t h = 0; h < heads; ++h) out.select(1, h).copy_from(x.select(1, h / group));
  return out;
}

TEST(Attention, GqaEqualsMhaWithRepeatedKv) {
  const Problem gqa = cast(make_problem({"gqa", kLengths, 4, 2, 32, 0, true}, 500), DType::f32);
  Problem mha = gqa;
  mha.k = repeat_heads(gqa.k, 4);
  mha.v = repeat_heads(gqa.v, 4);
  const Tensor dout = testing::random_tensor(gqa.q.shape(), DType::f32, 505);
  const Forward fg = forward(gqa), fm = forward(mha);
  EXPECT_EQ(differing(fg, fm), 0);
  const Grads gg = backward(gqa, fg, dout), gm = backward(mha, fm, dout);
  EXPECT_EQ(differing(gg.dq, gm.dq), 0);
  EXPECT_EQ(differing(gg.dsinks, gm.dsinks), 0);
  // The GQA kernel sums a KV head's query heads in one accumulator; the MHA sum is
  // formed here, so only rounding separates them.
  for (const auto& [name, got, per_head] :
       {std::tuple{"dk", gg.dk, gm.dk}, std::tuple{"dv", gg.dv, gm.dv}}) {
    const Tensor wide = per_head.to(DType::f64);
    Tensor summed = Tensor::zeros(got.shape(), DType::f64);
    double* s = summed.data<double>();
    const double* w = wide.data<double>();
    const int64_t T = got.size(0), Hkv = got.size(1), D = got.size(2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t d = 0; d < D; ++d) s[(t * Hkv + h / 2) * D + d] += w[(t * 4 + h) * D + d];
    const double err = testing::relative_error(got, summed);
    std::printf("attention gqa vs repeated-kv mha %s rel err %.2e\n", name, err);
    EXPECT_LT(err, 1e-6) << name;
  }
}

TEST(Attention, WindowCoveringEveryDocumentEqualsNoWindow) {
  const Problem open = cast(make_problem({"open", kLengths, 4, 2, 16, 0, true}, 600), DType::f32);
  const Tensor dout = testing::random_tensor(open.q.shape(), DType::f32, 605);
  const Forward f_open = forward(open);
  const Grads g_open = backward(open, f_open, dout);
  for (int window : {open.seq.max_seqlen, 1000}) {
    SCOPED_TRACE(window);
    Problem windowed = open;
    windowed.options.window = window;
    const Forward f = forward(windowed);
    EXPECT_EQ(differing(f, f_open), 0);
    EXPECT_EQ(differing(backward(windowed, f, dout), g_open), 0);
  }
}

TEST(Attention, ZeroScaleMeansInverseSqrtHeadDim) {
  const Problem explicit_scale = make_problem({"scale", {9, 40}, 2, 1, 16, 0, false}, 650);
  Problem zero = explicit_scale;
  zero.options.softmax_scale = 0;
  EXPECT_EQ(differing(forward(zero), forward(explicit_scale)), 0);
}

TEST(Attention, DocumentsDoNotSeeEachOther) {
  for (int window : {0, 5}) {
    SCOPED_TRACE(window);
    const Problem base =
        cast(make_problem({"docs", kLengths, 4, 2, 16, window, true}, 700), DType::f32);
    const Tensor dout = testing::random_tensor(base.q.shape(), DType::f32, 705);
    const int changed = 5;  // the 64-token document, in the middle of the batch
    const int64_t begin = base.seq.doc_start(changed), end = begin + base.seq.doc_length(changed);
    Problem other = base;
    other.q = base.q.clone();
    other.k = base.k.clone();
    other.v = base.v.clone();
    for (Tensor* t : {&other.q, &other.k, &other.v}) {
      Tensor rows = t->slice(0, begin, end);
      rows.copy_from(testing::random_tensor(rows.shape(), DType::f32, 710));
    }
    const Forward fa = forward(base), fb = forward(other);
    const Grads ga = backward(base, fa, dout), gb = backward(other, fb, dout);
    const auto outside = [&](const Tensor& a, const Tensor& b) {
      return differing(a.slice(0, 0, begin), b.slice(0, 0, begin)) +
             differing(a.slice(0, end, a.size(0)), b.slice(0, end, b.size(0)));
    };
    EXPECT_EQ(outside(fa.out, fb.out) + outside(fa.lse, fb.lse), 0);
    EXPECT_EQ(outside(ga.dq, gb.dq) + outside(ga.dk, gb.dk) + outside(ga.dv, gb.dv), 0);
    // ... while the changed document itself did change.
    EXPECT_GT(differing(fa.out.slice(0, begin, end), fb.out.slice(0, begin, end)), 0);
  }
}

TEST(Attention, ThreadCountDoesNotChangeBits) {
  const int saved = omp_get_max_threads();
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Problem p = cast(make_problem({"threads", kLengths, 4, 2, 32, 5, true}, 800), dtype);
    const Tensor dout = testing::random_tensor(p.q.shape(), dtype, 805);
    omp_set_num_threads(1);
    const Forward f1 = forward(p);
    const Grads g1 = backward(p, f1, dout);
    // More threads than this machine may have cores still splits the work differently.
    omp_set_num_threads(std::max(4, omp_get_num_procs()));
    const Forward fn = forward(p);
    const Grads gn = backward(p, fn, dout);
    omp_set_num_threads(saved);
    EXPECT_EQ(differing(f1, fn), 0);
    EXPECT_EQ(differing(g1, gn), 0);
  }
}

// Runs `fn`, expecting an amber::Error whose message contains every one of `parts`.
template <class Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

TEST(Attention, BadShapesNameTheShape) {
  const Problem p = make_problem({"errors", {3, 7}, 4, 2, 8, 0, true}, 900);
  const auto run = [](const Problem& bad) { forward(bad); };
  Problem heads = p;
  heads.q = testing::random_tensor({10, 3, 8}, DType::f64, 1);
  heads.sinks = Tensor();
  expect_error([&] { run(heads); }, {"[10, 3, 8]", "[10, 2, 8]", "multiple"});
  Problem dim = p;
  dim.k = testing::random_tensor({10, 2, 16}, DType::f64, 2);
  dim.v = dim.k;
  expect_error([&] { run(dim); }, {"[10, 4, 8]", "[10, 2, 16]", "head_dim"});
  Problem sinks = p;
  sinks.sinks = Tensor::zeros({5}, DType::f64);
  expect_error([&] { run(sinks); }, {"sinks", "[4]", "[5]"});
  Problem tokens = p;
  tokens.seq = SeqInfo::from_lengths({3, 8});
  expect_error([&] { run(tokens); }, {"[10, 4, 8]", "11 tokens"});
  Problem strided = p;
  strided.q = testing::random_tensor({10, 8, 4}, DType::f64, 3).transpose(1, 2);
  expect_error([&] { run(strided); }, {"q", "[10, 4, 8]", "contiguous"});
  Problem window = p;
  window.options.window = -1;
  expect_error([&] { run(window); }, {"window", "-1"});
  const Forward f = forward(p);
  Tensor dq = Tensor::empty(p.q.shape(), DType::f64), dk = Tensor::empty(p.k.shape(), DType::f64),
         dv = Tensor::empty(p.v.shape(), DType::f64), dsinks = Tensor::zeros({2}, DType::f64);
  expect_error(
      [&] {
        attention_backward(f.out, p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, p.sinks, dq, dk,
                           dv, dsinks);
      },
      {"dsinks", "[4]", "[2]"});
}

// With a QkNormRopeGrad the CPU runs the attention's backward, then the QK-norm + RoPE
// backward on its dq and dk: the same bits as the two ops called one after the other.
// (The GPU's fused form is checked against this in attention_gpu_test.cpp.)
TEST(Attention, QkNormRopeGradRunsOnTheAttentionsGradients) {
  const Problem p = make_problem({"qk", {3, 9, 1}, 4, 2, 8, 0, false}, 950);
  const Forward f = forward(p);
  const Tensor dout = testing::random_tensor(p.q.shape(), DType::f64, 951);
  RopeConfig config;
  config.head_dim = 8;
  const RopeTable table(config);
  const int64_t t = p.seq.total_tokens;
  const Tensor wq = testing::random_tensor({8}, DType::f64, 952), wk = testing::random_tensor({8}, DType::f64, 953);
  QkNormRopeForward qf{p.q, wq, 1e-6, Tensor::empty(p.q.shape(), DType::f64), Tensor::empty({t * 4}, DType::f64)};
  QkNormRopeForward kf{p.k, wk, 1e-6, Tensor::empty(p.k.shape(), DType::f64), Tensor::empty({t * 2}, DType::f64)};
  qk_norm_rope_forward(qf, kf, p.seq.positions, table);
  const auto side = [](const QkNormRopeForward& fw, const Tensor& dy) {
    return QkNormRopeBackward{dy, fw.x, fw.weight, fw.rstd, Tensor::empty(fw.x.shape(), DType::f64),
                              Tensor::zeros({8}, DType::f64)};
  };
  const Grads separate = backward(p, f, dout);
  const QkNormRopeBackward q_sep = side(qf, separate.dq), k_sep = side(kf, separate.dk);
  qk_norm_rope_backward(q_sep, k_sep, p.seq.positions, table);

  Tensor dq = Tensor::empty(p.q.shape(), DType::f64), dk = Tensor::empty(p.k.shape(), DType::f64);
  Tensor dv = Tensor::empty(p.v.shape(), DType::f64), none;
  const QkNormRopeGrad then{side(qf, Tensor()), side(kf, Tensor()), p.seq.positions, &table};
  attention_backward(dout, p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, none, dq, dk, dv, none, &then);
  for (const auto& [what, a, b] : {std::tuple{"q's dx", then.q.dx, q_sep.dx}, {"k's dx", then.k.dx, k_sep.dx},
                                   {"q's dweight", then.q.dweight, q_sep.dweight},
                                   {"k's dweight", then.k.dweight, k_sep.dweight}, {"dv", dv, separate.dv}}) {
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0) << what;
  }

  QkNormRopeGrad no_table = then;
  no_table.table = nullptr;
  expect_error([&] { attention_backward(dout, p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, none, dq, dk, dv,
                                        none, &no_table); },
               {"QK-norm + RoPE", "RopeTable"});
  QkNormRopeGrad short_dx = then;
  short_dx.q.dx = Tensor::empty({t, 3, 8}, DType::f64);
  expect_error([&] { attention_backward(dout, p.q, p.k, p.v, f.out, f.lse, p.seq, p.options, none, dq, dk, dv,
                                        none, &short_dx); },
               {"[" + std::to_string(t) + ", 3, 8]"});
}

}  // namespace
}  // namespace amber
