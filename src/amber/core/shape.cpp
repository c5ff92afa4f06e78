#include "amber/core/shape.h"

#include "amber/core/error.h"

namespace amber {

Shape::Shape(std::initializer_list<int64_t> dims) {
  AMBER_CHECK(dims.size() <= kMaxDims, "a tensor has at most ", kMaxDims, " dimensions, got ",
              dims.size());
  for (int64_t d : dims) {
    AMBER_CHECK(d >= 0, "negative dimension ", d, " in a shape");
    dims_[ndim_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t dim) {
  AMBER_CHECK(ndim_ < kMaxDims, "a tensor has at most ", kMaxDims, " dimensions");
  dims_[ndim_++] = dim;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  out << '[';
  for (int i = 0; i < shape.ndim(); ++i) out << (i ? ", " : "") << shape[i];
  return out << ']';
}

}  // namespace amber
