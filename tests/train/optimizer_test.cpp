#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/elementwise.h"
#include "amber/ops/optim.h"
#include "amber/train/optimizer.h"
#include "amber/train/schedule.h"
#include "ops/testing.h"

namespace amber {
namespace {

using testing::random_tensor;

// A CPU store holding one hidden matrix per shape, named as the down projections of
// layers 0, 1, ...: what an optimizer over a few stand-alone matrices needs.
std::unique_ptr<ParamStore> matrices(const std::vector<Shape>& shapes) {
  auto store = std::make_unique<ParamStore>(Placement{});
  for (size_t i = 0; i < shapes.size(); ++i)
    store->add("layers." + std::to_string(i) + ".mlp.down_proj.weight", shapes[i], ParamRole::hidden_matrix,
               ParamInit::zeros());
  store->allocate();
  return store;
}

TEST(AdamW, MatchesFloat64ReferenceOverSeveralSteps) {
  const int n = 1000;
  std::vector<double> p = random_tensor({n}, DType::f64, 1).to_doubles(), m(n, 0), v(n, 0);
  Tensor value = Tensor::from_vector(std::vector<float>(p.begin(), p.end()), {n});
  Tensor m32 = Tensor::zeros({n}, DType::f32), v32 = Tensor::zeros({n}, DType::f32);
  const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1};
  Tensor schedule = Tensor::zeros({kScheduleSize}, DType::f64);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, DType::f64, 10 + step, 0.5f);
    const std::vector<double> gd = g.to_doubles();
    for (int i = 0; i < n; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * gd[i];
      v[i] = 0.95 * v[i] + 0.05 * gd[i] * gd[i];
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      p[i] = p[i] - 1e-2 * 0.1 * p[i] - 1e-2 * mh / (std::sqrt(vh) + 1e-8);
    }
    advance_schedule(schedule, always_apply(1.0, Device::cpu()), 0.9, 0.95);
    adamw_step(value, g.to(DType::f32), m32, v32, h, schedule, value);
  }
  EXPECT_LT(testing::relative_error(value, Tensor::from_vector(p, {n})), 1e-6);
}

// Eigenvalues of a symmetric matrix by cyclic Jacobi rotations (test-only, small n).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int n) {
  for (int sweep = 0; sweep < 50; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-22) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        if (std::fabs(a[p * n + q]) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // rotate columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rotate rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> eig(n);
  for (int i = 0; i < n; ++i) eig[i] = a[i * n + i];
  return eig;
}

// Singular values of a [rows, cols] matrix from the eigenvalues of its short Gram.
std::vector<double> singular_values(const Tensor& x) {
  const auto d = x.to_doubles();
  const int rows = static_cast<int>(x.size(0)), cols = static_cast<int>(x.size(1));
  const int m = std::min(rows, cols);
  std::vector<double> gram(static_cast<size_t>(m) * m, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      double s = 0;
      if (rows <= cols)
        for (int k = 0; k < cols; ++k) s += d[i * cols + k] * d[j * cols + k];
      else
        for (int k = 0; k < rows; ++k) s += d[k * cols + i] * d[k * cols + j];
      gram[i * m + j] = s;
    }
  std::vector<double> sv = symmetric_eigenvalues(gram, m);
  for (double& e : sv) e = std::sqrt(std::max(e, 0.0));
  return sv;
}

TEST(Muon, NewtonSchulzBringsSingularValuesIntoTheBand) {
  struct Case {
    NewtonSchulz variant;
    double low, high;
  };
  // cubic5 lands in about [0.774, 1.30]; the quintic in about [0.68, 1.13].
  for (const Case& c : {Case{NewtonSchulz::cubic5, 0.7, 1.35}, Case{NewtonSchulz::quintic5, 0.6, 1.2}}) {
    for (Shape shape : {Shape{48, 96}, Shape{120, 64}}) {
      Tensor g = random_tensor(shape, DType::f32, 3, 2.5f);
      const std::vector<double> before = singular_values(g);
      newton_schulz_orthogonalize(g, c.variant, DType::f32);
      const std::vector<double> after = singular_values(g);
      const auto [lo, hi] = std::minmax_element(after.begin(), after.end());
      const auto [blo, bhi] = std::minmax_element(before.begin(), before.end());
      std::cout << "singular values " << *blo << ".." << *bhi << " -> " << *lo << ".." << *hi << "\n";
      EXPECT_GT(*lo, c.low);
      EXPECT_LT(*hi, c.high);
    }
  }
}

