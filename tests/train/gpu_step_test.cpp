#include <gtest/gtest.h>

#include <filesystem>

#include "amber/core/random.h"
#include "amber/ops/optim.h"
#include "amber/train/checkpoint.h"
#include "amber/train/trainer.h"
#include "ops/testing.h"

namespace amber {
namespace {
namespace fs = std::filesystem;

ModelConfig small_model() {
  ModelConfig c;
  c.vocab_size = 300;
  c.dim = 128;  // head_dim 32: a size the CUDA attention kernel takes
  c.depth = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 128;
  c.attn_sink = true;
  c.sliding_window = 24;
  c.z_loss_weight = 1e-3;
  c.loss_chunk_tokens = 64;
  return c;
}

data::Batch random_batch(const std::vector<int32_t>& lengths, int vocab, uint64_t seed) {
  int64_t total = 0;
  for (int32_t l : lengths) total += l;
  Tensor u = Tensor::empty({total}, DType::f64);
  fill_uniform(u, seed, 0);
  std::vector<std::vector<int32_t>> docs;
  int64_t t = 0;
  for (int32_t l : lengths) {
    std::vector<int32_t> doc;
    for (int32_t i = 0; i < l; ++i) doc.push_back(static_cast<int32_t>(u.item(t++) * vocab));
    docs.push_back(doc);
  }
  return data::pack_documents(docs);
}

// The whole f32 training step on the GPU against the CPU step: same Philox
// initialisation on both devices, same packed batch, then loss, every gradient and
// the weights after one AdamW and one Muon step.
TEST(TrainStepGpu, StepMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* optimizer : {"adamw", "muon"}) {
    LanguageModel cpu(small_model()), gpu(small_model(), DType::f32, Device::cuda());
    cpu.init_weights(5);
    gpu.init_weights(5);
    for (size_t i = 0; i < cpu.params().size(); ++i)
      ASSERT_EQ(cpu.params()[i]->value.to_doubles(), gpu.params()[i]->value.to_doubles()) << "init differs";
    const std::vector<data::Batch> batches = {random_batch({1, 127, 128, 129, 50}, 300, 1),
                                              random_batch({300, 7, 13}, 300, 2)};
    const AccumulatedStep a = accumulate_gradients(cpu, batches), b = accumulate_gradients(gpu, batches);
    std::cout << optimizer << ": loss cpu " << a.loss_sum / a.trained_tokens << " gpu " << b.loss_sum / b.trained_tokens << "\n";
    EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-5 * a.loss_sum);
    double worst = 0;
    for (size_t i = 0; i < cpu.params().size(); ++i) {
      const double err = testing::relative_error(gpu.params()[i]->grad, cpu.params()[i]->grad);
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-4) << cpu.params()[i]->name;
    }
    std::cout << "  worst gradient rel err " << worst << "\n";
    EXPECT_NEAR(global_grad_norm(gpu), global_grad_norm(cpu), 1e-5 * global_grad_norm(cpu));
    OptimizerConfig oc;
    oc.name = optimizer;
    oc.lr = 1e-3;
    auto oc_cpu = build_optimizer(oc, cpu.params()), oc_gpu = build_optimizer(oc, gpu.params());
    oc_cpu->step(1.0);
    oc_gpu->step(1.0);
    worst = 0;
    for (size_t i = 0; i < cpu.params().size(); ++i)
      worst = std::max(worst, testing::relative_error(gpu.params()[i]->value, cpu.params()[i]->value));
    std::cout << "  worst weight rel err after one step " << worst << "\n";
    EXPECT_LT(worst, 1e-4);
  }
}

