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

StackedParams make_stacked_params(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                                  const Shape& trailing, const Placement& placement) {
  AMBER_CHECK(names.size() == rows.size() && !names.empty(), "make_stacked_params: ", names.size(), " names for ",
              rows.size(), " row counts");
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  Shape whole_shape{total};
  for (int d = 0; d < trailing.ndim(); ++d) whole_shape.push_back(trailing[d]);
  StackedParams s;
  s.whole = make_param("", whole_shape, placement);
  int64_t first = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto p = std::make_shared<Param>(*s.whole);
    p->name = names[i];
    p->value = s.whole->value.slice(0, first, first + rows[i]);
    p->grad = s.whole->grad.slice(0, first, first + rows[i]);
    p->work = s.whole->work.slice(0, first, first + rows[i]);
    s.parts.push_back(std::move(p));
    first += rows[i];
  }
  return s;
}

}  // namespace amber
