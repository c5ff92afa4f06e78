// CUDA dense products through cuBLASLt, and the linear layer's bias helpers.
// Row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T,
// so the tensors are handed over as they lie, with no copies.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "amber/ops/cuda/common.cuh"
#include "amber/ops/cuda/elementwise.h"
#include "amber/ops/cuda/gemm.h"

namespace amber::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Everything a heuristic answer depends on: types, transposes, sizes, leading
// dimensions and the pointers' alignments.
using AlgoKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int, int, int>;

// One handle, workspace and heuristic cache per host thread and device: each host
// thread launches on its own cudaStreamPerThread, so sharing a workspace would race.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};

LtState& lt_state() {
  thread_local std::map<int, LtState> states;
  int device = 0;
  cudaGetDevice(&device);
  LtState& s = states[device];
  if (!s.handle) {
    AMBER_CHECK(cublasLtCreate(&s.handle) == CUBLAS_STATUS_SUCCESS, "gemm: cublasLtCreate failed");
    // Allocated once for the life of the thread; the pool would also serve it, but a
    // fixed buffer keeps the steady state free of allocator calls.
    AMBER_CHECK(cudaMalloc(&s.workspace, kWorkspaceBytes) == cudaSuccess,
                "gemm: cannot allocate the ", kWorkspaceBytes, "-byte cuBLASLt workspace");
  }
  return s;
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: fail("gemm: cuBLASLt takes f32, bf16 or f16, got ", dtype_name(t));
  }
}

int alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// Owns the descriptors of one call, so every error path releases them.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols; i += stride)
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[i % cols]));
}

// partial[blockIdx.y, c] = sum of dy[r, c] over the rows of block y, in row order.
template <class T>
__global__ void column_partials_kernel(const T* dy, float* partial, int64_t rows, int64_t cols,
                                       int64_t rows_per_block) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t first = blockIdx.y * rows_per_block;
  const int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  float s = 0.0f;
  for (int64_t r = first; r < last; ++r) s += to_f32(dy[r * cols + c]);
  partial[blockIdx.y * cols + c] = s;
}

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  const char* op = "gemm";
  require_contiguous(a, op);
  require_contiguous(b, op);
  require_contiguous(c, op);
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  AMBER_CHECK(a.dtype() == b.dtype(), op, ": on the GPU both operands need one dtype, got ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  AMBER_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::f32, op, ": output dtype ",
              dtype_name(c.dtype()), " with ", dtype_name(a.dtype()), " operands; use the operand dtype or f32");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: c = beta * c
    if (beta == 0.0)
      c.zero();
    else
      scale_into(c, c, beta);
    return;
  }
  const cudaDataType_t ab_type = lt_type(a.dtype()), c_type = lt_type(c.dtype());
  LtState& s = lt_state();
  auto check = [&](cublasStatus_t status, const char* what) {
    AMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, op, ": cuBLASLt ", what, " failed (status ",
                static_cast<int>(status), ") for op(a) ", m, "x", k, ", op(b) ", k, "x", n, ", ",
                dtype_name(a.dtype()), " -> ", dtype_name(c.dtype()));
  };
  Descriptors d;
  // Plain fp32 compute: CUBLAS_COMPUTE_32F never uses TF32, so f32 products stay f32.
  check(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLASLt's first operand is our b, its second our a (see the file comment).
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)), "TRANSB");
  check(cublasLtMatrixLayoutCreate(&d.a, ab_type, b.size(1), b.size(0), b.size(1)), "layout of b");
  check(cublasLtMatrixLayoutCreate(&d.b, ab_type, a.size(1), a.size(0), a.size(1)), "layout of a");
  check(cublasLtMatrixLayoutCreate(&d.c, c_type, n, m, n), "layout of c");

  const int align_a = alignment(a.raw()), align_b = alignment(b.raw()), align_c = alignment(c.raw());
  const AlgoKey key{static_cast<int>(a.dtype()), static_cast<int>(c.dtype()), ta, tb, m, n, k,
                    align_a, align_b, align_c};
  auto found = s.algos.find(key);
  if (found == s.algos.end()) {
    check(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    const uint64_t ws = kWorkspaceBytes;
    const uint32_t al_a = align_b, al_b = align_a, al_c = align_c;  // Lt's a is our b
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "workspace preference");
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                               sizeof(al_a)), "alignment preference");
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                               sizeof(al_b)), "alignment preference");
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                               sizeof(al_c)), "alignment preference");
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                               sizeof(al_c)), "alignment preference");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    check(cublasLtMatmulAlgoGetHeuristic(s.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &count),
          "heuristic");
    AMBER_CHECK(count > 0, op, ": cuBLASLt has no algorithm for op(a) ", m, "x", k, ", op(b) ", k, "x", n,
                ", ", dtype_name(a.dtype()), " -> ", dtype_name(c.dtype()),
                " (pointer alignments ", align_a, "/", align_b, "/", align_c, " bytes)");
    found = s.algos.emplace(key, result.algo).first;
  }
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  check(cublasLtMatmul(s.handle, d.op, &alpha_f, b.raw(), d.a, a.raw(), d.b, &beta_f, c.raw(), d.c,
                       c.raw(), d.c, &found->second, s.workspace, kWorkspaceBytes, cudaStreamPerThread),
        "matmul");
}

void add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "linear_forward bias";
  require_contiguous(y, op);
  require_contiguous(bias, op);
  AMBER_CHECK(bias.dtype() == y.dtype(), op, ": on the GPU the bias (", dtype_name(bias.dtype()),
              ") needs the output's dtype (", dtype_name(y.dtype()), ")");
  const int64_t rows = y.size(0), cols = y.size(1);
  if (rows * cols == 0) return;
  with_element_type(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(rows * cols, 256), 256, 0, cudaStreamPerThread>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(bias.raw()), rows, cols);
  });
  check_launch(op, y.shape());
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const char* op = "linear_backward bias";
  require_contiguous(dy, op);
  const int64_t rows = dy.size(0), cols = dy.size(1);
  if (rows == 0 || cols == 0) return;
  // A fixed split of the rows (shape-dependent only) keeps the sums deterministic.
  const int64_t row_blocks = rows < 64 ? rows : 64;
  const int64_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
  const int64_t used = (rows + rows_per_block - 1) / rows_per_block;
  Tensor partial = Tensor::empty({used, cols}, DType::f32, dy.device());
  with_element_type(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(used));
    column_partials_kernel<T><<<grid, 256, 0, cudaStreamPerThread>>>(
        static_cast<const T*>(dy.raw()), static_cast<float*>(partial.raw()), rows, cols, rows_per_block);
  });
  check_launch(op, dy.shape());
  add_column_sums(partial, dbias, op);
}

}  // namespace amber::cuda
