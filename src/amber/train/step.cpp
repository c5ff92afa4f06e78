// The training step: gradient accumulation, global norm, clipping, the finite gate and
// the update, over StepStats' device buffers; on a GPU, batches staged into slots at
// fixed addresses and the whole step replayed from one CUDA graph.
#include "amber/train/step.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "amber/core/cuda_runtime.h"
#include "amber/core/op_hook.h"
#include "amber/ops/optim.h"

namespace amber {

namespace {
constexpr int kValues = step_slot::count;

AccumulatedStep accumulated_step(const double* v) {
  using namespace step_slot;
  return {v[loss_sum],
          v[z_loss_sum],
          static_cast<int64_t>(v[trained_tokens]),
          v[router_loss_sum],
          static_cast<int64_t>(v[stop_votes]),
          v[grad_norm],
          v[grad_scale],
          v[apply] != 0.0,
          {}};
}

// The step's own work outside any op (the kept statistics, the batch's copies, the
// gradients' zeroing) under names of its own in op profiles, so that a profile accounts
// for the whole step.
class StepScope {
 public:
  StepScope(const LanguageModel& model, const char* name) : scope_(name, /*on_host=*/!model.device().is_cuda()) {}

 private:
  OpScope scope_;
};
}  // namespace

StepStats::StepStats(const LanguageModel& model)
    : values_(Tensor::zeros({kValues}, DType::f64, model.device())),
      squares_(Tensor::zeros({static_cast<int64_t>(model.params().size())}, DType::f64, model.device())),
      routing_(model.routing_values()) {
  const size_t kept = kValues + static_cast<size_t>(routing_.defined() ? routing_.numel() : 0);
  if (model.device().is_cuda()) {
    kept_values_ = static_cast<double*>(cuda::pinned_allocate(kept * sizeof(double)));
    kept_copied_ = cuda::create_marker();
  } else {
    kept_values_ = new double[kept];
  }
  std::fill(kept_values_, kept_values_ + kept, 0.0);
}

StepStats::~StepStats() {
  if (kept_copied_) {
    cuda::destroy_marker(kept_copied_);
    cuda::pinned_free(kept_values_);
  } else {
    delete[] kept_values_;
  }
}

void StepStats::zero() { slots(step_slot::results_begin, step_slot::results_end).zero(); }

AccumulatedStep StepStats::accumulated(const double* values, const double* routing) const {
  AccumulatedStep step = accumulated_step(values);
  if (routing_.defined()) step.routing.assign(routing, routing + routing_.numel());
  return step;
}

AccumulatedStep StepStats::read() const {
  const std::vector<double> routing = routing_.defined() ? routing_.to_doubles() : std::vector<double>();
  return accumulated(values_.to_doubles().data(), routing.data());
}

void StepStats::keep() {
  const size_t routing = static_cast<size_t>(routing_.defined() ? routing_.numel() : 0);
  if (!kept_copied_) {
    std::copy_n(values_.data<double>(), kValues, kept_values_);
    if (routing) std::copy_n(routing_.data<double>(), routing, kept_values_ + kValues);
    return;
  }
  cuda::copy_to_pinned(kept_values_, values_.raw(), kValues * sizeof(double));
  if (routing) cuda::copy_to_pinned(kept_values_ + kValues, routing_.raw(), routing * sizeof(double));
  cuda::place_marker(kept_copied_);
}

AccumulatedStep StepStats::kept() const {
  if (kept_copied_) cuda::wait_for_marker(kept_copied_);
  return accumulated(kept_values_, kept_values_ + kValues);
}

void global_grad_norm(const LanguageModel& model, StepStats& stats, bool product_squares) {
  Tensor squares = stats.squares(), norm = stats.grad_norm();
  std::vector<Tensor> grads, blocks;
  for (const auto& p : model.params()) {
    if (product_squares && p->grad_squares_written)
      blocks.push_back(p->grad_squares);
    else
      grads.push_back(p->grad);
  }
  const int64_t read = static_cast<int64_t>(grads.size());
  Tensor read_squares = squares.slice(0, 0, read), summed_squares = squares.slice(0, read, squares.numel());
  squared_norms_into(grads, read_squares);
  sums_into(blocks, summed_squares);
  norm_from_squares(squares, norm);
}

void sharded_grad_norm(const LanguageModel& model, StepStats& stats, const dist::StoreShard& shard,
                       dist::Communicator& comm) {
  Tensor squares = stats.squares(), norm = stats.grad_norm();
  std::vector<Tensor> grads;
  for (const auto& p : model.params()) grads.push_back(shard.owns(*p) ? p->grad : p->grad.slice(0, 0, 0));
  squared_norms_into(grads, squares);
  comm.all_reduce_sum(squares);
  norm_from_squares(squares, norm);
}

void clip_gradients(const StepStats& stats, double max_norm) {
  Tensor scale = stats.grad_scale();
  clip_scale(scale, stats.grad_norm(), max_norm);
}

// Each micro-batch has device buffers of a fixed token and document capacity, refilled
// from one pinned host buffer by copies that are part of the step (so a replay reads
// the new batch). A batch shorter than the capacity gets one padding document (token
// 0, no targets); unused document slots are empty documents at the end, which no
// kernel gives any work. The token capacity is the loader's budget where the step knows
// it: with the first batch's count instead, a resumed run whose first batch is shorter
// ran its products at other shapes (and measured algorithms for them afresh), and a
// longer batch later forced a second capture. The graph is captured on the third run
// with the same slots: the first two let the model's arenas settle, so that nothing is
// allocated during the capture that outlives it.
struct TrainStep::Slots {
  int64_t tokens = 0;  // per micro-batch
  int docs = 0;        // per micro-batch, padding and empty documents included
  std::vector<data::Batch> batches;
  int32_t* staging = nullptr;  // per batch: tokens, targets, positions, cu_seqlens; then the f64 inputs
  void* graph = nullptr;
  // Placed after the staged copies: once the stream passes it, the staging buffer may
  // be refilled while the rest of the step still runs.
  void* staging_read = cuda::create_marker();
  uint64_t arena_version = 0;  // the model's arenas when the graph was captured
  int eager_runs = 0;

