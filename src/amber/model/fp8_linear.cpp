#include "amber/model/fp8_linear.h"

#include "amber/core/error.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/fp8_gemm.h"
#include "amber/ops/glu_linear.h"
#include "amber/ops/quant.h"

namespace amber {
namespace {

// An e4m3 operand and its scales, in the layout the product reads.
struct Quantized {
  Tensor values, scales;
};

// Room for an operand [rows, cols] and its scales in the product's layout.
Quantized allocate(int64_t rows, int64_t cols, Fp8Scaling scaling, Arena& scratch) {
  Tensor storage = scratch.alloc(fp8_gemm_scales_storage(scaling, rows, cols), DType::f32);
  return {scratch.alloc({rows, cols}, DType::f8e4m3), fp8_gemm_scales(scaling, storage, rows, cols)};
}

// x [R, C] in 1x128 blocks of its rows.
Quantized rows_of(const Tensor& x, Arena& scratch) {
  Quantized q = allocate(x.size(0), x.size(1), Fp8Scaling::rows, scratch);
  quantize_fp8_rows(x, q.values, q.scales);
  return q;
}

// x^T [C, R] in 1x128 blocks of its rows (128 consecutive rows of x).
Quantized columns_of(const Tensor& x, Arena& scratch) {
  Quantized q = allocate(x.size(1), x.size(0), Fp8Scaling::rows, scratch);
  quantize_fp8_columns(x, q.values, q.scales);
  return q;
}

// Both of the above from one read of x: an output gradient, which feeds the input
// gradient by its rows and the weight gradient by its columns.
struct RowsAndColumns {
  Quantized rows, columns;
};
RowsAndColumns allocate_rows_and_columns(int64_t rows, int64_t cols, Arena& scratch) {
  return {allocate(rows, cols, Fp8Scaling::rows, scratch), allocate(cols, rows, Fp8Scaling::rows, scratch)};
}
RowsAndColumns rows_and_columns_of(const Tensor& x, Arena& scratch) {
  RowsAndColumns q = allocate_rows_and_columns(x.size(0), x.size(1), scratch);
  quantize_fp8_rows_and_columns(x, q.rows.values, q.rows.scales, q.columns.values, q.columns.scales);
  return q;
}

// w [out, in] in 128x128 tiles.
Quantized tiles_of(const Tensor& w, Arena& scratch) {
  Quantized q = allocate(w.size(0), w.size(1), Fp8Scaling::tiles, scratch);
  quantize_fp8_blocks(w, q.values, q.scales);
  return q;
}

// w^T [in, out] in 128x128 tiles: w's quantizer writes the transposed codes, and w's
// scales land transposed in w^T's layout.
Quantized transposed_tiles_of(const Tensor& w, Arena& scratch) {
  Quantized q = allocate(w.size(1), w.size(0), Fp8Scaling::tiles, scratch);
  Tensor codes = scratch.alloc(w.shape(), DType::f8e4m3);
  Tensor w_scales = q.scales.transpose(0, 1);
  quantize_fp8_blocks(w, codes, w_scales, &q.values);
  return q;
}

// cuBLASLt's FP8 products take row counts that are multiples of 16 (ops/fp8_gemm.h).
// Rows past a tensor's end are zeros: they quantize to zero codes without touching any
// other row's or block's scale, and add nothing to any product, so a product over the
// padded rows holds the real rows' results bit for bit.
constexpr int64_t kRowMultiple = 16;

int64_t padded_rows(const Tensor& t) {
  const int64_t rows = t.size(0);
  return t.device().is_cpu() ? rows : (rows + kRowMultiple - 1) / kRowMultiple * kRowMultiple;
}

// Room for t's rows padded to padded_rows(t): t itself when it needs none.
Tensor padded_room(const Tensor& t, Arena& scratch) {
  const int64_t rows = padded_rows(t);
  return rows == t.size(0) ? t : scratch.alloc({rows, t.size(1)}, t.dtype());
}

// t itself, or a copy in `scratch` with zero rows up to padded_rows(t).
Tensor padded(const Tensor& t, Arena& scratch) {
  Tensor p = padded_room(t, scratch);
  if (p.raw() == t.raw()) return t;
  Tensor real = p.slice(0, 0, t.size(0)), rest = p.slice(0, t.size(0), p.size(0));
  real.copy_from(t);
  rest.zero();
  return p;
}

// Where a product of `like`'s padded rows lands: `out` itself, or a scratch tensor
// whose first rows deliver() copies into `out`.
struct PaddedOutput {
  Tensor out, product;
  PaddedOutput(Tensor& target, const Tensor& like, Arena& scratch)
      : out(target),
        product(padded_rows(like) == target.size(0) ? target
                                                      : scratch.alloc({padded_rows(like), target.size(1)},
                                                                      target.dtype())) {}
  void deliver() {
    if (product.raw() != out.raw()) out.copy_from(product.slice(0, 0, out.size(0)));
  }
};

class Fp8BlockRecipe final : public LinearRecipe {
 public:
  explicit Fp8BlockRecipe(WeightGradient weight_gradient)
      : weight_gradient_(weight_gradient), fallback_(linear_recipe_registry().build(kComputeDtypeRecipe)) {}

