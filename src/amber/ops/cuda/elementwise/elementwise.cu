// CUDA residual-stream helpers: one grid-stride map kernel, 16-byte packs when every
// pointer is aligned, a scalar tail for the remainder.
#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/elementwise/elementwise.h"

namespace amber::cuda {
namespace {

// out[i] = x[i] + alpha * y[i], or alpha * y[i] without x; x may be out itself.
template <class T>
__global__ void axpy_kernel(T* out, const T* x, const T* y, float alpha, int64_t n, bool packed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail = 0;
  if (packed) {
    constexpr int N = Pack<T>::n;
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<T> b = reinterpret_cast<const Pack<T>*>(y)[p];
      Pack<T> a;
      if (x) a = reinterpret_cast<const Pack<T>*>(x)[p];
      Pack<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_f32<T>((x ? to_f32(a.v[e]) : 0.0f) + alpha * to_f32(b.v[e]));
      reinterpret_cast<Pack<T>*>(out)[p] = o;
    }
    tail = packs * N;
  }
  for (int64_t i = tail + tid; i < n; i += stride)
    out[i] = from_f32<T>((x ? to_f32(x[i]) : 0.0f) + alpha * to_f32(y[i]));
}

void axpy(Tensor& out, const Tensor* x, const Tensor& y, double alpha, const char* op) {
  require_contiguous(out, op);
  require_contiguous(y, op);
  if (x) require_contiguous(*x, op);
  for (const Tensor* t : {x, &y})
    AMBER_CHECK(!t || t->dtype() == out.dtype(), op, ": on the GPU every tensor needs the output's dtype ",
                dtype_name(out.dtype()), ", got ", dtype_name(t->dtype()));
  const int64_t n = out.numel();
  if (n == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw());
    const T* a = x ? static_cast<const T*>(x->raw()) : nullptr;
    const T* b = static_cast<const T*>(y.raw());
    const bool packed = aligned16(o) && aligned16(b) && (!a || aligned16(a));
    const int threads = 256;
    axpy_kernel<T><<<grid_for(packed ? n / Pack<T>::n + 1 : n, threads), threads, 0, current_stream()>>>(
        o, a, b, static_cast<float>(alpha), n, packed);
  });
  check_launch(op, out.shape());
}

}  // namespace

void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha, const char* op) {
  axpy(out, &x, y, alpha, op);
}

void scale_into(Tensor& out, const Tensor& in, double alpha) { axpy(out, nullptr, in, alpha, "scale_into"); }

template <class T>
__global__ void fill_from_scalar_kernel(T* out, int64_t n, const double* scalar) {
  const T value = from_f32<T>(static_cast<float>(*scalar));
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

void fill_from_scalar(Tensor& out, const Tensor& scalar) {
  const char* op = "fill_from_scalar";
  const int64_t n = out.numel();
  if (n == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fill_from_scalar_kernel<T><<<grid_for(n, 256), 256, 0, current_stream()>>>(
        static_cast<T*>(out.raw()), n, static_cast<const double*>(scalar.raw()));
  });
  check_launch(op, out.shape());
}

namespace {

// Up to kMax tensors for one launch, passed by value (a captured graph holds it).
// Tensor i owns the chunks first_chunk[i] .. first_chunk[i + 1] - 1 of kBytes each.
struct ZeroTable {
  static constexpr int kMax = 64;
  static constexpr int64_t kBytes = 65536;
  void* data[kMax];
  int64_t bytes[kMax];
  int64_t first_chunk[kMax + 1];
  int count;
};

// One block per chunk of any tensor in the table: 16-byte stores where the tensor is
// aligned, single bytes for its unaligned start or ragged end.
__global__ void zero_chunks_kernel(const __grid_constant__ ZeroTable table) {
  const int64_t chunk = blockIdx.x;
  const int i = table_entry(table.first_chunk, table.count, chunk);
  char* base = static_cast<char*>(table.data[i]);
  const int64_t begin = (chunk - table.first_chunk[i]) * ZeroTable::kBytes;
  const int64_t end = min(begin + ZeroTable::kBytes, table.bytes[i]);
  const int64_t words_end = aligned16(base) ? begin + (end - begin) / 16 * 16 : begin;
  for (int64_t j = begin + 16 * static_cast<int64_t>(threadIdx.x); j < words_end; j += 16 * blockDim.x)
    *reinterpret_cast<uint4*>(base + j) = make_uint4(0, 0, 0, 0);
  for (int64_t j = words_end + threadIdx.x; j < end; j += blockDim.x) base[j] = 0;
}

}  // namespace

void zero_all(std::span<Tensor> tensors) {
  const char* op = "zero_all";
  for (size_t next = 0; next < tensors.size();) {
    ZeroTable table{};
    for (; next < tensors.size() && table.count < ZeroTable::kMax; ++next) {
      const int i = table.count++;
      table.data[i] = tensors[next].raw();
      table.bytes[i] = static_cast<int64_t>(tensors[next].bytes());
      table.first_chunk[i + 1] = table.first_chunk[i] + (table.bytes[i] + ZeroTable::kBytes - 1) / ZeroTable::kBytes;
    }
    const int64_t chunks = table.first_chunk[table.count];
    AMBER_CHECK(chunks < (int64_t{1} << 31), op, ": ", chunks, " chunks of ", ZeroTable::kBytes,
                " bytes exceed the launch grid");
    if (chunks == 0) continue;
    zero_chunks_kernel<<<static_cast<unsigned>(chunks), 256, 0, current_stream()>>>(table);
    check_launch(op, tensors[next - 1].shape());
  }
}

}  // namespace amber::cuda