  Slots(std::span<const data::Batch> micro, int64_t token_capacity, Device device) : tokens(token_capacity) {
    for (const data::Batch& b : micro) {
      tokens = std::max(tokens, b.tokens.numel());
      docs = std::max(docs, b.seq.num_docs + 1);
    }
    docs = std::max(16, static_cast<int>(std::bit_ceil(static_cast<unsigned>(docs))));
    for (size_t i = 0; i < micro.size(); ++i) {
      data::Batch b;
      b.tokens = Tensor::empty({tokens}, DType::i32, device);
      b.targets = Tensor::empty({tokens}, DType::i32, device);
      b.seq.positions = Tensor::empty({tokens}, DType::i32, device);
      b.seq.cu_seqlens = Tensor::empty({docs + 1}, DType::i32, device);
      b.seq.total_tokens = tokens;
      b.seq.num_docs = docs;
      b.seq.max_seqlen = static_cast<int32_t>(tokens);
      batches.push_back(std::move(b));
    }
    staging = static_cast<int32_t*>(
        cuda::pinned_allocate(batches.size() * batch_ints() * 4 + kStepInputs * sizeof(double)));
  }
  ~Slots() {
    if (graph) cuda::destroy_graph(graph);
    cuda::destroy_marker(staging_read);
    cuda::pinned_free(staging);
  }

  // Rounded up to whole 16-byte words, so that every batch, and the f64 inputs after
  // them, start aligned.
  int64_t batch_ints() const { return (3 * tokens + docs + 1 + 3) / 4 * 4; }
  double* inputs() const { return reinterpret_cast<double*>(staging + batches.size() * batch_ints()); }

  bool fit(std::span<const data::Batch> micro) const {
    if (micro.size() != batches.size()) return false;
    for (const data::Batch& b : micro)
      if (b.tokens.numel() > tokens || b.seq.num_docs + (b.tokens.numel() < tokens ? 1 : 0) > docs) return false;
    return true;
  }

