// Entry points of ops/moe.h: shapes and dtypes validated with the operands' names, then
// the device switch.
#include "amber/ops/moe.h"

#include "amber/ops/cpu/moe.h"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/cuda/moe/moe.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/grouped_gemm.h"
#include "amber/ops/quant.h"

namespace amber {
namespace {

// Contiguous operands on one device; returns it.
Device device_of(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined()) require_contiguous(*t, op);
  return ops::common_device(op, tensors);
}

// f32 router math (f64 for gradient checks).
void require_router_dtype(const char* op, const Tensor& t, const char* what) {
  AMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op, ": ", what, " must be f32 (router math runs in fp32; f64 for gradient checks), got ",
              dtype_name(t.dtype()));
}

void check_gather(const Tensor& x, const Tensor& row_tokens, const Tensor& xs, const char* op) {
  AMBER_CHECK(x.ndim() == 2 && xs.ndim() == 2 && xs.size(1) == x.size(1) && xs.dtype() == x.dtype(), op, ": rows ",
              xs.shape(), " must be [copies, ", x.size(1), "] of the input's dtype (input ", x.shape(), ")");
  AMBER_CHECK(row_tokens.shape() == Shape({xs.size(0)}) && row_tokens.dtype() == DType::i32, op, ": row_tokens ",
              row_tokens.shape(), " must be i32 [", xs.size(0), "]");
}

void check_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                           const Tensor& slot_rows, const Tensor& dgate_up, const Tensor& act_w,
                           const Tensor& dweights, const char* op) {
  AMBER_CHECK(da.ndim() == 2 && da.size(0) == slot_rows.numel() && gate_up.dtype() == da.dtype() &&
                  gate_up.shape() == Shape({da.size(0), 2 * da.size(1)}) && dgate_up.shape() == gate_up.shape() &&
                  dgate_up.dtype() == da.dtype() && act_w.shape() == da.shape() && act_w.dtype() == da.dtype(),
              op, ": da ", da.shape(), ", gate_up ", gate_up.shape(), ", dgate_up ", dgate_up.shape(), " and act_w ",
              act_w.shape(), " must be [R, H], [R, 2H], [R, 2H] and [R, H] of one dtype for R = ",
              slot_rows.numel(), " copies");
  AMBER_CHECK(row_weights.shape() == Shape({da.size(0)}) && dweights.shape() == slot_rows.shape() &&
                  dweights.dtype() == row_weights.dtype() && slot_rows.dtype() == DType::i32,
              op, ": row_weights ", row_weights.shape(), " must be [R] and dweights ", dweights.shape(),
              " the i32 slot_rows' shape ", slot_rows.shape(), ", both in the router's dtype");
}

}  // namespace

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights) {
  const char* op = "moe_route_forward";
  AMBER_CHECK(logits.ndim() == 2, op, ": logits ", logits.shape(), " must be [tokens, experts]");
  const int64_t tokens = logits.size(0), num = logits.size(1);
  AMBER_CHECK(spec.top_k >= 1 && spec.top_k <= num, op, ": top_k ", spec.top_k, " must be between 1 and the ", num,
              " experts");
  require_router_dtype(op, logits, "logits");
  AMBER_CHECK(scores.shape() == logits.shape() && scores.dtype() == logits.dtype(), op, ": scores ", scores.shape(),
              " must match logits ", logits.shape());
  AMBER_CHECK(experts.shape() == Shape({tokens, spec.top_k}) && experts.dtype() == DType::i32, op, ": experts ",
              experts.shape(), " must be i32 [", tokens, ", ", spec.top_k, "]");
  AMBER_CHECK(weights.shape() == Shape({tokens, spec.top_k}) && weights.dtype() == logits.dtype(), op, ": weights ",
              weights.shape(), " must be [", tokens, ", ", spec.top_k, "] of the logits' dtype");
  AMBER_CHECK(!bias.defined() || bias.shape() == Shape({num}), op, ": bias ", bias.shape(), " must be [", num, "]");
  const Device device = device_of(op, {&logits, &bias, &scores, &experts, &weights});
  AMBER_ON_DEVICE(device, op, cuda::moe_route_forward(spec, logits, bias, scores, experts, weights),
                  cpu::moe_route_forward(spec, logits, bias, scores, experts, weights));
}

