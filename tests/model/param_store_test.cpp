#include <gtest/gtest.h>

#include "amber/model/linear.h"
#include "amber/model/param_store.h"
#include "amber/train/optimizer.h"
#include "ops/testing.h"

namespace amber {
namespace {

// A store with parameters of three roles, declared interleaved, one of them a stack.
struct MixedStore {
  ParamStore store{Placement{}};
  std::shared_ptr<Param> embed, gain, matrix, bias;
  StackedParams stack;

  MixedStore() {
    embed = store.add("embed", {5, 3}, ParamRole::embedding, ParamInit::normal(0.1));
    gain = store.add("gain", {3}, ParamRole::vector, ParamInit::ones());
    stack = store.add_stacked({"q", "k"}, {4, 2}, Shape{3}, ParamRole::hidden_matrix, ParamInit::normal(0.1));
    matrix = store.add("matrix", {3, 3}, ParamRole::hidden_matrix, ParamInit::normal(0.1));
    bias = store.add("bias", {3}, ParamRole::vector, ParamInit::zeros());
    store.allocate();
  }
};

TEST(ParamStore, EachRoleIsOneBufferOfAlignedViews) {
  MixedStore m;
  const auto& buffers = m.store.buffers();
  ASSERT_EQ(buffers.size(), 3u);  // embedding, hidden matrices, vectors: in role order
  EXPECT_EQ(buffers[0].role, ParamRole::embedding);
  EXPECT_EQ(buffers[1].role, ParamRole::hidden_matrix);
  EXPECT_EQ(buffers[2].role, ParamRole::vector);
  // Named parameters in declaration order; a stack's parts, not its whole.
  std::vector<std::string> names;
  for (const auto& p : m.store.params()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "gain", "q", "k", "matrix", "bias"}));
  for (const auto& p : m.store.params()) {
    const ParamStore::Buffer& b = buffers[static_cast<size_t>(p->buffer)];
    EXPECT_EQ(b.role, p->role) << p->name;
    EXPECT_TRUE(p->value.shares_storage_with(b.value) && p->grad.shares_storage_with(b.grad)) << p->name;
    // Writing through the buffer is writing the parameter.
    b.value.slice(0, p->offset, p->offset + 1).fill(7.0);
    EXPECT_EQ(p->value.item(0), 7.0) << p->name;
  }
  // Each allocation starts on the alignment; a stack's parts follow one another.
  for (const auto* p : {m.embed.get(), m.gain.get(), m.stack.parts[0].get(), m.matrix.get(), m.bias.get()})
    EXPECT_EQ(p->offset % ParamStore::kAlignment, 0) << p->name;
  EXPECT_EQ(m.stack.parts[1]->offset, m.stack.parts[0]->offset + 4 * 3);
  EXPECT_EQ(m.matrix->offset, ParamStore::kAlignment);
  EXPECT_EQ(m.bias->offset, ParamStore::kAlignment);
  EXPECT_EQ(buffers[1].params.size(), 3u);  // q, k, matrix
}

TEST(ParamStore, AllocationGivesOnesZerosAndFacts) {
  MixedStore m;
  EXPECT_EQ(m.gain->value.to_doubles(), std::vector<double>(3, 1.0));
  for (const auto& p : m.store.params()) {
    if (p != m.gain) {
      EXPECT_EQ(p->value.to_doubles(), std::vector<double>(p->value.numel(), 0.0)) << p->name;
    }
  }
  // Muon applies to hidden matrices; the stack's parts share one stale-gradient flag.
  EXPECT_TRUE(m.matrix->muon && m.stack.parts[0]->muon);
  EXPECT_FALSE(m.embed->muon || m.gain->muon);
  EXPECT_EQ(m.stack.parts[0]->stale_grad, m.stack.parts[1]->stale_grad);
  EXPECT_EQ(m.stack.whole->stale_grad, m.stack.parts[0]->stale_grad);
  EXPECT_THROW(m.store.add("late", {2}, ParamRole::vector, ParamInit::zeros()), Error);
  EXPECT_THROW(m.store.allocate(), Error);
}

