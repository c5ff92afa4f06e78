// Entry points of ops/optim.h. Newton-Schulz is written once over the GEMM and
// element-wise entry points, so it runs on whichever device holds the matrix.
#include "amber/ops/optim.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "amber/ops/cpu/optim.h"
#include "amber/ops/cuda/optim/optim.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/gemm.h"

namespace amber {

namespace {

void require_schedule(const Tensor& schedule, const char* op) {
  AMBER_CHECK(schedule.dtype() == DType::f64 && schedule.numel() == kScheduleSize && schedule.is_contiguous(), op,
              ": the schedule must be ", kScheduleSize, " contiguous f64 elements, got ",
              dtype_name(schedule.dtype()), " ", schedule.shape());
}

// The gated element-wise updates: a target changed in place from a source of the same
// shape and dtype, both contiguous, and the schedule.
void require_gated_pair(const Tensor& target, const Tensor& source, const Tensor& schedule, const char* op,
                        const char* target_name, const char* source_name) {
  require_same_shape(target, source, op);
  require_schedule(schedule, op);
  require_contiguous(target, op);
  require_contiguous(source, op);
  AMBER_CHECK(target.dtype() == source.dtype(), op, ": ", target_name, " is ", dtype_name(target.dtype()), " but ",
              source_name, " is ", dtype_name(source.dtype()));
}

}  // namespace

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2) {
  const char* op = "advance_schedule";
  require_schedule(schedule, op);
  AMBER_CHECK(gate.dtype() == DType::f64 && gate.numel() == kGateSlots && gate.is_contiguous(), op,
              ": the gate must be ", kGateSlots, " contiguous f64 elements (apply, lr multiplier, gradient scale), got ",
              gate.shape());
  AMBER_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, op, ": betas must lie in [0, 1), got ", beta1,
              " and ", beta2);
  AMBER_ON_DEVICE(ops::common_device(op, {&schedule, &gate}), op, cuda::advance_schedule(schedule, gate, beta1, beta2),
                  cpu::advance_schedule(schedule, gate, beta1, beta2));
}

void finite_flag(const Tensor& values, Tensor& flag) {
  const char* op = "finite_flag";
  AMBER_CHECK(values.dtype() == DType::f64 && values.is_contiguous() && flag.dtype() == DType::f64 &&
                  flag.numel() == 1,
              op, ": takes contiguous f64 values and one f64 flag, got ", dtype_name(values.dtype()), " and ",
              dtype_name(flag.dtype()), " ", flag.shape());
  AMBER_ON_DEVICE(ops::common_device(op, {&values, &flag}), op, cuda::finite_flag(values, flag),
                  cpu::finite_flag(values, flag));
}

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                const Tensor& schedule, Tensor& work) {
  const AdamWOperands one{&value, &grad, &m, &v, &work, h};
  adamw_steps(std::span<const AdamWOperands>(&one, 1), schedule);
}

void adamw_steps(std::span<const AdamWOperands> params, const Tensor& schedule) {
  const char* op = "adamw_step";
  require_schedule(schedule, op);
  std::vector<const Tensor*> all{&schedule};
  for (const AdamWOperands& p : params) {
    require_same_shape(*p.value, *p.grad, "adamw_step grad");
    require_same_shape(*p.value, *p.m, "adamw_step first moment");
    require_same_shape(*p.value, *p.v, "adamw_step second moment");
    require_same_shape(*p.value, *p.work, "adamw_step working copy");
    for (const Tensor* t : {static_cast<const Tensor*>(p.value), p.grad, static_cast<const Tensor*>(p.m),
                            static_cast<const Tensor*>(p.v), static_cast<const Tensor*>(p.work)}) {
      require_contiguous(*t, op);
      all.push_back(t);
    }
  }
  const auto on_cpu = [&] {
    for (const AdamWOperands& p : params) cpu::adamw_step(*p.value, *p.grad, *p.m, *p.v, p.hyper, schedule, *p.work);
  };
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::adamw_steps(params, schedule), on_cpu());
}

void muon_momentum_steps(std::span<const MuonOperands> params, double mu, bool nesterov, const Tensor& schedule) {
  const char* op = "muon_momentum_steps";
  std::vector<const Tensor*> all{&schedule};
  for (const MuonOperands& p : params) {
    require_gated_pair(*p.momentum, *p.grad, schedule, op, "momentum", "the gradient");
    require_gated_pair(*p.update, *p.grad, schedule, op, "the update", "the gradient");
    all.insert(all.end(), {p.momentum, p.grad, p.update});
  }
  const auto on_cpu = [&] {
    for (const MuonOperands& p : params) {
      cpu::momentum_step(*p.momentum, *p.grad, mu, schedule);
      p.update->copy_from(*p.momentum);
      if (nesterov) cpu::momentum_step(*p.update, *p.grad, mu, schedule);
    }
  };
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::muon_momentum_steps(params, mu, nesterov, schedule), on_cpu());
}