// A batch [n, rows, cols] is orthogonalised matrix by matrix as a 2-D call would do it,
// bit for bit on the CPU, wide and tall, in f32 and in bf16; each matrix is normalised
// by its own norm (the matrices' scales differ by 100x here).
TEST(Muon, BatchedNewtonSchulzMatchesOneMatrixAtATime) {
  for (DType compute : {DType::f32, DType::bf16}) {
    for (Shape shape : {Shape{4, 20, 36}, Shape{3, 40, 24}}) {
      Tensor batch = random_tensor(shape, DType::f32, 21);
      for (int64_t i = 0; i < shape[0]; ++i) {
        Tensor m = batch.select(0, i);
        scale_(m, std::pow(10.0, static_cast<double>(i) - 1.0));
      }
      const Tensor before = batch.clone();
      newton_schulz_orthogonalize(batch, NewtonSchulz::cubic5, compute);
      for (int64_t i = 0; i < shape[0]; ++i) {
        Tensor one = before.select(0, i).clone();
        newton_schulz_orthogonalize(one, NewtonSchulz::cubic5, compute);
        EXPECT_EQ(batch.select(0, i).to_doubles(), one.to_doubles()) << shape << " matrix " << i << " "
                                                                      << dtype_name(compute);
      }
    }
  }
  Tensor t = random_tensor({3, 4}, DType::f32, 22);
  EXPECT_THROW(divide_by_norm_(t, Tensor::full({5}, 1.0, DType::f64), 1e-7, 1.01), Error);
}