  void forward(const Tensor& x, const Param& w, const Param* b, Tensor& y, const ResidualAdd& into,
               Arena& scratch) const override {
    if (!fits(w)) return fallback_->forward(x, w, b, y, into, scratch);
    refuse_bias(b);
    const Arena::Mark mark = scratch.mark();
    const Quantized qx = rows_of(padded(x, scratch), scratch), qw = tiles_of(w.work, scratch);
    if (into.residual && padded_rows(x) == x.size(0)) {
      if (into.sum->raw() != into.residual->raw()) into.sum->copy_from(*into.residual);
      gemm_fp8(qx.values, qx.scales, qw.values, qw.scales, Fp8Scaling::tiles, *into.sum, into.scale, 1.0);
    } else if (into.residual) {
      Tensor product = scratch.alloc({qx.values.size(0), w.work.size(0)}, into.sum->dtype());
      gemm_fp8(qx.values, qx.scales, qw.values, qw.scales, Fp8Scaling::tiles, product);
      add_scaled_into(*into.sum, *into.residual, product.slice(0, 0, x.size(0)), into.scale, "fp8_block residual");
    } else {
      PaddedOutput out(y, x, scratch);
      gemm_fp8(qx.values, qx.scales, qw.values, qw.scales, Fp8Scaling::tiles, out.product);
      out.deliver();
    }
    scratch.rewind(mark);
  }

  void backward(const Tensor& dy, const Tensor& x, Param& w, Param* b, Tensor& dx, Arena& scratch) const override {
    if (!fits(w)) return fallback_->backward(dy, x, w, b, dx, scratch);
    refuse_bias(b);
    const Arena::Mark mark = scratch.mark();
    const Tensor dy_rows = padded(dy, scratch);
    if (weight_gradient_ == WeightGradient::compute_dtype) {
      if (dx.defined()) input_gradient(rows_of(dy_rows, scratch), w, dx, scratch);
      compute_dtype_weight_gradient(dy, x, w, scratch);
    } else if (dx.defined()) {
      const RowsAndColumns qdy = rows_and_columns_of(dy_rows, scratch);
      input_gradient(qdy.rows, w, dx, scratch);
      fp8_weight_gradient(qdy.columns, x, w, scratch);
    } else {
      fp8_weight_gradient(columns_of(dy_rows, scratch), x, w, scratch);
    }
    scratch.rewind(mark);
  }

  void glu_forward(Glu glu, const Tensor& x, const Param& w, const Param* b, Tensor& gate_up, Tensor& h,
                   Arena& scratch) const override {
    if (!fits(w)) return fallback_->glu_forward(glu, x, w, b, gate_up, h, scratch);
    refuse_bias(b);
    const Arena::Mark mark = scratch.mark();
    const Quantized qx = rows_of(padded(x, scratch), scratch), qw = tiles_of(w.work, scratch);
    PaddedOutput out(gate_up, x, scratch);
    gemm_fp8(qx.values, qx.scales, qw.values, qw.scales, Fp8Scaling::tiles, out.product);
    out.deliver();
    scratch.rewind(mark);
    glu_activation_forward(glu, gate_up, h);
  }