void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits) {
  const char* op = "moe_route_backward";
  AMBER_CHECK(scores.ndim() == 2 && dlogits.shape() == scores.shape() && dlogits.dtype() == scores.dtype(), op,
              ": dlogits ", dlogits.shape(), " must match scores ", scores.shape());
  require_router_dtype(op, scores, "scores");
  AMBER_CHECK(dweights.shape() == Shape({scores.size(0), spec.top_k}) && dweights.dtype() == scores.dtype() &&
                  experts.shape() == dweights.shape(),
              op, ": dweights ", dweights.shape(), " and experts ", experts.shape(), " must be [", scores.size(0),
              ", ", spec.top_k, "]");
  const Device device = device_of(op, {&dweights, &scores, &experts, &dlogits});
  AMBER_ON_DEVICE(device, op, cuda::moe_route_backward(spec, dweights, scores, experts, dlogits),
                  cpu::moe_route_backward(spec, dweights, scores, experts, dlogits));
}

void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum) {
  const char* op = "moe_router_loss";
  AMBER_CHECK(loss.balance_weight >= 0 && loss.z_weight >= 0, op, ": the balance weight ", loss.balance_weight,
              " and z-loss weight ", loss.z_weight, " must not be negative");
  require_router_dtype(op, logits, "logits");
  AMBER_CHECK(logits.ndim() == 2 && scores.shape() == logits.shape() && dlogits.shape() == logits.shape() &&
                  scores.dtype() == logits.dtype() && dlogits.dtype() == logits.dtype(),
              op, ": logits ", logits.shape(), ", scores ", scores.shape(), " and dlogits ", dlogits.shape(),
              " must be one [tokens, experts] shape and dtype");
  AMBER_CHECK(experts.shape() == Shape({logits.size(0), spec.top_k}) && experts.dtype() == DType::i32, op,
              ": experts ", experts.shape(), " must be i32 [", logits.size(0), ", ", spec.top_k, "]");
  AMBER_CHECK(cu_seqlens.ndim() == 1 && cu_seqlens.numel() >= 1 && cu_seqlens.dtype() == DType::i32, op,
              ": cu_seqlens ", cu_seqlens.shape(), " must be i32 [documents + 1]");
  AMBER_CHECK(loss_scale.numel() == 1 && loss_scale.dtype() == DType::f64 && sum.numel() == 1 &&
                  sum.dtype() == DType::f64,
              op, ": loss_scale and sum must be f64 [1]");
  const Device device = device_of(op, {&logits, &scores, &experts, &cu_seqlens, &loss_scale, &dlogits, &sum});
  AMBER_ON_DEVICE(device, op,
                  cuda::moe_router_loss(spec, loss, logits, scores, experts, cu_seqlens, loss_scale, dlogits, sum),
                  cpu::moe_router_loss(spec, loss, logits, scores, experts, cu_seqlens, loss_scale, dlogits, sum));
}

void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows,
                 Tensor& row_tokens) {
  const char* op = "moe_permute";
  AMBER_CHECK(experts.ndim() == 2 && experts.dtype() == DType::i32, op, ": experts ", experts.shape(),
              " must be i32 [tokens, top_k]");
  AMBER_CHECK(offsets.shape() == Shape({num_experts + 1}) && offsets.dtype() == DType::i32, op, ": offsets ",
              offsets.shape(), " must be i32 [", num_experts + 1, "]");
  AMBER_CHECK(slot_rows.shape() == experts.shape() && slot_rows.dtype() == DType::i32, op, ": slot_rows ",
              slot_rows.shape(), " must be i32 ", experts.shape());
  AMBER_CHECK(row_tokens.shape() == Shape({experts.numel()}) && row_tokens.dtype() == DType::i32, op,
              ": row_tokens ", row_tokens.shape(), " must be i32 [", experts.numel(), "]");
  const Device device = device_of(op, {&experts, &offsets, &slot_rows, &row_tokens});
  if (device.is_cpu()) {
    const int32_t* ids = experts.data<int32_t>();
    for (int64_t i = 0; i < experts.numel(); ++i)
      AMBER_CHECK(ids[i] >= 0 && ids[i] < num_experts, op, ": expert id ", ids[i], " is outside 0 .. ",
                  num_experts - 1);
  }
  AMBER_ON_DEVICE(device, op, cuda::moe_permute(experts, num_experts, offsets, slot_rows, row_tokens),
                  cpu::moe_permute(experts, num_experts, offsets, slot_rows, row_tokens));
}