  // Host side only: the batches and the inputs into the pinned buffer.
  void stage(std::span<const data::Batch> micro, const double (&values)[kStepInputs]) {
    for (size_t i = 0; i < micro.size(); ++i) {
      const data::Batch& b = micro[i];
      const Tensor tok = b.tokens.to(Device::cpu()), tgt = b.targets.to(Device::cpu());
      const Tensor pos = b.seq.positions.to(Device::cpu());
      const int64_t n = tok.numel();
      int32_t* out = staging + i * batch_ints();
      int32_t *t = out, *g = out + tokens, *p = out + 2 * tokens, *cu = out + 3 * tokens;
      std::memcpy(t, tok.data<int32_t>(), n * 4);
      std::memcpy(g, tgt.data<int32_t>(), n * 4);
      std::memcpy(p, pos.data<int32_t>(), n * 4);
      for (int64_t j = n; j < tokens; ++j) t[j] = 0, g[j] = kNoTarget, p[j] = static_cast<int32_t>(j - n);
      const std::vector<int32_t>& host_cu = b.seq.cu_seqlens_host;
      std::copy(host_cu.begin(), host_cu.end(), cu);
      std::fill(cu + host_cu.size(), cu + docs + 1, static_cast<int32_t>(tokens));
      batches[i].seq.cu_seqlens_host.assign(cu, cu + docs + 1);
      batches[i].trained_tokens = b.trained_tokens;
    }
    std::copy(values, values + kStepInputs, inputs());
  }

  // Device side: the staged copies, queued on the stream (recorded when capturing).
  void upload(Tensor& device_inputs) const {
    for (size_t i = 0; i < batches.size(); ++i) {
      const int32_t* in = staging + i * batch_ints();
      const data::Batch& b = batches[i];
      cuda::copy_from_pinned(b.tokens.raw(), in, tokens * 4);
      cuda::copy_from_pinned(b.targets.raw(), in + tokens, tokens * 4);
      cuda::copy_from_pinned(b.seq.positions.raw(), in + 2 * tokens, tokens * 4);
      cuda::copy_from_pinned(b.seq.cu_seqlens.raw(), in + 3 * tokens, (docs + 1) * 4);
    }
    cuda::copy_from_pinned(device_inputs.raw(), inputs(), kStepInputs * sizeof(double));
    cuda::place_marker(staging_read);
  }
};

TrainStep::TrainStep(LanguageModel& model, Optimizer* optimizer, StepOptions options)
    : model_(model), optimizer_(optimizer), options_(options), stats_(model) {
  AMBER_CHECK(!options_.shard || options_.communicator, "a ZeRO-1 step needs the communicator of its shard");
  if (options_.communicator && !options_.shard) buckets_.emplace(model_.store(), options_.bucket_elements);
  if (buckets_ && options_.overlap_gradient_sums) overlap_.emplace(*buckets_, *options_.communicator);
}

TrainStep::~TrainStep() = default;

void TrainStep::issue(std::span<const data::Batch> micro_batches) {
  {
    const StepScope scope(model_, "gradient_restart");
    model_.restart_grads();
    stats_.zero();
  }
  Tensor sums = stats_.objective();
  const Tensor scale = stats_.loss_scale();
  // Only the last micro-batch's backward finishes gradients, so only it reports them
  // to the overlapped bucket sums.
  if (overlap_) overlap_->arm();
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const data::Batch& b = micro_batches[i];
    GradientReady* ready = overlap_ && i + 1 == micro_batches.size() ? &*overlap_ : nullptr;
    model_.forward_backward(b.tokens, b.targets, b.seq, scale, sums, ready);
  }
  model_.settle_grads();
  if (options_.communicator) {
    // Every rank then measures the same norm and makes the same update (of its shard).
    if (options_.shard) options_.shard->reduce_scatter_gradients(*options_.communicator);
    if (overlap_)
      overlap_->finish();
    else if (buckets_)
      buckets_->all_reduce(*options_.communicator);
    Tensor objective = stats_.objective(), votes = stats_.stop_votes();
    options_.communicator->all_reduce_sum(objective);
    options_.communicator->all_reduce_sum(votes);
    // The balance biases move by the whole step's expert loads, alike on every rank.
    for (Tensor load : model_.routing_loads()) options_.communicator->all_reduce_sum(load);
  }
  if (options_.shard)
    sharded_grad_norm(model_, stats_, *options_.shard, *options_.communicator);
  else
    global_grad_norm(model_, stats_, /*product_squares=*/!options_.communicator);
  if (options_.grad_clip > 0) clip_gradients(stats_, options_.grad_clip);
  if (!optimizer_) return;
  Tensor apply = stats_.apply();
  finite_flag(stats_.checked(), apply);
  optimizer_->step(stats_.gate());
  model_.after_optimizer_step(stats_.apply());
}