  // With FP8 weight gradients dgate_up goes straight from the GLU's backward into the
  // FP8 rows and columns the gate/up products read (glu_backward_fp8_rows_and_columns),
  // never written whole on a GPU; with compute-dtype ones it is written (their operand)
  // with its FP8 rows for dx in the same pass (glu_backward_fp8_rows). A weight that
  // does not fit runs its products in the compute dtype.
  void glu_backward(Glu glu, const Tensor& dy, const GluSaved& saved, const GluParams& p, Tensor& dx,
                    Arena& scratch) const override {
    const Arena::Mark mark = scratch.mark();
    Tensor dh = scratch.alloc(saved.h.shape(), dy.dtype());
    if (!fits(p.down)) {
      fallback_->backward(dy, saved.h, p.down, p.down_bias, dh, scratch);
    } else if (weight_gradient_ == WeightGradient::compute_dtype) {
      refuse_bias(p.down_bias);
      input_gradient(rows_of(padded(dy, scratch), scratch), p.down, dh, scratch);
      compute_dtype_weight_gradient(dy, saved.h, p.down, scratch);
    } else {
      refuse_bias(p.down_bias);
      const RowsAndColumns qdy = rows_and_columns_of(padded(dy, scratch), scratch);
      fp8_weight_gradient(qdy.columns, saved.h, p.down, scratch);
      input_gradient(qdy.rows, p.down, dh, scratch);
    }
    Tensor dgate_up = scratch.alloc(saved.gate_up.shape(), dy.dtype());
    if (!fits(p.gate_up)) {
      glu_activation_backward(glu, dh, saved.gate_up, dgate_up);
      fallback_->backward(dgate_up, saved.x, p.gate_up, p.gate_up_bias, dx, scratch);
    } else if (weight_gradient_ == WeightGradient::compute_dtype && !dx.defined()) {
      refuse_bias(p.gate_up_bias);
      glu_activation_backward(glu, dh, saved.gate_up, dgate_up);
      compute_dtype_weight_gradient(dgate_up, saved.x, p.gate_up, scratch);
    } else if (weight_gradient_ == WeightGradient::compute_dtype) {
      refuse_bias(p.gate_up_bias);
      const Tensor dh_rows = padded(dh, scratch), gate_up_rows = padded(saved.gate_up, scratch);
      Tensor dgate_up_rows = padded_room(dgate_up, scratch);
      Quantized q = allocate(dgate_up_rows.size(0), dgate_up_rows.size(1), Fp8Scaling::rows, scratch);
      glu_backward_fp8_rows(glu, dh_rows, gate_up_rows, dgate_up_rows, q.values, q.scales);
      compute_dtype_weight_gradient(dgate_up_rows.slice(0, 0, dgate_up.size(0)), saved.x, p.gate_up, scratch);
      input_gradient(q, p.gate_up, dx, scratch);
    } else {
      refuse_bias(p.gate_up_bias);
      const Tensor dh_rows = padded(dh, scratch), gate_up_rows = padded(saved.gate_up, scratch);
      Tensor dgate_up_rows = padded_room(dgate_up, scratch);
      RowsAndColumns q = allocate_rows_and_columns(dgate_up_rows.size(0), dgate_up_rows.size(1), scratch);
      glu_backward_fp8_rows_and_columns(glu, dh_rows, gate_up_rows, dgate_up_rows, q.rows.values, q.rows.scales,
                                        q.columns.values, q.columns.scales);
      fp8_weight_gradient(q.columns, saved.x, p.gate_up, scratch);
      if (dx.defined()) input_gradient(q.rows, p.gate_up, dx, scratch);
    }
    scratch.rewind(mark);
  }

 private:
  // The weight's sides are cuBLASLt's N and K: multiples of 16 on a GPU.
  static bool fits(const Param& w) {
    return w.work.device().is_cpu() || (w.work.size(0) % kRowMultiple == 0 && w.work.size(1) % kRowMultiple == 0);
  }

  static void refuse_bias(const Param* b) {
    AMBER_CHECK(!b, "the fp8_block recipe has no bias yet (", b->name,
                "); set model.attn_bias = false or run this projection in the compute dtype");
  }

  // dx = dy W in FP8: dy (its rows padded) by rows, W^T by tiles.
  static void input_gradient(const Quantized& dy_rows, const Param& w, Tensor& dx, Arena& scratch) {
    const Quantized wt = transposed_tiles_of(w.work, scratch);
    PaddedOutput out(dx, dy_rows.values, scratch);
    gemm_fp8(dy_rows.values, dy_rows.scales, wt.values, wt.scales, Fp8Scaling::tiles, out.product);
    out.deliver();
  }

  // W's gradient dy^T x in FP8, both along the (padded) tokens: dy^T given, x^T quantized here.
  static void fp8_weight_gradient(const Quantized& dy_t, const Tensor& x, Param& w, Arena& scratch) {
    const Quantized xt = columns_of(padded(x, scratch), scratch);
    gemm_fp8(dy_t.values, dy_t.scales, xt.values, xt.scales, Fp8Scaling::rows, w.grad, 1.0,
             w.grad_accumulates() ? 1.0 : 0.0);
  }

  // W's gradient dy^T x from the compute-dtype operands (the fallback's products with
  // no input gradient asked).
  void compute_dtype_weight_gradient(const Tensor& dy, const Tensor& x, Param& w, Arena& scratch) const {
    Tensor no_dx;
    fallback_->backward(dy, x, w, nullptr, no_dx, scratch);
  }

  WeightGradient weight_gradient_;
  std::unique_ptr<LinearRecipe> fallback_;
};

}  // namespace

std::unique_ptr<LinearRecipe> make_fp8_block_recipe(WeightGradient weight_gradient) {
  return std::make_unique<Fp8BlockRecipe>(weight_gradient);
}

}  // namespace amber
