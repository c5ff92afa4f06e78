#include "amber/model/param.h"

namespace amber {

std::shared_ptr<Param> make_param(std::string name, Shape shape, const Placement& placement) {
  auto p = std::make_shared<Param>();
  p->name = std::move(name);
  p->value = Tensor::zeros(shape, placement.master, placement.device);
  p->grad = Tensor::zeros(shape, placement.master, placement.device);
  p->work = placement.compute == placement.master ? p->value : Tensor::zeros(shape, placement.compute, placement.device);
  p->weight_decay = shape.ndim() >= 2;  // no decay on gains and biases
  p->muon = shape.ndim() == 2;
  return p;
}

}  // namespace amber