TEST(ParamStore, WorkingCopiesFollowTheirBufferInTheComputeDtype) {
  ParamStore store({DType::f32, Device::cpu(), DType::bf16});
  auto a = store.add("a", {4, 3}, ParamRole::hidden_matrix, ParamInit::zeros());
  auto g = store.add("g", {3}, ParamRole::vector, ParamInit::ones());
  store.allocate();
  EXPECT_EQ(a->work.dtype(), DType::bf16);
  EXPECT_EQ(g->work.to_doubles(), std::vector<double>(3, 1.0));
  a->value.copy_from(testing::random_tensor({4, 3}, DType::f32, 3));
  store.refresh_working_copies();
  EXPECT_EQ(a->work.to_doubles(), a->value.to(DType::bf16).to_doubles());
}

// ZeRO-1's sharded masters: the store keeps one range of each buffer, whose parameters'
// values view it while the others have none; working copies stay whole, a refresh
// writes the kept range's alone, and whole masters open for a checkpoint and close
// keeping what was loaded into them.
TEST(ParamStore, KeptMasterRangesHoldTheirParametersAndOpenWholeForCheckpoints) {
  ParamStore store({DType::f32, Device::cpu(), DType::bf16});
  const StackedParams stack =
      store.add_stacked({"q", "k"}, {4, 2}, Shape{3}, ParamRole::hidden_matrix, ParamInit::normal(0.1));
  auto matrix = store.add("matrix", {3, 3}, ParamRole::hidden_matrix, ParamInit::normal(0.1));
  auto gain = store.add("gain", {3}, ParamRole::vector, ParamInit::ones());
  store.allocate();
  const std::shared_ptr<Param>&q = stack.parts[0], &k = stack.parts[1];
  for (const auto& p : store.params()) p->value.copy_from(testing::random_tensor(p->value.shape(), DType::f32, 5));
  store.refresh_working_copies();
  const std::vector<double> q_value = q->value.to_doubles(), k_work = k->work.to_doubles();

  store.keep_master_ranges({{0, 12}, {0, ParamStore::kAlignment}});  // of the matrices q alone; every vector
  const ParamStore::Buffer& matrices = store.buffers()[0];
  EXPECT_TRUE(store.masters_sharded());
  EXPECT_EQ(matrices.value.numel(), 12);
  EXPECT_EQ(q->value.to_doubles(), q_value);
  EXPECT_FALSE(k->value.defined() || stack.whole->value.defined() || matrix->value.defined());
  EXPECT_TRUE(gain->value.defined());
  EXPECT_EQ(matrices.master_slice(0, 12).numel(), 12);
  EXPECT_THROW(matrices.master_slice(12, 18), Error);
  q->value.fill(0.5);
  store.refresh_working_copies();
  EXPECT_EQ(q->work.to_doubles(), std::vector<double>(12, 0.5));
  EXPECT_EQ(k->work.to_doubles(), k_work);

  store.open_whole_masters();
  EXPECT_EQ(matrices.value.numel(), 2 * ParamStore::kAlignment);  // the stack, then the matrix
  EXPECT_EQ(q->value.to_doubles(), std::vector<double>(12, 0.5));
  EXPECT_EQ(k->value.to_doubles(), std::vector<double>(6, 0.0));
  EXPECT_EQ(stack.whole->value.numel(), 18);
  q->value.fill(2.0);
  store.close_whole_masters(false);
  EXPECT_EQ(q->value.to_doubles(), std::vector<double>(12, 0.5)) << "closed unloaded, the kept range is unchanged";
  store.open_whole_masters();
  q->value.fill(2.0);
  store.close_whole_masters(true);
  EXPECT_EQ(q->value.to_doubles(), std::vector<double>(12, 2.0));
  EXPECT_FALSE(k->value.defined());
  EXPECT_THROW(store.keep_master_ranges({{0, 12}, {0, 3}}), Error) << "sharded once only";

  // Masters that are the working copies stay whole on every rank.
  ParamStore whole(Placement{});
  whole.add("w", {2}, ParamRole::vector, ParamInit::zeros());
  whole.allocate();
  EXPECT_THROW(whole.keep_master_ranges({{0, 2}}), Error);
}

