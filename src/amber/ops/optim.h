// Optimizer update math on parameter tensors: the AdamW step (decoupled decay) and
// Newton-Schulz orthogonalisation for Muon. Trainers own the state and schedules;
// these functions only transform tensors.
#pragma once

#include <cstdint>
#include <span>

#include "amber/core/tensor.h"
#include "amber/ops/step_slots.h"

namespace amber {

struct AdamWHyper {
  double lr = 3e-4;  // multiplied by the schedule's lr multiplier
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// The per-step scalars every update reads on the parameters' device, so that one
// captured CUDA graph serves every step: f64 [kScheduleSize], indexed as below. An
// update whose schedule does not apply leaves its tensors untouched.
inline constexpr int kScheduleApply = 0;         // 1: update, 0: skip this step
inline constexpr int kScheduleLrMultiplier = 1;  // the learning-rate schedule's factor
inline constexpr int kScheduleBias1 = 2;         // 1 / (1 - beta1^t), t the applied steps so far
inline constexpr int kScheduleBias2 = 3;         // 1 / (1 - beta2^t)
inline constexpr int kScheduleSteps = 4;         // t
// What every update multiplies each gradient by as it reads it: the step's clip factor,
// 1 when it does not clip. Clipping this way costs no pass over the gradients, and the
// update matches one on gradients scaled first up to that product's rounding (where
// the compiler fuses it into a multiply-add).
inline constexpr int kScheduleGradScale = 5;
inline constexpr int kScheduleSize = 6;

// The gate: the step statistics' slots apply, lr multiplier and gradient scale, as
// advance_schedule indexes the slice it is handed.
inline constexpr int kGateApply = step_slot::apply - step_slot::gate_begin;
inline constexpr int kGateLrMultiplier = step_slot::lr_multiplier - step_slot::gate_begin;
inline constexpr int kGateGradScale = step_slot::grad_scale - step_slot::gate_begin;
inline constexpr int kGateSlots = step_slot::gate_end - step_slot::gate_begin;

// From gate (f64 [kGateSlots] on the device): copies it into the schedule and, where the step applies, advances t and its bias corrections.
void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2);

// flag (f64, one element) = 1 when every element of values (f64) is finite, else 0.
void finite_flag(const Tensor& values, Tensor& flag);

// value -= lr (wd value + mhat / (sqrt(vhat) + eps)) after updating m and v from grad
// times the schedule's gradient scale, with lr = h.lr times the schedule's multiplier
// and its bias corrections. All tensors f32 (or f64), same shape, contiguous. `work` is
// the parameter's working copy: value itself, or a copy in its own dtype that receives
// the new value in the same pass.
void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                const Tensor& schedule, Tensor& work);

// One parameter's operands of adamw_step.
struct AdamWOperands {
  Tensor* value;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
  Tensor* work;
  AdamWHyper hyper;
};

// adamw_step for every entry, each getting the bits it gets alone; on a GPU the
// parameters share a few launches (a model's hundreds of tensors, many of them small,
// would otherwise take one launch each).
void adamw_steps(std::span<const AdamWOperands> params, const Tensor& schedule);

// One Muon matrix's operands of muon_momentum_steps and muon_apply_steps. All f32 (or
// f64), one shape, contiguous; `work` is value itself or a copy in its own dtype.
struct MuonOperands {
  Tensor* value;
  const Tensor* grad;
  Tensor* momentum;
  Tensor* update;  // written by the momentum step, orthogonalised, read by the apply step
  Tensor* work;
  double decay_rate, update_rate;  // each times the schedule's lr multiplier
};

// Where the schedule applies, for every entry, with g the gradient times the schedule's
// gradient scale: momentum = mu momentum + g, then update = mu momentum + g (Nesterov's
// look-ahead) or update = momentum. On a GPU all entries share a few launches.
void muon_momentum_steps(std::span<const MuonOperands> params, double mu, bool nesterov, const Tensor& schedule);

// Where the schedule applies, with k its lr multiplier, for every entry:
// value = value (1 - k decay_rate) - k update_rate update, and work receives the new
// value in the same pass.
void muon_apply_steps(std::span<const MuonOperands> params, const Tensor& schedule);

enum class NewtonSchulz { cubic5, quintic5 };
NewtonSchulz newton_schulz_from_name(const std::string& name);  // cubic5 | quintic5

// Replaces the 2-D matrix g by an approximation of its orthogonal polar factor
// U V^T: Frobenius-normalised (x 1.01 margin), then five Newton-Schulz steps on the
// short side (iterating X X^T of the smaller dimension). Computed in `compute`
// (f32 on CPU; bf16 on GPU, as the predecessor ran it). A 3-D g [n, rows, cols] is a
// batch of n matrices, each orthogonalised on its own as a 2-D g would be, with batched
// products (on a GPU one cuBLASLt call for all n, not n small ones).
void newton_schulz_orthogonalize(Tensor& g, NewtonSchulz variant, DType compute);

// Squared L2 norm of t, accumulated in double, written to `out` (f64, one element, on
// t's device; typically one slot of a larger buffer) without waiting for the host.
void squared_norm_into(const Tensor& t, Tensor& out);
// squares[i] = the squared L2 norm of tensors[i], each as squared_norm_into computes
// it (the same bits), for all in one pass: squares is f64 [n] on their device. On a
// GPU a model's gradients take a few launches instead of two per tensor.
void squared_norms_into(std::span<const Tensor> tensors, Tensor& squares);
// The squared norm, read back to the host (one synchronisation on a GPU).
double squared_norm(const Tensor& t);
// sums[i] = the sum of the f64 tensor tensors[i]'s elements in a fixed order (the same
// bits on every run), for all in one pass: sums is f64 [n] on their device. What a
// squared norm becomes where the product that wrote a tensor left its squares in blocks
// (ops/grouped_gemm.h's weight gradient).
void sums_into(std::span<const Tensor> tensors, Tensor& sums);
// out (f64, one element) = sqrt of the sum of `squares` (f64 [n]) taken in index order:
// the global norm from per-tensor squared norms, the same bits on every run.
void norm_from_squares(const Tensor& squares, Tensor& out);
// scale = max_norm / norm when norm > max_norm, else scale is left alone (also for a NaN
// norm): the gradient scale the updates read (kScheduleGradScale). Both are f64 with one
// element on one device, and the factor is computed there, so clipping never waits for
// the host to read the norm.
void clip_scale(Tensor& scale, const Tensor& norm, double max_norm);
// t *= 1 / (max(sqrt(squares), floor) * margin), with `squares` (f64 on t's device, as
// squared_norm(s)_into wrote it) read on the device: Newton-Schulz scales its start this
// way without waiting for the host. With squares [n], t's elements form n equal
// consecutive parts (a batch of n matrices), part i divided by its own norm.
void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin);
// t *= alpha.
void scale_(Tensor& t, double alpha);
// Whether every element is finite.
bool all_finite(const Tensor& t);

}  // namespace amber