void TrainStep::run(std::span<const data::Batch> micro_batches, double lr_multiplier,
                    std::optional<int64_t> step_trained_tokens, int stop_signal) {
  AMBER_CHECK(step_trained_tokens || !options_.communicator, "a data-parallel step needs the trained tokens of the whole step, ",
              "over every rank (data::Loader::step_trained_tokens)");
  int64_t trained_tokens = 0;
  for (const data::Batch& b : micro_batches) trained_tokens += b.trained_tokens;
  if (step_trained_tokens) trained_tokens = *step_trained_tokens;
  replayed_ = false;
  if (trained_tokens == 0) {
    stats_.keep();
    stats_.zero();
    return;
  }
  // The token count comes from the batches' host metadata, so the scale is known
  // before any kernel runs.
  double inputs[kStepInputs];
  inputs[step_slot::lr_multiplier - step_slot::inputs_begin] = lr_multiplier;
  inputs[step_slot::grad_scale - step_slot::inputs_begin] = 1.0;
  inputs[step_slot::loss_scale - step_slot::inputs_begin] = 1.0 / static_cast<double>(trained_tokens);
  inputs[step_slot::stop_votes - step_slot::inputs_begin] = stop_signal;
  // Every step first keeps the previous step's statistics (previous()), before its
  // inputs and its zeroing overwrite them.
  if (!model_.device().is_cuda()) {
    stats_.keep();
    Tensor device_inputs = stats_.inputs();
    std::copy(inputs, inputs + kStepInputs, device_inputs.data<double>());
    issue(micro_batches);
    return;
  }
  // The host stages this step while the previous one still runs: it waits only until
  // that step has copied its batch in, not for its end (which left the GPU idle while
  // the host staged and launched). New slots or a new graph wait for everything queued,
  // which may still use the old ones.
  if (!slots_ || !slots_->fit(micro_batches)) {
    cuda::synchronize();
    slots_ = std::make_unique<Slots>(micro_batches, options_.micro_batch_tokens, model_.device());
  } else {
    cuda::wait_for_marker(slots_->staging_read);
  }
  slots_->stage(micro_batches, inputs);
  if (slots_->graph && slots_->arena_version != model_.arena_version()) {
    // Something outside the step (an evaluation) moved the arenas the graph points into.
    cuda::synchronize();
    cuda::destroy_graph(slots_->graph);
    slots_->graph = nullptr;
    slots_->eager_runs = 0;
  }
  if (slots_->graph) {
    launch_graph();
    return;
  }
  const bool capture = options_.cuda_graph && slots_->eager_runs >= 2;
  Tensor device_inputs = stats_.inputs();
  if (capture) cuda::begin_capture();
  try {
    {
      const StepScope scope(model_, "statistics_keep");
      stats_.keep();
    }
    {
      const StepScope scope(model_, "batch_upload");
      slots_->upload(device_inputs);
    }
    issue(slots_->batches);
  } catch (...) {
    if (capture) cuda::discard_capture();
    throw;
  }
  if (!capture) {
    ++slots_->eager_runs;
    return;
  }
  slots_->graph = cuda::end_capture();
  slots_->arena_version = model_.arena_version();
  launch_graph();
}

void TrainStep::launch_graph() {
  replayed_ = true;
  ++launches_;
  if (!options_.communicator) {
    cuda::launch_graph(slots_->graph);
    return;
  }
  // The communicator sees its collectives issued only while the graph is captured, so
  // their deadline covers each launch as a whole.
  options_.communicator->watch(concat("the step's graph, launch ", launches_, " (its collectives run inside it)"),
                               [&] { cuda::launch_graph(slots_->graph); });
}

}  // namespace amber