// AdamW updates a buffer's neighbouring parameters of equal hyperparameters as one flat
// run: every parameter ends where an optimizer holding it alone puts it, bit for bit.
TEST(ParamStore, FlatAdamWRunsStepEachParameterAsIfAlone) {
  MixedStore together;
  std::vector<std::unique_ptr<ParamStore>> alone;
  std::vector<std::shared_ptr<Param>> single;
  for (const auto& p : together.store.params()) {
    alone.push_back(std::make_unique<ParamStore>(Placement{}));
    single.push_back(alone.back()->add(p->name, p->value.shape(), p->role, p->init));
    alone.back()->allocate();
  }
  OptimizerConfig c;
  c.embed_lr = 1e-2;  // the embedding's run differs from the other vectors'
  auto fill = [](const std::shared_ptr<Param>& p, uint64_t seed) {
    p->value.copy_from(testing::random_tensor(p->value.shape(), DType::f32, seed));
    p->grad.copy_from(testing::random_tensor(p->value.shape(), DType::f32, seed + 100));
  };
  for (size_t i = 0; i < single.size(); ++i) {
    fill(together.store.params()[i], 10 + i);
    fill(single[i], 10 + i);
  }
  auto batched = build_optimizer(c, together.store);
  for (int step = 0; step < 2; ++step) batched->step(always_apply(1.0, Device::cpu()));
  for (size_t i = 0; i < single.size(); ++i) {
    auto one = build_optimizer(c, *alone[i]);
    for (int step = 0; step < 2; ++step) one->step(always_apply(1.0, Device::cpu()));
    EXPECT_EQ(together.store.params()[i]->value.to_doubles(), single[i]->value.to_doubles()) << single[i]->name;
  }
  // The gaps between parameters stay zero.
  const ParamStore::Buffer& vectors = together.store.buffers()[2];
  EXPECT_EQ(vectors.value.slice(0, 3, ParamStore::kAlignment).to_doubles(),
            std::vector<double>(ParamStore::kAlignment - 3, 0.0));
}

TEST(LinearRecipe, UnknownRecipeIsRefusedNamingTheValidOnes) {
  ParamStore store(Placement{});
  LinearSpec spec{"proj", 4, 2};
  spec.recipe = "fp9";
  try {
    Linear linear(store, spec);
    FAIL() << "an unknown recipe must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("valid: ") + kComputeDtypeRecipe), std::string::npos)
        << e.what();
  }
}

// A Linear's forward and backward through its recipe equal the plain product's, with the
// weight's gradient overwritten after a restart (stale) and added to otherwise.
TEST(LinearRecipe, ComputeDtypeRecipeIsTheProduct) {
  ParamStore store(Placement{DType::f64, Device::cpu(), DType::f64});
  Linear linear(store, {"proj", 3, 2, true});
  store.allocate();
  Param& w = linear.weight();
  w.value.copy_from(testing::random_tensor({2, 3}, DType::f64, 1));
  store.params()[1]->value.copy_from(Tensor::from_vector(std::vector<double>{0.5, -1.0}, {2}));
  const Tensor x = testing::random_tensor({4, 3}, DType::f64, 2), dy = testing::random_tensor({4, 2}, DType::f64, 3);
  Arena arena;
  const Tensor y = linear.forward(x, arena);
  const std::vector<double> xv = x.to_doubles(), wv = w.value.to_doubles(), yv = y.to_doubles(),
                            dyv = dy.to_doubles();
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 2; ++o) {
      double expected = o == 0 ? 0.5 : -1.0;
      for (int i = 0; i < 3; ++i) expected += xv[n * 3 + i] * wv[o * 3 + i];
      EXPECT_NEAR(yv[n * 2 + o], expected, 1e-12);
    }
  w.grad.fill(100.0);
  *w.stale_grad = true;  // as after LanguageModel::restart_grads
  linear.backward(dy, x, arena);
  linear.backward(dy, x, arena);  // the second adds
  const std::vector<double> dw = w.grad.to_doubles();
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 3; ++i) {
      double expected = 0;
      for (int n = 0; n < 4; ++n) expected += dyv[n * 2 + o] * xv[n * 3 + i];
      EXPECT_NEAR(dw[o * 3 + i], 2 * expected, 1e-12);
    }
}

}  // namespace
}  // namespace amber