// Muon orthogonalises each shape's matrices as one batch: a step over several matrices,
// two of one shape, moves each exactly as an optimizer holding that matrix alone.
TEST(Muon, BatchedMatricesStepAsIfAlone) {
  const std::vector<Shape> shapes = {Shape{16, 24}, Shape{24, 16}, Shape{16, 24}};
  const std::unique_ptr<ParamStore> all = matrices(shapes);
  std::vector<std::unique_ptr<ParamStore>> each;
  std::vector<std::shared_ptr<Param>> together, alone;
  for (size_t i = 0; i < shapes.size(); ++i) {
    each.push_back(matrices({shapes[i]}));
    together.push_back(all->params()[i]);
    alone.push_back(each.back()->params()[0]);
    for (const auto& p : {together.back(), alone.back()}) {
      p->value.copy_from(random_tensor(shapes[i], DType::f32, 30 + i, 0.02f));
      p->grad.copy_from(random_tensor(shapes[i], DType::f32, 40 + i));
    }
  }
  OptimizerConfig c;
  c.name = "muon";
  auto batched = build_optimizer(c, *all);
  std::vector<std::unique_ptr<Optimizer>> single;
  for (const auto& store : each) single.push_back(build_optimizer(c, *store));
  for (int step = 0; step < 2; ++step) {
    batched->step(always_apply(1.0, Device::cpu()));
    for (auto& o : single) o->step(always_apply(1.0, Device::cpu()));
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    EXPECT_EQ(together[i]->value.to_doubles(), alone[i]->value.to_doubles()) << together[i]->name;
}

// An MoE layer's experts, one 3-D parameter, step as if each expert's matrix were a
// parameter of its own.
TEST(Muon, ExpertStacksStepAsSeparateMatrices) {
  auto stacked = std::make_unique<ParamStore>(Placement{});
  const auto experts = stacked->add("layers.0.mlp.experts.down_proj", {3, 16, 24}, ParamRole::expert_matrix,
                                    ParamInit::zeros());
  stacked->allocate();
  const std::unique_ptr<ParamStore> each = matrices({Shape{16, 24}, Shape{16, 24}, Shape{16, 24}});
  experts->value.copy_from(random_tensor({3, 16, 24}, DType::f32, 50, 0.02f));
  experts->grad.copy_from(random_tensor({3, 16, 24}, DType::f32, 51));
  for (int64_t e = 0; e < 3; ++e) {
    each->params()[e]->value.copy_from(experts->value.select(0, e));
    each->params()[e]->grad.copy_from(experts->grad.select(0, e));
  }
  OptimizerConfig c;
  c.name = "muon";
  auto as_stack = build_optimizer(c, *stacked);
  auto as_matrices = build_optimizer(c, *each);
  for (int step = 0; step < 2; ++step) {
    as_stack->step(always_apply(1.0, Device::cpu()));
    as_matrices->step(always_apply(1.0, Device::cpu()));
  }
  for (int64_t e = 0; e < 3; ++e)
    EXPECT_EQ(experts->value.select(0, e).to_doubles(), each->params()[e]->value.to_doubles()) << "expert " << e;
}

// Groups follow the parameters' roles, never their names.
TEST(Muon, OptimizerGroupsFollowThePredecessorRules) {
  ParamStore store(Placement{});
  store.add("a", {10, 4}, ParamRole::embedding, ParamInit::zeros());
  store.add("b", {4, 4}, ParamRole::hidden_matrix, ParamInit::zeros());
  store.add("c", {4}, ParamRole::vector, ParamInit::ones());
  store.add("d", {10, 4}, ParamRole::head, ParamInit::zeros());
  store.allocate();
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 5e-4;
  c.muon_lr = 2e-3;
  c.embed_lr = 2e-3;
  const std::string groups = build_optimizer(c, store)->describe();
  EXPECT_NE(groups.find("muon: 1 tensors"), std::string::npos) << groups;
  EXPECT_NE(groups.find("weight decay 0.025"), std::string::npos) << groups;  // 0.1 * 5e-4 / 2e-3
  EXPECT_NE(groups.find("adamw: 1 tensors, 4e-06M params, lr 0.0005, weight decay 0\n"), std::string::npos) << groups;
  EXPECT_NE(groups.find("lr 0.002, weight decay 0\n"), std::string::npos) << groups;  // embedding
  EXPECT_NE(groups.find("lr 0.0005, weight decay 0.1"), std::string::npos) << groups;  // head
}

TEST(Muon, StepAppliesOrthogonalisedScaledUpdate) {
  const std::unique_ptr<ParamStore> store = matrices({Shape{32, 64}});
  const std::shared_ptr<Param> p = store->params()[0];
  p->value.copy_from(random_tensor({32, 64}, DType::f32, 5, 0.02f));
  p->grad.copy_from(random_tensor({32, 64}, DType::f32, 6));
  const Tensor before = p->value.clone();
  OptimizerConfig c;
  c.name = "muon";
  c.weight_decay = 0.0;
  auto opt = build_optimizer(c, *store);
  opt->step(always_apply(1.0, Device::cpu()));
  Tensor delta = p->value.clone();
  std::vector<double> d = delta.to_doubles(), b = before.to_doubles();
  for (size_t i = 0; i < d.size(); ++i) delta.data<float>()[i] = static_cast<float>((b[i] - d[i]) / 0.02);
  // Scale max(1, sqrt(32/64)) = 1: the applied update is itself near-orthogonal.
  const std::vector<double> sv = singular_values(delta);
  EXPECT_GT(*std::min_element(sv.begin(), sv.end()), 0.7);
  EXPECT_LT(*std::max_element(sv.begin(), sv.end()), 1.35);
  EXPECT_EQ(opt->steps(), 1);
  EXPECT_EQ(opt->state().size(), 1u);
}

// A gate that does not apply leaves weights, state and the step count alone; the next
// applied step uses bias corrections of step 1, and the lr multiplier scales the update.
TEST(Optimizer, GateSkipsAndMultiplierScales) {
  for (const char* name : {"adamw", "muon"}) {
    const std::unique_ptr<ParamStore> store = matrices({Shape{16, 32}}), twin_store = matrices({Shape{16, 32}});
    const std::shared_ptr<Param> p = store->params()[0], twin = twin_store->params()[0];
    p->value.copy_from(random_tensor({16, 32}, DType::f32, 5, 0.02f));
    p->grad.copy_from(random_tensor({16, 32}, DType::f32, 6));
    twin->value.copy_from(p->value);
    twin->grad.copy_from(p->grad);
    OptimizerConfig c;
    c.name = name;
    auto opt = build_optimizer(c, *store), reference = build_optimizer(c, *twin_store);
    const Tensor before = p->value.clone();
    opt->step(Tensor::from_vector(std::vector<double>{0.0, 1.0, 1.0}, {3}));
    EXPECT_EQ(p->value.to_doubles(), before.to_doubles()) << name;
    EXPECT_EQ(opt->steps(), 0) << name;
    for (const StateTensor& s : opt->state())
      for (double x : s.tensor->to_doubles()) ASSERT_EQ(x, 0.0) << name << " " << s.name;
    opt->step(always_apply(0.5, Device::cpu()));
    EXPECT_EQ(opt->steps(), 1) << name;
    reference->step(always_apply(1.0, Device::cpu()));
    // Half the learning rate: half the step (weight decay included, both linear in lr).
    Tensor half = p->value.clone(), full = twin->value.clone();
    add_scaled(half, before, -1.0);
    add_scaled(full, before, -1.0);
    scale_(full, 0.5);
    EXPECT_LT(testing::relative_error(half, full), 1e-5) << name;
  }
}

TEST(Schedule, WarmupThenEachShape) {
  ScheduleConfig c;
  c.warmup_steps = 10;
  c.min_factor = 0.1;
  c.kind = "cosine";
  Schedule s = make_schedule(c, 110);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(9), 1.0);
  EXPECT_DOUBLE_EQ(s(10), 1.0);
  EXPECT_NEAR(s(60), 0.55, 1e-12);
  EXPECT_NEAR(s(110), 0.1, 1e-12);
  c.kind = "linear";
  EXPECT_NEAR(make_schedule(c, 110)(60), 0.55, 1e-12);
  c.kind = "constant";
  EXPECT_DOUBLE_EQ(make_schedule(c, 110)(100), 1.0);
  c.kind = "wsd";
  c.decay_fraction = 0.2;
  s = make_schedule(c, 110);
  EXPECT_DOUBLE_EQ(s(89), 1.0);   // progress 0.79: stable
  EXPECT_NEAR(s(100), 0.55, 1e-12);  // halfway through the decay
  c.warmup_steps = -1;
  c.warmup_fraction = 0.1;
  c.kind = "constant";
  EXPECT_DOUBLE_EQ(make_schedule(c, 100)(4), 0.5);  // 10 warmup steps from a fraction
  c.kind = "cosin";
  EXPECT_THROW(make_schedule(c, 100), Error);
}

