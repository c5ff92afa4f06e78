// Named slots of a training step's statistics: one f64 vector on the model's device
// that the step's kernels accumulate into and read, so that the host hands a step its
// inputs in one copy and reads its results in one copy. Ops that read or write fixed
// positions receive a slice of it (a range below) and index it by these names,
// relative to the range's first slot; the static_asserts pin the layouts they assume.
//
// Adding a scalar: put it in the results when the step computes it (zeroed at every
// step's start; inside `checked` when a non-finite value must skip the update, as an
// auxiliary loss must), or in the inputs when the host sets it; then give
// AccumulatedStep (train/step.h) its field, and the trainer's JSONL record its key.
// Per-expert token counts are a vector, and get a tensor of their own beside the
// per-parameter squared norms, not one slot per expert.
#pragma once

namespace amber::step_slot {

enum : int {
  // The step's results, zeroed at its start.
  loss_sum,         // over trained tokens: cross-entropy + z-loss (linear_cross_entropy_sums)
  z_loss_sum,       // the z-loss part of loss_sum (linear_cross_entropy_sums)
  trained_tokens,   // tokens with a target (linear_cross_entropy_sums)
  router_loss_sum,  // the MoE routers' auxiliary losses, beside loss_sum (moe_router_loss)
  grad_norm,        // the global gradient norm before clipping (norm_from_squares)
  apply,            // 1 when the update runs: loss sums and norm finite (finite_flag)
  // The step's inputs, written by the host before it runs.
  lr_multiplier,  // the learning-rate schedule's factor
  grad_scale,     // 1 from the host; clip_scale lowers it to the clip factor
  loss_scale,     // d(step objective)/d(token loss): 1 / the step's trained tokens
  stop_votes,     // the stop signal this rank received (0: none); summed over the ranks in the step
  count
};

// Ranges [begin, end) handed to ops as one contiguous slice.
inline constexpr int loss_sums_begin = loss_sum, loss_sums_end = trained_tokens + 1;  // linear_cross_entropy_sums
inline constexpr int objective_begin = loss_sum, objective_end = router_loss_sum + 1;  // LanguageModel::forward_backward
inline constexpr int results_begin = loss_sum, results_end = apply + 1;               // zeroed every step
inline constexpr int checked_begin = loss_sum, checked_end = grad_norm + 1;           // finite_flag's values
inline constexpr int gate_begin = apply, gate_end = grad_scale + 1;                   // advance_schedule's gate
inline constexpr int inputs_begin = lr_multiplier, inputs_end = count;                // the host's one copy

// The loss sums lead the vector, so an evaluation's own sums (a vector of just those
// slots) and the step's slice use the same indices.
static_assert(loss_sums_begin == 0, "the loss kernels index their sums by slot from 0");
static_assert(lr_multiplier == apply + 1 && grad_scale == apply + 2,
              "advance_schedule reads apply, lr_multiplier and grad_scale as one slice");
static_assert(results_end <= inputs_begin, "zeroing the results leaves the host's inputs alone");

}  // namespace amber::step_slot