void muon_apply_steps(std::span<const MuonOperands> params, const Tensor& schedule) {
  const char* op = "muon_apply_steps";
  std::vector<const Tensor*> all{&schedule};
  for (const MuonOperands& p : params) {
    require_gated_pair(*p.value, *p.update, schedule, op, "the value", "the update");
    require_same_shape(*p.value, *p.work, "muon_apply_steps working copy");
    require_contiguous(*p.work, op);
    all.insert(all.end(), {p.value, p.update, p.work});
  }
  const auto on_cpu = [&] {
    for (const MuonOperands& p : params) {
      cpu::apply_update(*p.value, *p.update, p.decay_rate, p.update_rate, schedule);
      if (!p.work->shares_storage_with(*p.value)) p.work->copy_from(*p.value);
    }
  };
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::muon_apply_steps(params, schedule), on_cpu());
}

NewtonSchulz newton_schulz_from_name(const std::string& name) {
  if (name == "cubic5") return NewtonSchulz::cubic5;
  if (name == "quintic5") return NewtonSchulz::quintic5;
  fail("unknown Newton-Schulz variant '", name, "'; valid: cubic5, quintic5");
}

void newton_schulz_orthogonalize(Tensor& g, NewtonSchulz variant, DType compute) {
  AMBER_CHECK(g.ndim() == 2 || g.ndim() == 3,
              "newton_schulz_orthogonalize takes a matrix, or a batch of them [n, rows, cols], got ", g.shape());
  // Iterate on the short side s = min(rows, cols): a wide X uses the Gram X X^T and
  // multiplies from the left, a tall one X^T X from the right. No transposed copies.
  const bool batched = g.ndim() == 3;
  const int64_t count = batched ? g.size(0) : 1, rows = g.size(-2), cols = g.size(-1);
  const bool wide = rows <= cols;
  const int64_t side = wide ? rows : cols;
  const Device device = g.device();
  const auto shaped = [&](int64_t r, int64_t c) { return batched ? Shape{count, r, c} : Shape{r, c}; };
  Tensor x = Tensor::empty(shaped(rows, cols), compute, device);
  x.copy_from(g);
  // X / (|X| (1 + 1%)) puts every singular value below 1; the norms never leave the device.
  Tensor squares = Tensor::empty({count}, DType::f64, device);
  std::vector<Tensor> matrices;
  for (int64_t i = 0; i < count; ++i) matrices.push_back(batched ? x.select(0, i) : x);
  squared_norms_into(matrices, squares);
  divide_by_norm_(x, squares, 1e-7, 1.01);
  Tensor gram = Tensor::empty(shaped(side, side), compute, device);
  Tensor poly = variant == NewtonSchulz::quintic5 ? Tensor::empty(shaped(side, side), compute, device) : Tensor();
  Tensor next = Tensor::empty(shaped(rows, cols), compute, device);
  for (int step = 0; step < 5; ++step) {
    if (wide) gemm(x, false, x, true, gram);
    else gemm(x, true, x, false, gram);
    // X <- aX + alpha P X with P the polynomial in G: the products' epilogues add aX
    // (X is their addend) and scale by alpha, so no pass of its own copies X or scales G.
    double a, alpha = 1.0;
    Tensor* factor = &poly;
    if (variant == NewtonSchulz::quintic5) {
      a = 3.4445;  // X <- aX + (bG + cG^2) X
      gemm(gram, false, gram, false, poly, 2.0315, 0.0);
      add_scaled(poly, gram, -4.7750);
    } else {
      // The cubic per-step schedule: X <- (aI + bG) X, landing singular values in
      // roughly [0.77, 1.30] at two thirds of the quintic's FLOPs.
      static constexpr double kCubic[5][2] = {{3.3656576, -3.3420992}, {2.5744352, -1.4957376},
                                              {2.5368962, -1.4312570}, {2.4418906, -1.2764040},
                                              {2.2230472, -0.9630650}};
      a = kCubic[step][0], alpha = kCubic[step][1];
      factor = &gram;
    }
    if (wide) gemm(*factor, false, x, false, next, alpha, a, x);
    else gemm(x, false, *factor, false, next, alpha, a, x);
    std::swap(x, next);
  }
  g.copy_from(x);
}