// bf16 compute on the GPU (fp32 master weights and gradients) against the f32 CPU step.
TEST(TrainStepGpu, Bf16StepTracksCpuFloat32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  LanguageModel cpu(small_model()), gpu(small_model(), DType::f32, Device::cuda(), DType::bf16);
  cpu.init_weights(5);
  gpu.init_weights(5);
  const std::vector<data::Batch> batches = {random_batch({1, 127, 128, 129, 50}, 300, 1)};
  const AccumulatedStep a = accumulate_gradients(cpu, batches), b = accumulate_gradients(gpu, batches);
  std::cout << "loss cpu f32 " << a.loss_sum / a.trained_tokens << " gpu bf16 " << b.loss_sum / b.trained_tokens << "\n";
  EXPECT_NEAR(b.loss_sum / a.loss_sum, 1.0, 1e-2);
  double worst = 0;
  for (size_t i = 0; i < cpu.params().size(); ++i) {
    const double err = testing::relative_error(gpu.params()[i]->grad, cpu.params()[i]->grad);
    worst = std::max(worst, err);
    EXPECT_LT(err, 5e-2) << cpu.params()[i]->name;
  }
  std::cout << "  worst gradient rel err " << worst << "\n";
}

TEST(TrainStepGpu, OptimizerMathMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Tensor p = testing::random_tensor({70, 33}, DType::f32, 1), g = testing::random_tensor({70, 33}, DType::f32, 2);
  Tensor pc = p.clone(), mc = Tensor::zeros(p.shape(), DType::f32), vc = Tensor::zeros(p.shape(), DType::f32);
  Tensor pg = p.to(Device::cuda()), mg = Tensor::zeros(p.shape(), DType::f32, Device::cuda());
  Tensor vg = Tensor::zeros(p.shape(), DType::f32, Device::cuda());
  const Tensor gg = g.to(Device::cuda());
  for (int64_t step = 1; step <= 3; ++step) {
    const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1, step};
    adamw_step(pc, g, mc, vc, h);
    adamw_step(pg, gg, mg, vg, h);
  }
  EXPECT_LT(testing::relative_error(pg, pc), 1e-6);
  EXPECT_NEAR(squared_norm(gg), squared_norm(g), 1e-6 * squared_norm(g));
  EXPECT_EQ(squared_norm(gg), squared_norm(gg));  // deterministic
  EXPECT_TRUE(all_finite(gg));
  Tensor bad = g.clone();
  bad.data<float>()[777] = NAN;
  EXPECT_FALSE(all_finite(bad.to(Device::cuda())));
  for (Shape shape : {Shape{48, 96}, Shape{120, 64}}) {
    Tensor xc = testing::random_tensor(shape, DType::f32, 3), xg = xc.to(Device::cuda());
    newton_schulz_orthogonalize(xc, NewtonSchulz::cubic5, DType::f32);
    newton_schulz_orthogonalize(xg, NewtonSchulz::cubic5, DType::f32);
    const double err = testing::relative_error(xg, xc);
    std::cout << "Newton-Schulz " << shape << " gpu vs cpu rel err " << err << "\n";
    EXPECT_LT(err, 1e-5);
  }
}

// A checkpoint written from the GPU resumes on the CPU, and the reverse.
TEST(TrainStepGpu, CheckpointsMoveBetweenDevices) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string out = (fs::temp_directory_path() / "amber_gpu_checkpoint").string();
  fs::remove_all(out);
  LanguageModel gpu(small_model(), DType::f32, Device::cuda());
  gpu.init_weights(9);
  auto opt_gpu = build_optimizer({}, gpu.params());
  const std::string dir = save_checkpoint(out, 1, gpu, *opt_gpu, {{"tokens_seen", 0}}, 2);
  LanguageModel cpu(small_model());
  auto opt_cpu = build_optimizer({}, cpu.params());
  load_checkpoint(dir, cpu, opt_cpu.get());
  for (size_t i = 0; i < cpu.params().size(); ++i)
    ASSERT_EQ(cpu.params()[i]->value.to_doubles(), gpu.params()[i]->value.to_doubles());
  cpu.init_weights(10);
  const std::string back = save_checkpoint(out, 2, cpu, *opt_cpu, {{"tokens_seen", 0}}, 2);
  load_checkpoint(back, gpu, opt_gpu.get());
  for (size_t i = 0; i < cpu.params().size(); ++i)
    ASSERT_EQ(cpu.params()[i]->value.to_doubles(), gpu.params()[i]->value.to_doubles());
  fs::remove_all(out);
}

}  // namespace
}  // namespace amber
