#include "bench/step_bench.h"

#include <chrono>
#include <cmath>

#include "amber/core/cuda_runtime.h"
#include "amber/core/random.h"
#include "amber/dist/communicator.h"
#include "amber/model/flops.h"
#include "amber/model/language_model.h"
#include "amber/ops/gemm.h"
#include "amber/train/step.h"
#include "bench/attention_bench.h"
#include "bench/op_profile.h"
#include "bench/op_repeat.h"

namespace amber {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void wait_for(Device device) {
  if (device.is_cuda()) cuda::synchronize();
}

// The dense-GEMM ceiling of this device in `dtype`: median-free best of a few runs
// of an 8192^3 product on random operands (zeros would run faster than real data).
double measure_gemm_tflops(Device device, DType dtype) {
  const int64_t n = 8192;
  Tensor a = Tensor::empty({n, n}, dtype, device), b = Tensor::empty({n, n}, dtype, device);
  Tensor c = Tensor::empty({n, n}, dtype, device);
  fill_normal(a, 11, 0);
  fill_normal(b, 12, 0);
  gemm(a, false, b, true, c);
  wait_for(device);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) gemm(a, false, b, true, c);
    wait_for(device);
    best = std::min(best, seconds_since(start) / 4);
  }
  return 2.0 * n * n * n / best / 1e12;
}

data::Batch synthetic_batch(const StepBenchOptions& o) {
  Tensor u = Tensor::empty({o.tokens}, DType::f64);
  fill_uniform(u, o.seed, 0);
  // The lengths bench/compare/step_torch.py uses too (doc_lengths.py), so both arms
  // see the same document boundaries.
  std::vector<std::vector<int32_t>> docs;
  int64_t t = 0;
  for (int32_t l : spread_lengths(o.tokens, o.doc_min, o.doc_max)) {
    std::vector<int32_t> doc;
    for (int32_t i = 0; i < l; ++i, ++t)
      doc.push_back(static_cast<int32_t>(u.item(t) * o.model.vocab_size) % o.model.vocab_size);
    docs.push_back(doc);
  }
  return data::pack_documents(docs);
}

}  // namespace

StepBenchResult run_step_bench(const StepBenchOptions& o) {
  AMBER_CHECK(o.tokens > 0 && o.doc_min > 0 && o.doc_min <= o.doc_max && o.steps > 0 && o.warmup >= 0,
              "bench step: tokens, document lengths (min <= max) and steps must be positive");
  AMBER_CHECK(o.warmup_seconds >= 0 && std::isfinite(o.warmup_seconds),
              "bench step: the warm-up time must be a finite number of seconds >= 0, got ", o.warmup_seconds);
  // --twice holds for this benchmark only, and is counted over its first step (which
  // runs eagerly: a graph, once captured, repeats what its capture recorded).
  struct TwiceScope {
    explicit TwiceScope(const std::string& op) { profile::set_twice(op); }
    ~TwiceScope() { profile::set_twice(""); }
  } twice_scope(o.twice);
  const Device device = device_from_name(o.device);
  LanguageModel model(o.model, DType::f32, device, dtype_from_name(o.compute_dtype));
  model.init_weights(o.seed);
  auto optimizer = build_optimizer(o.optimizer, model.store());
  // The batch stays on the host, as the loader hands it over; the step stages it.
  const data::Batch batch = synthetic_batch(o);
  const std::vector<data::Batch> micro = {batch};
  StepBenchResult r;
  r.lengths = batch.seq.lengths();
  r.on_gpu = device.is_cuda();
  // The loss stays on the device until the timed steps are done: reading it per step
  // would add a host synchronisation the trainer does not have per micro-batch.
  const std::unique_ptr<dist::Communicator> comm =
      o.communicator ? dist::connect_communicator(dist::detect_launch_env(), device, {}) : nullptr;
  AMBER_CHECK(!comm || comm->world_size() == 1, "bench step --communicator: the step is timed at a world of one, but ",
              "the launcher started ", comm ? comm->world_size() : 0, " ranks");
  TrainStep step(model, optimizer.get(),
                 {.grad_clip = o.grad_clip, .cuda_graph = o.cuda_graph, .communicator = comm.get()});
  r.backend = comm ? comm->backend() : "none";
  // A graph's ops are timed by event nodes recorded at its capture, in a warm-up step.
  const bool profile_graph = o.profile && o.cuda_graph && device.is_cuda();
  if (profile_graph) profile::start();
  int64_t steps_run = 0;
  const auto run_step = [&] {
    step.run(micro, 1.0, batch.trained_tokens);
    if (++steps_run == 1) r.twice_calls = profile::doubled_calls();
  };
  // The counted steps (GEMM tuning, the graph's capture), then steps of steady load.
  for (; r.warmup_steps < o.warmup; ++r.warmup_steps) run_step();
  wait_for(device);
  for (const auto warm = std::chrono::steady_clock::now(); seconds_since(warm) < o.warmup_seconds; ++r.warmup_steps) {
    run_step();
    wait_for(device);  // the clock measures work done, not work queued
  }
  if (device.is_cuda()) cuda::reset_pool_peak(device.index);
  if (o.profile && !profile_graph) profile::start(device.is_cuda() ? profile::Clock::gpu : profile::Clock::host);
  if (device.is_cuda()) cuda::start_card_sampling(device.index);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) {
    run_step();
    if (profile_graph) profile::sample_replay();
  }
  wait_for(device);
  if (device.is_cuda()) r.card = cuda::stop_card_sampling();
  const double seconds = seconds_since(start) / o.steps;
  if (o.profile)
    r.op_ms = profile::report(o.steps);
  r.replayed = step.replayed();
  const AccumulatedStep last = step.read();
  r.loss = last.loss_sum / static_cast<double>(last.trained_tokens);
  r.routing = model.routing_stats(last.routing);
  const FlopCount f = count_flops(o.model, r.lengths);
  r.step_ms = seconds * 1e3;
  r.tokens_per_s = static_cast<double>(o.tokens) / seconds;
  if (o.peak_tflops > 0) {
    r.mfu = f.model / seconds / (o.peak_tflops * 1e12);
    r.hfu = f.hardware / seconds / (o.peak_tflops * 1e12);
  }
  if (device.is_cuda()) {
    r.peak_memory_gib = static_cast<double>(cuda::pool_peak_bytes(device.index)) / (1u << 30);
    r.gemm_tflops = measure_gemm_tflops(device, dtype_from_name(o.compute_dtype));
    r.mfu_vs_gemm = f.model / seconds / (r.gemm_tflops * 1e12);
  }
  return r;
}

}  // namespace amber
