// One optimizer step on the model's device: token-exact gradient accumulation over
// micro-batches, the global gradient norm, clipping, a finite gate and the update.
// Every number the step reads from the host (the lr multiplier, the loss scale, the
// batches) reaches it through device memory, so nothing in the step waits for the
// host, and on a GPU the whole step is captured once as a CUDA graph and replayed.
// The host reads a step's statistics either at once (StepStats::read, which waits for
// the step) or while the next step runs (TrainStep::previous).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "amber/data/batch.h"
#include "amber/dist/bucket_overlap.h"
#include "amber/dist/data_parallel.h"
#include "amber/dist/zero_shard.h"
#include "amber/model/language_model.h"
#include "amber/ops/step_slots.h"
#include "amber/train/optimizer.h"

namespace amber {

// The host copy of a step's statistics.
struct AccumulatedStep {
  double loss_sum = 0;  // summed per-token objective over the step's micro-batches
  double z_loss_sum = 0;
  int64_t trained_tokens = 0;
  double router_loss_sum = 0;  // the MoE routers' auxiliary losses, summed as loss_sum (not in it)
  // The stop signals the ranks had received when the step was issued, summed over the
  // ranks: every rank reads the same value with the same step, so all stop after it.
  int64_t stop_votes = 0;
  double grad_norm = NAN;  // global gradient norm before clipping; NaN until measured
  double grad_scale = 1;   // what the update multiplied the gradients by (the clip factor)
  bool applied = false;    // whether the update ran (finite loss and norm, an optimizer set)
  std::vector<double> routing;  // the MoE layers' routing statistics (LanguageModel::routing_stats)
};

// The values the host hands each step: the step_slot inputs (ops/step_slots.h).
inline constexpr int kStepInputs = step_slot::inputs_end - step_slot::inputs_begin;

// Device buffers of one step, allocated once per model: the f64 statistics, one per
// step_slot (ops/step_slots.h), and one squared-norm slot per parameter.
class StepStats {
 public:
  explicit StepStats(const LanguageModel& model);
  ~StepStats();
  StepStats(const StepStats&) = delete;
  StepStats& operator=(const StepStats&) = delete;
  // Views of the statistics by slot; the ranges are the slices that ops take whole.
  Tensor objective() const { return slots(step_slot::objective_begin, step_slot::objective_end); }  // the model adds
  Tensor grad_norm() const { return slot(step_slot::grad_norm); }
  Tensor checked() const { return slots(step_slot::checked_begin, step_slot::checked_end); }  // finite to apply
  Tensor apply() const { return slot(step_slot::apply); }
  Tensor gate() const { return slots(step_slot::gate_begin, step_slot::gate_end); }  // the optimizer's input
  Tensor grad_scale() const { return slot(step_slot::grad_scale); }
  Tensor inputs() const { return slots(step_slot::inputs_begin, step_slot::inputs_end); }  // from the host
  Tensor loss_scale() const { return slot(step_slot::loss_scale); }
  Tensor stop_votes() const { return slot(step_slot::stop_votes); }
  Tensor squares() const { return squares_; }  // [params], one squared gradient norm each
  // Zeroes the sums, the norm and the apply flag (not the inputs).
  void zero();
  // The step's values on the host (the MoE layers' routing statistics included): a
  // device-to-host copy, which waits for the step.
  AccumulatedStep read() const;
  // Queues a copy of the values to the host (pinned memory on a GPU), which kept()
  // returns. Queued first in a step, it keeps the previous step's values from this
  // step's zeroing, so the host can read them without waiting for this step.
  void keep();
  // What the last keep() copied; waits only for that copy.
  AccumulatedStep kept() const;

 private:
  Tensor slots(int begin, int end) const { return values_.slice(0, begin, end); }
  Tensor slot(int s) const { return values_.slice(0, s, s + 1); }

  AccumulatedStep accumulated(const double* values, const double* routing) const;

