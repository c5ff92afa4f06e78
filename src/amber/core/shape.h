// A tensor shape of at most five dimensions, stored inline.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>

namespace amber {

constexpr int kMaxDims = 5;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  void push_back(int64_t dim);
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

}  // namespace amber