void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs) {
  const char* op = "moe_gather";
  check_gather(x, row_tokens, xs, op);
  const Device device = device_of(op, {&x, &row_tokens, &xs});
  AMBER_ON_DEVICE(device, op, cuda::moe_gather(x, row_tokens, xs),
                  cpu::moe_gather(x, row_tokens, xs));
}

void moe_gather_fp8_rows(const Tensor& x, const Tensor& row_tokens, Tensor& xs, Tensor& values, Tensor& scales) {
  const char* op = "moe_gather_fp8_rows";
  check_gather(x, row_tokens, xs, op);
  check_fp8_rows(xs, values, scales, op);
  const Device device = device_of(op, {&x, &row_tokens, &xs, &values, &scales});
  bool one_pass = false;
  AMBER_ON_DEVICE(device, op, one_pass = cuda::moe_gather_fp8_rows(x, row_tokens, xs, values, scales),
                  one_pass = false);
  if (one_pass) return;
  moe_gather(x, row_tokens, xs);
  quantize_fp8_rows(xs, values, scales);
}

void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate) {
  const char* op = "moe_combine";
  AMBER_CHECK(out.ndim() == 2 && ys.ndim() == 2 && ys.size(1) == out.size(1), op, ": rows ", ys.shape(),
              " and output ", out.shape(), " must share a width");
  AMBER_CHECK(slot_rows.ndim() == 2 && slot_rows.size(0) == out.size(0) && slot_rows.numel() == ys.size(0) &&
                  slot_rows.dtype() == DType::i32,
              op, ": slot_rows ", slot_rows.shape(), " must be i32 [", out.size(0), ", top_k] for ", ys.size(0),
              " rows");
  const Device device = device_of(op, {&ys, &slot_rows, &out});
  AMBER_ON_DEVICE(device, op, cuda::moe_combine(ys, slot_rows, out, accumulate),
                  cpu::moe_combine(ys, slot_rows, out, accumulate));
}

void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights) {
  const char* op = "moe_weights_to_rows";
  AMBER_CHECK(weights.shape() == slot_rows.shape() && slot_rows.dtype() == DType::i32 &&
                  row_weights.shape() == Shape({weights.numel()}) && row_weights.dtype() == weights.dtype(),
              op, ": weights ", weights.shape(), ", slot_rows ", slot_rows.shape(), " and row_weights ",
              row_weights.shape(), " must be [tokens, top_k], i32 of that shape and [tokens x top_k]");
  const Device device = device_of(op, {&weights, &slot_rows, &row_weights});
  AMBER_ON_DEVICE(device, op, cuda::moe_weights_to_rows(weights, slot_rows, row_weights),
                  cpu::moe_weights_to_rows(weights, slot_rows, row_weights));
}

void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair) {
  const char* op = "moe_router_grad_pair";
  AMBER_CHECK(dlogits.ndim() == 2 && dlogits.dtype() == DType::f32 && dlogits.is_contiguous(), op,
              ": dlogits must be a contiguous f32 [tokens, experts], got ", dtype_name(dlogits.dtype()), " ",
              dlogits.shape());
  AMBER_CHECK(pair.shape() == Shape({2 * dlogits.size(1), dlogits.size(0)}) &&
                  (pair.dtype() == DType::bf16 || pair.dtype() == DType::f16) && pair.is_contiguous(),
              op, ": the pair must be a contiguous bf16 or f16 [", 2 * dlogits.size(1), ", ", dlogits.size(0),
              "], got ", dtype_name(pair.dtype()), " ", pair.shape());
  const Device device = device_of(op, {&dlogits, &pair});
  AMBER_ON_DEVICE(device, op, cuda::moe_router_grad_pair(dlogits, pair), cpu::moe_router_grad_pair(dlogits, pair));
}