// The device-side global norm: per-tensor squared norms into slots of one buffer,
// their in-order root, and the clip factor from that norm, against float64 math.
TEST(GradNorm, SlotsNormAndClipMatchFloat64) {
  const std::vector<Tensor> grads = {random_tensor({70, 33}, DType::f32, 21), random_tensor({9000}, DType::f32, 22),
                                     random_tensor({5}, DType::f32, 23, 3.0f)};
  Tensor squares = Tensor::zeros({3}, DType::f64), norm = Tensor::empty({1}, DType::f64);
  double want = 0;
  for (int64_t i = 0; i < 3; ++i) {
    Tensor slot = squares.slice(0, i, i + 1);
    squared_norm_into(grads[i], slot);
    double sq = 0;
    for (double x : grads[i].to_doubles()) sq += x * x;
    EXPECT_NEAR(squares.item(i), sq, 1e-12 * sq);
    EXPECT_EQ(squares.item(i), squared_norm(grads[i]));
    want += sq;
  }
  Tensor together = Tensor::zeros({3}, DType::f64);
  squared_norms_into(grads, together);
  EXPECT_EQ(together.to_doubles(), squares.to_doubles());
  norm_from_squares(squares, norm);
  want = std::sqrt(want);
  EXPECT_NEAR(norm.item(0), want, 1e-12 * want);

  // Above the norm the scale stays as it was; below it the scale becomes clip / norm.
  Tensor kept = Tensor::full({1}, 1.0, DType::f64);
  clip_scale(kept, norm, 2 * want);
  EXPECT_EQ(kept.item(0), 1.0);
  const double clip = want / 4;
  Tensor clipped = Tensor::full({1}, 1.0, DType::f64);
  clip_scale(clipped, norm, clip);
  EXPECT_EQ(clipped.item(0), clip / norm.item(0));
  // A NaN norm (a step that will be skipped) leaves the scale alone.
  Tensor nan_norm = Tensor::full({1}, NAN, DType::f64);
  clip_scale(kept, nan_norm, clip);
  EXPECT_EQ(kept.item(0), 1.0);

  Tensor wide = Tensor::zeros({2}, DType::f64);
  EXPECT_THROW(squared_norm_into(grads[0], wide), Error);
  EXPECT_THROW(squared_norms_into(grads, wide), Error);
  EXPECT_THROW(clip_scale(kept, norm, 0.0), Error);
  Tensor f32_scale = Tensor::full({1}, 1.0, DType::f32);
  EXPECT_THROW(clip_scale(f32_scale, norm, clip), Error);

  // Newton-Schulz's start: x / (max(|x|, floor) * margin) from the f64 squared norm, with
  // the bits of the host formula; the floor holds for a zero matrix.
  Tensor divided = grads[0].clone(), scaled = grads[0].clone();
  Tensor slot = squares.slice(0, 0, 1).contiguous();
  divide_by_norm_(divided, slot, 1e-7, 1.01);
  scale_(scaled, 1.0 / (std::max(std::sqrt(squares.item(0)), 1e-7) * 1.01));
  EXPECT_EQ(divided.to_doubles(), scaled.to_doubles());
  Tensor zeros = Tensor::zeros({4}, DType::f32), zero_norm = Tensor::zeros({1}, DType::f64);
  divide_by_norm_(zeros, zero_norm, 1e-7, 1.01);
  EXPECT_EQ(zeros.to_doubles(), std::vector<double>(4, 0.0));
}

}  // namespace
}  // namespace amber
