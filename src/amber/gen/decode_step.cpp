#include "amber/gen/decode_step.h"

#include <cstring>
#include <numeric>

#include "amber/core/cuda_runtime.h"

namespace amber {

void HostLogits::row(int64_t s, int64_t n, std::vector<double>& out) const {
  out.resize(static_cast<size_t>(n));
  const int64_t at = s * vocab_;
  switch (dtype_) {
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const double*>(data_)[at + i];
      return;
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(data_)[at + i];
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(static_cast<const uint16_t*>(data_)[at + i]);
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(static_cast<const uint16_t*>(data_)[at + i]);
      return;
    default:
      fail("generation: logits in ", dtype_name(dtype_), " cannot be sampled");
  }
}

namespace {

// The same warm-up as the training step's graph: the activation arena reaches its size
// and settles into one block before the capture fixes its addresses.
constexpr int kEagerRunsBeforeCapture = 2;

}  // namespace

DecodeStep::DecodeStep(LanguageModel& model, std::vector<LayerCache>& caches, int sequences, bool cuda_graph)
    : model_(model),
      caches_(caches),
      sequences_(sequences),
      on_gpu_(model.device().is_cuda()),
      use_graph_(cuda_graph && on_gpu_) {
  const Device device = model.device();
  inputs_ = Tensor::zeros({2 * int64_t{sequences}}, DType::i32, device);
  std::vector<int32_t> cu_q(static_cast<size_t>(sequences) + 1);
  std::iota(cu_q.begin(), cu_q.end(), 0);
  step_.cu_q = Tensor::from_vector(cu_q, {sequences + int64_t{1}}).to(device);
  step_.last = step_.cu_q.slice(0, 0, sequences).contiguous();
  // One token per sequence: its position is where its cache row starts.
  step_.starts = inputs_.slice(0, sequences, 2 * int64_t{sequences});
  step_.positions = step_.starts;
  if (!on_gpu_) return;
  staged_inputs_ = static_cast<int32_t*>(cuda::pinned_allocate(2 * static_cast<size_t>(sequences) * 4));
  logits_bytes_ = static_cast<size_t>(sequences) * static_cast<size_t>(model.config().vocab_size) *
                  dtype_size(model.compute_dtype());
  staged_logits_ = cuda::pinned_allocate(logits_bytes_);
}

DecodeStep::~DecodeStep() {
  if (graph_) cuda::destroy_graph(graph_);
  if (staged_inputs_) cuda::pinned_free(staged_inputs_);
  if (staged_logits_) cuda::pinned_free(staged_logits_);
}

void DecodeStep::issue() {
  const Tensor tokens = inputs_.slice(0, 0, sequences_);
  if (on_gpu_) cuda::copy_from_pinned(inputs_.raw(), staged_inputs_, 2 * static_cast<size_t>(sequences_) * 4);
  const Tensor logits = model_.infer_last_logits(tokens, step_, caches_);
  if (on_gpu_)
    cuda::copy_to_pinned(staged_logits_, logits.raw(), logits_bytes_);
  else
    cpu_logits_ = logits;
}

HostLogits DecodeStep::run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions) {
  const size_t n = static_cast<size_t>(sequences_);
  AMBER_CHECK(tokens.size() == n && positions.size() == n, "decode step: ", tokens.size(), " tokens and ",
              positions.size(), " positions for ", n, " sequences");
  if (!on_gpu_) {
    std::memcpy(inputs_.data<int32_t>(), tokens.data(), n * 4);
    std::memcpy(inputs_.data<int32_t>() + n, positions.data(), n * 4);
    issue();
    return {cpu_logits_.raw(), cpu_logits_.dtype(), cpu_logits_.size(1)};
  }
  std::memcpy(staged_inputs_, tokens.data(), n * 4);
  std::memcpy(staged_inputs_ + n, positions.data(), n * 4);
  if (graph_) {
    cuda::launch_graph(graph_);
  } else if (!use_graph_ || eager_runs_ < kEagerRunsBeforeCapture) {
    issue();
    ++eager_runs_;
  } else {
    const uint64_t version = model_.arena_version();
    cuda::begin_capture();
    try {
      issue();
    } catch (...) {
      cuda::discard_capture();
      throw;
    }
    graph_ = cuda::end_capture();
    // An arena that grew while capturing would leave the graph pointing at memory the
    // capture allocated; then every step stays a plain launch.
    if (model_.arena_version() != version) {
      cuda::destroy_graph(graph_);
      graph_ = nullptr;
      use_graph_ = false;
      issue();
    } else {
      cuda::launch_graph(graph_);
    }
  }
  cuda::synchronize();
  return {staged_logits_, model_.compute_dtype(), model_.config().vocab_size};
}

}  // namespace amber
