#include "amber/model/param_store.h"

#include <array>

#include "amber/core/error.h"

namespace amber {
namespace {

int64_t aligned(int64_t n) {
  constexpr int64_t a = ParamStore::kAlignment;
  return (n + a - 1) / a * a;
}

// Points p's tensors at `numel` elements of b from `offset`, viewed as `shape`.
void bind(Param& p, const ParamStore::Buffer& b, int index, int64_t offset, const Shape& shape) {
  const int64_t n = shape.numel();
  p.buffer = index;
  p.offset = offset;
  p.value = b.value.slice(0, offset, offset + n).view(shape);
  p.grad = b.grad.slice(0, offset, offset + n).view(shape);
  p.work = b.work.slice(0, offset, offset + n).view(shape);
}

}  // namespace

ParamStore::ParamStore(const Placement& placement) : placement_(placement) {}

std::shared_ptr<Param> ParamStore::declare(std::string name, ParamRole role, ParamInit init) {
  AMBER_CHECK(!allocated_, "parameter '", name, "' declared after the store was allocated");
  auto p = std::make_shared<Param>();
  p->name = std::move(name);
  p->role = role;
  p->init = init;
  p->muon = role == ParamRole::hidden_matrix || role == ParamRole::expert_matrix;
  return p;
}

std::shared_ptr<Param> ParamStore::add(std::string name, Shape shape, ParamRole role, ParamInit init) {
  auto p = declare(std::move(name), role, init);
  entries_.push_back({p, shape, {}, {}});
  params_.push_back(p);
  return p;
}

StackedParams ParamStore::add_stacked(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                                      const Shape& trailing, ParamRole role, ParamInit init) {
  AMBER_CHECK(names.size() == rows.size() && !names.empty(), "add_stacked: ", names.size(), " names for ",
              rows.size(), " row counts");
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  Shape whole_shape{total};
  for (int d = 0; d < trailing.ndim(); ++d) whole_shape.push_back(trailing[d]);
  StackedParams s;
  s.whole = declare("", role, init);
  for (const std::string& name : names) {
    auto part = declare(name, role, init);
    part->stale_grad = s.whole->stale_grad;
    s.parts.push_back(part);
    params_.push_back(part);
  }
  entries_.push_back({s.whole, whole_shape, s.parts, rows});
  return s;
}

void ParamStore::allocate() {
  AMBER_CHECK(!allocated_, "ParamStore::allocate: the store is allocated already");
  std::array<int64_t, kParamRoles> sizes{};
  for (Entry& e : entries_) {
    int64_t& size = sizes[static_cast<size_t>(e.param->role)];
    e.param->offset = size;
    size += aligned(e.shape.numel());
  }
  std::array<int, kParamRoles> index{};
  for (int r = 0; r < kParamRoles; ++r) {
    index[static_cast<size_t>(r)] = static_cast<int>(buffers_.size());
    const int64_t size = sizes[static_cast<size_t>(r)];
    if (size == 0) continue;
    Buffer b{static_cast<ParamRole>(r), Tensor::zeros({size}, placement_.master, placement_.device),
             Tensor::zeros({size}, placement_.master, placement_.device), Tensor(), {}};
    b.work = placement_.compute == placement_.master ? b.value
                                                     : Tensor::zeros({size}, placement_.compute, placement_.device);
    buffers_.push_back(std::move(b));
  }
  for (Entry& e : entries_) {
    const int i = index[static_cast<size_t>(e.param->role)];
    Buffer& b = buffers_[static_cast<size_t>(i)];
    bind(*e.param, b, i, e.param->offset, e.shape);
    if (e.parts.empty()) {
      b.params.push_back(e.param.get());
      continue;
    }
    const int64_t row = e.shape.numel() / e.shape[0];
    int64_t first = 0;
    for (size_t k = 0; k < e.parts.size(); ++k) {
      Shape shape = e.shape;
      shape[0] = e.rows[k];
      bind(*e.parts[k], b, i, e.param->offset + first * row, shape);
      b.params.push_back(e.parts[k].get());
      first += e.rows[k];
    }
  }
  allocated_ = true;
  for (const auto& p : params_)
    if (p->init.kind == ParamInit::Kind::ones) p->value.fill(1.0);
  refresh_working_copies();
}

void ParamStore::refresh_working_copies() {
  for (Buffer& b : buffers_)
    if (!b.work.shares_storage_with(b.value)) b.work.copy_from(b.value);
}

}  // namespace amber