namespace {

// The device-resident scalars of the norm ops: one f64 element, written or read in place.
void require_f64_scalar(const Tensor& t, const char* op, const char* what) {
  AMBER_CHECK(t.dtype() == DType::f64 && t.numel() == 1 && t.is_contiguous(), op, ": ", what,
              " must be one contiguous f64 element, got ", dtype_name(t.dtype()), " ", t.shape());
}

// The per-tensor outputs of the norm ops: one f64 slot per tensor, contiguous.
void require_f64_slots(const Tensor& t, size_t count, const char* op) {
  AMBER_CHECK(t.dtype() == DType::f64 && t.ndim() == 1 && t.is_contiguous() && t.numel() == static_cast<int64_t>(count),
              op, ": the output must be a contiguous f64 vector of ", count, " elements, got ", dtype_name(t.dtype()),
              " ", t.shape());
}

}  // namespace

void squared_norm_into(const Tensor& t, Tensor& out) {
  require_f64_scalar(out, "squared_norm_into", "the output");
  squared_norms_into(std::span<const Tensor>(&t, 1), out);
}

void squared_norms_into(std::span<const Tensor> tensors, Tensor& squares) {
  const char* op = "squared_norms_into";
  require_f64_slots(squares, tensors.size(), op);
  std::vector<Tensor> contiguous;
  std::vector<const Tensor*> all{&squares};
  contiguous.reserve(tensors.size());
  for (const Tensor& t : tensors) contiguous.push_back(t.contiguous());
  for (const Tensor& t : contiguous) all.push_back(&t);
  const auto on_cpu = [&] {
    for (size_t i = 0; i < contiguous.size(); ++i) squares.data<double>()[i] = cpu::squared_norm(contiguous[i]);
  };
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::squared_norms_into(contiguous, squares), on_cpu());
}

void sums_into(std::span<const Tensor> tensors, Tensor& sums) {
  const char* op = "sums_into";
  require_f64_slots(sums, tensors.size(), op);
  std::vector<const Tensor*> all{&sums};
  for (const Tensor& t : tensors) {
    AMBER_CHECK(t.dtype() == DType::f64 && t.is_contiguous(), op, ": sums f64 contiguous tensors, got ",
                dtype_name(t.dtype()), " ", t.shape());
    all.push_back(&t);
  }
  const auto on_cpu = [&] {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const double* v = tensors[i].data<double>();
      sums.data<double>()[i] = std::accumulate(v, v + tensors[i].numel(), 0.0);
    }
  };
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::sums_into(tensors, sums), on_cpu());
}

double squared_norm(const Tensor& t) {
  Tensor out = Tensor::empty({1}, DType::f64, t.device());
  squared_norm_into(t, out);
  return out.to(Device::cpu()).item(0);
}

void norm_from_squares(const Tensor& squares, Tensor& out) {
  const char* op = "norm_from_squares";
  require_f64_scalar(out, op, "the output");
  AMBER_CHECK(squares.dtype() == DType::f64 && squares.ndim() == 1 && squares.is_contiguous(), op,
              ": squares must be a contiguous f64 vector, got ", dtype_name(squares.dtype()), " ", squares.shape());
  AMBER_ON_DEVICE(ops::common_device(op, {&squares, &out}), op, cuda::norm_from_squares(squares, out),
                  cpu::norm_from_squares(squares, out));
}

void clip_scale(Tensor& scale, const Tensor& norm, double max_norm) {
  const char* op = "clip_scale";
  require_f64_scalar(norm, op, "the norm");
  require_f64_scalar(scale, op, "the scale");
  AMBER_CHECK(max_norm > 0, op, ": max_norm must be positive, got ", max_norm);
  AMBER_ON_DEVICE(ops::common_device(op, {&scale, &norm}), op, cuda::clip_scale(scale, norm, max_norm),
                  cpu::clip_scale(scale, norm, max_norm));
}

void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin) {
  const char* op = "divide_by_norm_";
  AMBER_CHECK(squares.dtype() == DType::f64 && squares.ndim() == 1 && squares.is_contiguous() &&
                  squares.numel() > 0 && t.numel() % squares.numel() == 0,
              op, ": the squared norms must be contiguous f64 [n], n dividing t's ", t.numel(),
              " elements into equal parts, got ", dtype_name(squares.dtype()), " ", squares.shape());
  require_contiguous(t, op);
  AMBER_CHECK(floor > 0 && margin > 0, op, ": floor and margin must be positive, got ", floor, " and ", margin);
  AMBER_ON_DEVICE(ops::common_device(op, {&t, &squares}), op, cuda::divide_by_norm_(t, squares, floor, margin),
                  cpu::divide_by_norm_(t, squares, floor, margin));
}

void scale_(Tensor& t, double alpha) { scale_into(t, t, alpha); }

bool all_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  AMBER_ON_DEVICE(c.device(), "all_finite", return cuda::all_finite(c), return cpu::all_finite(c));
}

}  // namespace amber
