// Entry points of ops/embedding.h: shared validation, then the device switch.
#include "amber/ops/embedding.h"

#include "amber/ops/cpu/embedding.h"
#include "amber/ops/cuda/embedding/embedding.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

void check_ids(const Tensor& ids, const char* op) {
  AMBER_CHECK(ids.dtype() == DType::i32 && ids.ndim() == 1, op, ": ids must be int32 [T], got ",
              dtype_name(ids.dtype()), " ", ids.shape());
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out) {
  const char* op = "embedding_forward";
  AMBER_CHECK(table.ndim() == 2 && out.ndim() == 2 && out.size(0) == ids.numel() &&
                  out.size(1) == table.size(1),
              "embedding_forward: table ", table.shape(), ", ids ", ids.shape(), ", out ", out.shape());
  check_ids(ids, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&table, &ids, &out}), op,
                  cuda::embedding_forward(table, ids, out), cpu::embedding_forward(table, ids, out));
}

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable) {
  const char* op = "embedding_backward";
  AMBER_CHECK(dout.ndim() == 2 && dtable.ndim() == 2 && dout.size(0) == ids.numel() &&
                  dout.size(1) == dtable.size(1),
              "embedding_backward: grad ", dout.shape(), ", ids ", ids.shape(), ", table grad ",
              dtable.shape());
  check_ids(ids, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dout, &ids, &dtable}), op,
                  cuda::embedding_backward(dout, ids, dtable),
                  cpu::embedding_backward(dout, ids, dtable));
}

}  // namespace amber