  Tensor values_, squares_;
  Tensor routing_;                // the model's routing values (undefined for a dense model)
  double* kept_values_;           // step_slot::count doubles, then the routing values; pinned on a GPU
  void* kept_copied_ = nullptr;  // on a GPU, the marker placed after keep()'s copy
};

// stats' grad norm = sqrt of the sum of squared gradient entries of every parameter,
// in double: each parameter's sum goes to its own slot, then one in-order sum. With
// product_squares, a parameter whose product left its gradient's squares this step
// (Param::grad_squares) has them summed instead of its gradient read; only valid while
// nothing has changed a gradient since its product (no sums over ranks).
void global_grad_norm(const LanguageModel& model, StepStats& stats, bool product_squares);
// The same over a ZeRO-1 shard: each rank squares the parameters it owns (their summed
// gradients), the ranks add their slots (every slot but the owner's is zero, so the sum
// is exact), and the in-order sum gives every rank the norm of the whole gradient.
void sharded_grad_norm(const LanguageModel& model, StepStats& stats, const dist::StoreShard& shard,
                       dist::Communicator& comm);

// Sets stats' gradient scale to max_norm / norm when the measured norm exceeds max_norm
// (on the device, from stats' grad norm), so the update reads every gradient scaled by
// it; the gradients themselves stay as computed.
void clip_gradients(const StepStats& stats, double max_norm);

struct StepOptions {
  double grad_clip = 0.0;  // 0: no clipping
  bool cuda_graph = true;  // on a GPU, replay the step from a captured graph
  // On a GPU, the tokens a micro-batch's device buffers hold (the loader's budget), so
  // every run of a config captures its step at the same shapes; 0: the first batch's.
  int64_t micro_batch_tokens = 0;
  // Data parallel: the ranks whose gradients and loss sums each step adds up
  // (dist/data_parallel.h); nullptr or a world of one: this process alone.
  dist::Communicator* communicator = nullptr;
  // Data parallel without ZeRO: each gradient bucket's sum starts as soon as the last
  // micro-batch's backward has finished it (dist/bucket_overlap.h); false sums the
  // buckets after the backward, with the same result, to measure the overlap against.
  bool overlap_gradient_sums = true;
  // The most gradient entries one bucket's sum carries.
  int64_t bucket_elements = dist::kDefaultBucketElements;
  // ZeRO-1 (with a communicator): each rank's gradients are summed into the ranges this
  // shard owns only (a reduce-scatter), which the sharded optimizer reads.
  const dist::StoreShard* shard = nullptr;
};

class TrainStep {
 public:
  // Without an optimizer the step stops after the norm and the clip factor (gradients only).
  TrainStep(LanguageModel& model, Optimizer* optimizer, StepOptions options);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Issues one step without waiting for it: gradients zeroed, each micro-batch's loss
  // divided once by the step's total trained tokens (never a mean of means), the norm,
  // clipping, then the update where loss and norm are finite, with every learning rate
  // times lr_multiplier. A step without trained tokens issues nothing.
  // step_trained_tokens: the whole step's trained tokens over every rank's micro-batches
  // (data::Loader::step_trained_tokens), which data parallel must give; a single process
  // may leave it to the sum over its micro-batches.
  // stop_signal: a signal this process has received (0: none), this rank's vote to stop,
  // which the step sums over the ranks into its statistics (AccumulatedStep::stop_votes).
  void run(std::span<const data::Batch> micro_batches, double lr_multiplier,
           std::optional<int64_t> step_trained_tokens = std::nullopt, int stop_signal = 0);
  // The last step's statistics (waits for it).
  AccumulatedStep read() const { return stats_.read(); }
  // The statistics of the step before the last run; empty after the first run. Waits
  // only until the last run has begun, so the host can log a step while the next runs.
  AccumulatedStep previous() const { return stats_.kept(); }
  StepStats& stats() { return stats_; }
  // Whether the last run replayed the captured graph.
  bool replayed() const { return replayed_; }

 private:
  struct Slots;  // the GPU's fixed-address batch buffers and their pinned staging

  void issue(std::span<const data::Batch> micro_batches);
  // Replays the captured step, under the communicator's deadline.
  void launch_graph();

  LanguageModel& model_;
  Optimizer* optimizer_;
  StepOptions options_;
  StepStats stats_;
  std::optional<dist::GradientBuckets> buckets_;   // data parallel without ZeRO
  std::optional<dist::OverlappedBuckets> overlap_;  // their sums during the backward
  std::unique_ptr<Slots> slots_;
  bool replayed_ = false;
  int64_t launches_ = 0;  // graph launches so far, which name a step in deadline errors
};

}  // namespace amber