void moe_add_load(const Tensor& offsets, Tensor& load) {
  const char* op = "moe_add_load";
  AMBER_CHECK(load.ndim() == 1 && load.dtype() == DType::f64 && offsets.dtype() == DType::i32 &&
                  offsets.shape() == Shape({load.numel() + 1}),
              op, ": load ", load.shape(), " must be f64 [E] beside offsets i32 [E + 1], got offsets ", offsets.shape());
  const Device device = device_of(op, {&offsets, &load});
  AMBER_ON_DEVICE(device, op, cuda::moe_add_load(offsets, load),
                  cpu::moe_add_load(offsets, load));
}

void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats) {
  const char* op = "moe_end_step";
  AMBER_CHECK(load.ndim() == 1 && load.dtype() == DType::f64 && apply.numel() == 1 && apply.dtype() == DType::f64 &&
                  stats.numel() == 3 && stats.dtype() == DType::f64,
              op, ": load f64 [E], apply f64 [1] and stats f64 [3] expected, got ", load.shape(), ", ", apply.shape(),
              " and ", stats.shape());
  AMBER_CHECK(!bias.defined() || (bias.shape() == load.shape() && bias.dtype() == DType::f32), op, ": bias ",
              bias.shape(), " must be f32 of the load's shape ", load.shape());
  const Device device = device_of(op, {&bias, &load, &apply, &stats});
  AMBER_ON_DEVICE(device, op, cuda::moe_end_step(bias, load, rate, apply, stats),
                  cpu::moe_end_step(bias, load, rate, apply, stats));
}

void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights) {
  const char* op = "moe_swiglu_backward";
  check_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights, op);
  const Device device = device_of(op, {&da, &gate_up, &row_weights, &slot_rows, &dgate_up, &act_w, &dweights});
  AMBER_ON_DEVICE(device, op,
                  cuda::moe_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights),
                  cpu::moe_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights));
}

void moe_down_backward_swiglu(const Tensor& douts, const Tensor& w_down, const Tensor& offsets,
                              const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                              Tensor& scratch, Tensor& dgate_up, Tensor& act_w, Tensor& dweights) {
  const char* op = "moe_down_backward_swiglu";
  check_swiglu_backward(scratch, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights, op);
  AMBER_CHECK(douts.ndim() == 2 && douts.size(0) == scratch.size(0) && w_down.ndim() == 3 &&
                  w_down.size(1) == douts.size(1) && w_down.size(2) == scratch.size(1),
              op, ": output gradient rows ", douts.shape(), " and down weights ", w_down.shape(),
              " must be [R, D] and [E, D, H] for scratch ", scratch.shape(), " [R, H]");
  const Device device = device_of(op, {&douts, &w_down, &offsets, &gate_up, &row_weights, &slot_rows, &scratch,
                                       &dgate_up, &act_w, &dweights});
  bool fused = false;
  AMBER_ON_DEVICE(device, op,
                  fused = cuda::grouped_gemm_backward_input_swiglu(douts, w_down, offsets, gate_up, row_weights,
                                                                    slot_rows, scratch, dgate_up, act_w, dweights),
                  fused = false);
  if (fused) return;
  grouped_gemm_backward_input(douts, w_down, offsets, scratch);
  moe_swiglu_backward(scratch, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights);
}

void moe_swiglu_backward_fp8_rows(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                                  const Tensor& slot_rows, Tensor& dgate_up, Tensor& act_w, Tensor& dweights,
                                  Tensor& values, Tensor& scales) {
  const char* op = "moe_swiglu_backward_fp8_rows";
  check_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights, op);
  check_fp8_rows(dgate_up, values, scales, op);
  const Device device =
      device_of(op, {&da, &gate_up, &row_weights, &slot_rows, &dgate_up, &act_w, &dweights, &values, &scales});
  bool one_pass = false;
  AMBER_ON_DEVICE(device, op,
                  one_pass = cuda::moe_swiglu_backward_fp8_rows(da, gate_up, row_weights, slot_rows, dgate_up, act_w,
                                                                dweights, values, scales),
                  one_pass = false);
  if (one_pass) return;
  moe_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights);
  quantize_fp8_rows(dgate_up, values, scales);
}

}  // namespace amber
