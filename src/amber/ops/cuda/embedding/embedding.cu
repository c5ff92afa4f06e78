// CUDA token embedding. The backward sorts token indices by id with a stable radix
// sort, so the tokens of one id form a segment in token order; one block owns each
// segment and adds it into its table row. No float atomics: the sums, and their
// order, are the same on every run (and the same order as the CPU's).
#include <cub/device/device_radix_sort.cuh>

#include <cstdio>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/embedding/embedding.h"

namespace amber::cuda {
namespace {

// An out-of-range id cannot be reported from inside a kernel without a host
// synchronisation, so it stops the program: the message names the op and the token.
__device__ __forceinline__ void check_id(int32_t id, int64_t vocab, int64_t token, const char* op) {
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0)
      printf("amber %s: token id %d at position %lld is outside the vocabulary [0, %lld)\n", op, id,
             static_cast<long long>(token), static_cast<long long>(vocab));
    __trap();
  }
}

// One block per token copies its row as `Word`s (16-byte words when rows allow).
template <class Word>
__global__ void gather_kernel(const Word* table, const int32_t* ids, Word* out, int64_t words_per_row,
                              int64_t vocab) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  check_id(id, vocab, t, "embedding_forward");
  const Word* src = table + id * words_per_row;
  Word* dst = out + t * words_per_row;
  for (int64_t i = threadIdx.x; i < words_per_row; i += blockDim.x) dst[i] = src[i];
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<int32_t>(i);
}

// Block i starts a segment when sorted_ids[i] differs from its predecessor; it then
// walks the segment (tokens ascending, the stable sort kept them so) per column.
template <class G, class P>
__global__ void scatter_add_kernel(const G* dout, const int32_t* sorted_ids, const int32_t* tokens,
                                   P* dtable, int64_t n_tokens, int64_t dim, int64_t vocab) {
  const int64_t i = blockIdx.x;
  const int32_t id = sorted_ids[i];
  check_id(id, vocab, tokens[i], "embedding_backward");
  if (i > 0 && sorted_ids[i - 1] == id) return;
  int64_t end = i + 1;
  while (end < n_tokens && sorted_ids[end] == id) ++end;
  P* row = dtable + id * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = to_f32(row[c]);
    for (int64_t j = i; j < end; ++j) acc += to_f32(dout[static_cast<int64_t>(tokens[j]) * dim + c]);
    row[c] = from_f32<P>(acc);
  }
}

int significant_bits(int64_t vocab) {
  int bits = 1;
  while ((int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out) {
  const char* op = "embedding_forward";
  require_contiguous(table, op);
  require_contiguous(ids, op);
  require_contiguous(out, op);
  AMBER_CHECK(table.dtype() == out.dtype(), op, ": on the GPU the table (", dtype_name(table.dtype()),
              ") and the output (", dtype_name(out.dtype()), ") need one dtype");
  const int64_t tokens = ids.numel();
  if (tokens == 0 || table.size(1) == 0) return;
  const int64_t row_bytes = table.size(1) * static_cast<int64_t>(dtype_size(table.dtype()));
  const bool wide = row_bytes % 16 == 0 && aligned16(table.raw()) && aligned16(out.raw());
  const int threads = 128;
  // Every supported dtype is a whole number of 2-byte words.
  AMBER_CHECK(row_bytes % 2 == 0 && dtype_size(table.dtype()) >= 2, op, ": dtype ",
              dtype_name(table.dtype()), " is not supported on the GPU");
  if (wide)
    gather_kernel<uint4><<<static_cast<unsigned>(tokens), threads, 0, current_stream()>>>(
        static_cast<const uint4*>(table.raw()), static_cast<const int32_t*>(ids.raw()),
        static_cast<uint4*>(out.raw()), row_bytes / 16, table.size(0));
  else
    gather_kernel<uint16_t><<<static_cast<unsigned>(tokens), threads, 0, current_stream()>>>(
        static_cast<const uint16_t*>(table.raw()), static_cast<const int32_t*>(ids.raw()),
        static_cast<uint16_t*>(out.raw()), row_bytes / 2, table.size(0));
  check_launch(op, out.shape());
}

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable) {
  const char* op = "embedding_backward";
  require_contiguous(dout, op);
  require_contiguous(ids, op);
  require_contiguous(dtable, op);
  const int64_t tokens = ids.numel(), dim = dtable.size(1), vocab = dtable.size(0);
  if (tokens == 0 || dim == 0) return;
  AMBER_CHECK(tokens < (int64_t{1} << 31), op, ": ", tokens, " tokens exceed the int32 index range");
  const Device device = ids.device();
  Tensor sorted_ids = Tensor::empty({tokens}, DType::i32, device);
  Tensor order_in = Tensor::empty({tokens}, DType::i32, device);
  Tensor order = Tensor::empty({tokens}, DType::i32, device);
  iota_kernel<<<grid_for(tokens, 256), 256, 0, current_stream()>>>(
      static_cast<int32_t*>(order_in.raw()), tokens);
  check_launch(op, ids.shape());

  const int32_t* keys_in = static_cast<const int32_t*>(ids.raw());
  int32_t* keys_out = static_cast<int32_t*>(sorted_ids.raw());
  const int32_t* vals_in = static_cast<const int32_t*>(order_in.raw());
  int32_t* vals_out = static_cast<int32_t*>(order.raw());
  const int end_bit = significant_bits(vocab);
  size_t temp_bytes = 0;
  cudaError_t status = cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in,
                                                       vals_out, tokens, 0, end_bit, current_stream());
  AMBER_CHECK(status == cudaSuccess, op, ": sizing the id sort for ", tokens,
              " tokens failed: ", cudaGetErrorString(status));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 4 + 1)}, DType::i32, device);
  status = cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                           tokens, 0, end_bit, current_stream());
  AMBER_CHECK(status == cudaSuccess, op, ": sorting ", tokens, " token ids failed: ",
              cudaGetErrorString(status));

  with_element_type(dout.dtype(), op, [&](auto gtag) {
    using G = decltype(gtag);
    with_element_type(dtable.dtype(), op, [&](auto ptag) {
      using P = decltype(ptag);
      scatter_add_kernel<G, P><<<static_cast<unsigned>(tokens), 128, 0, current_stream()>>>(
          static_cast<const G*>(dout.raw()), keys_out, vals_out, static_cast<P*>(dtable.raw()), tokens,
          dim, vocab);
    });
  });
  check_launch(op, dout.shape());
}

}  // namespace amber::cuda
