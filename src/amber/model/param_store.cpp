#include "amber/model/param_store.h"

#include <array>
#include <utility>

#include "amber/core/error.h"

namespace amber {
namespace {

int64_t aligned(int64_t n) {
  constexpr int64_t a = ParamStore::kAlignment;
  return (n + a - 1) / a * a;
}

// Points p's gradient and working copy at `numel` elements of b from `offset`, viewed
// as `shape` (bind_value points its value).
void bind(Param& p, const ParamStore::Buffer& b, int index, int64_t offset, const Shape& shape) {
  const int64_t n = shape.numel();
  p.buffer = index;
  p.offset = offset;
  p.grad = b.grad.slice(0, offset, offset + n).view(shape);
  p.work = b.work.slice(0, offset, offset + n).view(shape);
}

// p's value is its part of b.value, or undefined where b.value does not hold all of it.
void bind_value(Param& p, const ParamStore::Buffer& b) {
  const int64_t first = p.offset - b.value_begin, n = p.grad.numel();
  p.value = first >= 0 && first + n <= b.value.numel() ? b.value.slice(0, first, first + n).view(p.grad.shape())
                                                       : Tensor();
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
    Buffer b;
    b.role = static_cast<ParamRole>(r);
    b.value = Tensor::zeros({size}, placement_.master, placement_.device);
    b.grad = Tensor::zeros({size}, placement_.master, placement_.device);
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
  bind_values();
  allocated_ = true;
  for (const auto& p : params_)
    if (p->init.kind == ParamInit::Kind::ones) p->value.fill(1.0);
  refresh_working_copies();
}

void ParamStore::bind_values() {
  for (Entry& e : entries_) {
    bind_value(*e.param, buffers_[static_cast<size_t>(e.param->buffer)]);
    for (const auto& part : e.parts) bind_value(*part, buffers_[static_cast<size_t>(part->buffer)]);
  }
}

void ParamStore::refresh_working_copies() {
  for (Buffer& b : buffers_) {
    if (b.work.shares_storage_with(b.value)) continue;
    Tensor mine = b.work.slice(0, b.value_begin, b.value_begin + b.value.numel());
    mine.copy_from(b.value);
  }
}

Tensor ParamStore::Buffer::master_slice(int64_t begin, int64_t end) const {
  AMBER_CHECK(begin >= value_begin && end <= value_begin + value.numel(), "master values [", begin, ", ", end,
              ") of the ", param_role_name(role), " buffer are not kept on this rank (it keeps [", value_begin, ", ",
              value_begin + value.numel(), "))");
  return value.slice(0, begin - value_begin, end - value_begin);
}

void ParamStore::keep_master_ranges(const std::vector<Range>& ranges) {
  AMBER_CHECK(allocated_ && !masters_sharded_, "keep_master_ranges: the store must be allocated and whole");
  AMBER_CHECK(ranges.size() == buffers_.size(), "keep_master_ranges: ", ranges.size(), " ranges for ",
              buffers_.size(), " buffers");
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Buffer& b = buffers_[i];
    const Range r = ranges[i];
    AMBER_CHECK(!b.work.shares_storage_with(b.value), "the master values of the ", param_role_name(b.role),
                " buffer are its working copies (compute dtype ", dtype_name(b.work.dtype()),
                "), which every rank keeps whole");
    AMBER_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= b.grad.numel(), "keep_master_ranges: [", r.begin,
                ", ", r.end, ") lies outside the ", b.grad.numel(), " elements of the ", param_role_name(b.role),
                " buffer");
    b.value = b.value.slice(0, r.begin, r.end).clone();
    b.value_begin = r.begin;
  }
  masters_sharded_ = true;
  bind_values();
}

void ParamStore::open_whole_masters() {
  if (!masters_sharded_) return;
  AMBER_CHECK(!whole_masters_open_, "open_whole_masters: the whole masters are open already");
  for (Buffer& b : buffers_) {
    Tensor whole = Tensor::zeros({b.grad.numel()}, b.value.dtype(), b.value.device());
    Tensor range = whole.slice(0, b.value_begin, b.value_begin + b.value.numel());
    range.copy_from(b.value);
    b.kept = std::exchange(b.value, whole);
    b.kept_begin = std::exchange(b.value_begin, 0);
  }
  whole_masters_open_ = true;
  bind_values();
}

void ParamStore::close_whole_masters(bool loaded) {
  if (!whole_masters_open_) return;
  for (Buffer& b : buffers_) {
    if (loaded) b.kept.copy_from(b.value.slice(0, b.kept_begin, b.kept_begin + b.kept.numel()));
    b.value = std::exchange(b.kept, Tensor());
    b.value_begin = b.kept_begin;
  }
  whole_masters_open_ = false;
  bind_values();
}

}  // namespace amber
