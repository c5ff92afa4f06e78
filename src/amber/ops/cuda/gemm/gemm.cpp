// CUDA dense products through cuBLASLt. Row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, so the tensors are handed over as they lie, with
// no copies.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "amber/core/error.h"
#include "amber/core/stream.h"
#include "amber/ops/cuda/elementwise/elementwise.h"
#include "amber/ops/cuda/gemm/gemm.h"
#include "amber/ops/cuda/gemm/lt_handle.h"

namespace amber::cuda {
namespace {

// Everything a heuristic answer depends on: types, transposes, sizes, c's row pitch
// (a and b are contiguous), the pointers' alignments and the batch size.
using AlgoKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int, int, int, int64_t>;

// The thread's cuBLASLt handle and workspace (lt_handle.h) and its heuristic cache on
// the device.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  int policy = 0;  // the tuning policy the cached choices were made under
};

// Bumped whenever set_gemm_tuning changes the policy: every thread's cached
// choices are dropped at its next product.
std::atomic<int> tuning_policy{0};

LtState& lt_state() {
  thread_local std::map<int, LtState> states;
  int device = 0;
  cudaGetDevice(&device);
  LtState& s = states[device];
  if (s.policy != tuning_policy.load()) {
    s.algos.clear();
    s.policy = tuning_policy.load();
  }
  if (!s.handle) {
    const LtHandle& h = lt_handle();
    s.handle = h.handle;
    s.workspace = h.workspace;
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

// The largest power of two up to 256 that divides the address and, for a batch, the
// bytes between its matrices: the alignment every matrix of the operand has.
int alignment(const void* p, int64_t batch_stride_bytes = 0) {
  const auto bits = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(batch_stride_bytes);
  int a = 256;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

// How far apart c's rows lie: a column slice of a wider tensor keeps its parent's pitch.
// A batch's c is contiguous; a single product's c may be a column slice.
int64_t row_pitch(const Tensor& c) {
  if (c.ndim() == 3) return c.size(2);
  return c.size(0) > 1 ? c.stride(0) : c.size(1);
}

// Sets a layout to `batch` matrices `stride` elements apart.
cublasStatus_t set_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  const int32_t count = static_cast<int32_t>(batch);
  const cublasStatus_t status =
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  return cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                          sizeof(stride));
}

// One product c = alpha op(a) op(b) + beta addend (addend: c itself, or a tensor shaped
// like it, cuBLASLt's C beside its D) in cuBLASLt's terms: its descriptors and the key
// of its heuristic answers.
struct Product {
  const Tensor* a;
  const Tensor* b;
  Tensor* c;
  const Tensor* addend;
  bool ta, tb;
  int64_t m, n, k;
  int64_t batch;  // products, each matrix of a 3-D tensor's leading index
  LtDescriptors d;
  AlgoKey key;

  void check(cublasStatus_t status, const char* what) const {
    AMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, "gemm: cuBLASLt ", what, " failed (status ",
                static_cast<int>(status), ") for ", batch, " x op(a) ", m, "x", k, ", op(b) ", k, "x", n, ", ",
                dtype_name(a->dtype()), " -> ", dtype_name(c->dtype()));
  }

  Product(const Tensor& a_, bool ta_, const Tensor& b_, bool tb_, Tensor& c_, const Tensor& addend_ = Tensor())
      : a(&a_), b(&b_), c(&c_), addend(addend_.defined() ? &addend_ : &c_), ta(ta_), tb(tb_),
        m(ta ? a_.size(-1) : a_.size(-2)), n(tb ? b_.size(-2) : b_.size(-1)), k(ta ? a_.size(-2) : a_.size(-1)),
        batch(a_.ndim() == 3 ? a_.size(0) : 1) {
    const cudaDataType_t ab_type = lt_type(a_.dtype()), c_type = lt_type(c_.dtype());
    // Plain fp32 compute: CUBLAS_COMPUTE_32F never uses TF32, so f32 products stay f32.
    check(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    // cuBLASLt's first operand is our b, its second our a (see the file comment).
    check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)), "TRANSA");
    check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)), "TRANSB");
    check(cublasLtMatrixLayoutCreate(&d.a, ab_type, b_.size(-1), b_.size(-2), b_.size(-1)), "layout of b");
    check(cublasLtMatrixLayoutCreate(&d.b, ab_type, a_.size(-1), a_.size(-2), a_.size(-1)), "layout of a");
    check(cublasLtMatrixLayoutCreate(&d.c, c_type, n, m, row_pitch(c_)), "layout of c");
    if (batch > 1) {
      check(set_batch(d.a, batch, b_.size(-1) * b_.size(-2)), "batch of b");
      check(set_batch(d.b, batch, a_.size(-1) * a_.size(-2)), "batch of a");
      check(set_batch(d.c, batch, m * n), "batch of c");
    }
    const auto stride_bytes = [&](const Tensor& t) {
      return batch > 1 ? t.size(-1) * t.size(-2) * static_cast<int64_t>(dtype_size(t.dtype())) : 0;
    };
    key = AlgoKey{static_cast<int>(a_.dtype()),
                  static_cast<int>(c_.dtype()),
                  ta,
                  tb,
                  m,
                  n,
                  k,
                  row_pitch(c_),
                  alignment(a_.raw(), stride_bytes(a_)),
                  alignment(b_.raw(), stride_bytes(b_)),
                  std::min(alignment(c_.raw(), stride_bytes(c_)), alignment(addend->raw(), stride_bytes(*addend))),
                  batch};
  }

  // cuBLASLt's first `count` heuristic answers, best first.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristics(LtState& s, int count) {
    check(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    const uint64_t ws = kLtWorkspaceBytes;
    const uint32_t al_a = std::get<9>(key), al_b = std::get<8>(key), al_c = std::get<10>(key);  // Lt's a is our b
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
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(s.handle, d.op, d.a, d.b, d.c, d.c, d.pref, count, results.data(), &found),
          "heuristic");
    AMBER_CHECK(found > 0, "gemm: cuBLASLt has no algorithm for op(a) ", m, "x", k, ", op(b) ", k, "x", n, ", ",
                dtype_name(a->dtype()), " -> ", dtype_name(c->dtype()), " (pointer alignments ", std::get<8>(key),
                "/", std::get<9>(key), "/", std::get<10>(key), " bytes)");
    results.resize(static_cast<size_t>(found));
    return results;
  }

  cublasStatus_t run(LtState& s, const cublasLtMatmulAlgo_t& algo, double alpha, double beta) const {
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    return cublasLtMatmul(s.handle, d.op, &alpha_f, b->raw(), d.a, a->raw(), d.b, &beta_f, addend->raw(), d.c,
                          c->raw(), d.c, &algo, s.workspace, kLtWorkspaceBytes, current_stream());
  }
};

// The checks every product gets; false when there is nothing to multiply (k = 0 is
// handled here: c = beta c).
bool prepare(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double beta,
             const Tensor& addend = Tensor()) {
  const char* op = "gemm";
  require_contiguous(a, op);
  require_contiguous(b, op);
  if (addend.defined() || c.ndim() == 3) {
    require_contiguous(c, op);
    if (addend.defined()) require_contiguous(addend, op);
  } else {
    AMBER_CHECK((c.size(1) < 2 || c.stride(1) == 1) && row_pitch(c) >= c.size(1), op, ": c ", c.shape(),
                " must be rows of contiguous elements (a column slice of a wider tensor at most)");
  }
  AMBER_CHECK(a.dtype() == b.dtype(), op, ": on the GPU both operands need one dtype, got ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  AMBER_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::f32, op, ": output dtype ",
              dtype_name(c.dtype()), " with ", dtype_name(a.dtype()), " operands; use the operand dtype or f32");
  const int64_t m = ta ? a.size(-1) : a.size(-2), k = ta ? a.size(-2) : a.size(-1), n = tb ? b.size(-2) : b.size(-1);
  if (m == 0 || n == 0 || c.numel() == 0) return false;
  if (k > 0) return true;
  AMBER_CHECK(c.is_contiguous(), op, ": an empty sum into a column slice is not supported; pass a contiguous c");
  if (beta == 0.0)  // an empty sum: c = beta * addend
    c.zero();
  else
    scale_into(c, addend.defined() ? addend : c, beta);
  return false;
}

// Milliseconds of each candidate on product p (its c overwritten): the best of
// `repeats` samples after a warm-up call, each sample the mean of kCallsPerSample calls
// back to back (as a step runs them, and longer than the events' own jitter); -1 for a
// candidate that does not run.
constexpr int kCallsPerSample = 4;
std::vector<double> time_candidates(LtState& s, const Product& p,
                                    const std::vector<cublasLtMatmulHeuristicResult_t>& candidates, double beta,
                                    int repeats) {
  std::vector<double> ms;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (const cublasLtMatmulHeuristicResult_t& h : candidates) {
    double best = -1.0;
    if (p.run(s, h.algo, 1.0, beta) == CUBLAS_STATUS_SUCCESS) {
      for (int r = 0; r < repeats; ++r) {
        cudaEventRecord(start, current_stream());
        for (int call = 0; call < kCallsPerSample; ++call) p.check(p.run(s, h.algo, 1.0, beta), "matmul");
        cudaEventRecord(stop, current_stream());
        cudaEventSynchronize(stop);
        float total = 0;
        cudaEventElapsedTime(&total, start, stop);
        const double t = total / kCallsPerSample;
        best = best < 0 ? t : std::min(best, t);
      }
    }
    ms.push_back(best);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const cudaError_t error = cudaGetLastError();
  AMBER_CHECK(error == cudaSuccess, "gemm: timing cuBLASLt's algorithms failed: ", cudaGetErrorString(error));
  return ms;
}

// What a tuning file's first line must say: cuBLASLt's version and the card, since
// an algorithm is only valid (and only fast) where it was measured.
std::string tuning_header() {
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::string name = prop.name;
  std::replace(name.begin(), name.end(), ' ', '_');
  return "amber-gemm-algorithms-3 cublasLt=" + std::to_string(cublasLtGetVersion()) + " device=" + name;
}

// The measured choices of set_gemm_tuning: read once from the file, appended to as
// new products are tuned (or kept in memory only). One table for the process (host
// threads share it).
struct Tuning {
  std::mutex mutex;
  bool measured = false;
  std::string path;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> table;

  // On a bad file the error leaves tuning off.
  void open(bool measure, const std::string& file) {
    table.clear();
    measured = false;
    path.clear();
    if (!measure) return;
    if (!file.empty()) read_or_create(file);
    measured = true;
    path = file;
  }

  // The choices a file holds, or a new file with its header (the products are appended
  // as they are tuned).
  void read_or_create(const std::string& file) {
    std::ifstream in(file);
    if (!in) {
      std::ofstream out(file);
      out << tuning_header() << "\n";
      AMBER_CHECK(out.good(), "gemm tuning: cannot create ", file, "; check that its folder exists and is writable");
      return;
    }
    std::string header;
    std::getline(in, header);
    AMBER_CHECK(header == tuning_header(), "gemm tuning: ", file, " was measured as '", header,
                "' but this process is '", tuning_header(), "'; its algorithms may not run here: remove the file "
                "or name a new one");
    std::map<AlgoKey, cublasLtMatmulAlgo_t> read;
    std::string line;
    for (int number = 2; std::getline(in, line); ++number) {
      std::istringstream fields(line);
      int ab = 0, c = 0, ta = 0, tb = 0, al_a = 0, al_b = 0, al_c = 0;
      int64_t m = 0, n = 0, k = 0, ldc = 0, batch = 0;
      cublasLtMatmulAlgo_t algo{};
      fields >> ab >> c >> ta >> tb >> m >> n >> k >> ldc >> al_a >> al_b >> al_c >> batch >> std::hex;
      for (uint64_t& word : algo.data) fields >> word;
      AMBER_CHECK(!fields.fail(), "gemm tuning: ", file, " line ", number, " is not a product and its algorithm (",
                  line, "); remove the file to measure afresh");
      read[AlgoKey{ab, c, ta != 0, tb != 0, m, n, k, ldc, al_a, al_b, al_c, batch}] = algo;
    }
    table = std::move(read);
  }

  void record(const AlgoKey& key, const cublasLtMatmulAlgo_t& algo) {
    table[key] = algo;
    if (path.empty()) return;
    std::ofstream out(path, std::ios::app);
    const auto& [ab, c, ta, tb, m, n, k, ldc, al_a, al_b, al_c, batch] = key;
    out << ab << " " << c << " " << ta << " " << tb << " " << m << " " << n << " " << k << " " << ldc << " " << al_a
        << " " << al_b << " " << al_c << " " << batch << std::hex;
    for (uint64_t word : algo.data) out << " " << word;
    out << "\n";
    AMBER_CHECK(out.good(), "gemm tuning: cannot append to ", path);
  }
};

Tuning& tuning() {
  static Tuning t;
  return t;
}

constexpr int kTuningCandidates = 16, kTuningRepeats = 3;

// The algorithm for p, and whether it may be cached for the thread: the heuristic's
// first answer, or with tuning on the file's choice or the fastest of the first
// kTuningCandidates timed now on a scratch output (never while a graph is being
// captured: then the heuristic's answer serves this call only).
std::pair<cublasLtMatmulAlgo_t, bool> choose(LtState& s, Product& p, double beta) {
  Tuning& t = tuning();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.measured) return {p.heuristics(s, 1)[0].algo, true};
  if (const auto found = t.table.find(p.key); found != t.table.end()) return {found->second, true};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(current_stream(), &capture);
  if (capture != cudaStreamCaptureStatusNone) return {p.heuristics(s, 1)[0].algo, false};
  const std::vector<cublasLtMatmulHeuristicResult_t> candidates = p.heuristics(s, kTuningCandidates);
  // Rows as far apart as c's, so the candidates are timed on c's layout.
  Tensor scratch = p.batch > 1 ? Tensor::empty({p.batch, p.m, p.n}, p.c->dtype(), p.c->device())
                               : Tensor::empty({p.m, row_pitch(*p.c)}, p.c->dtype(), p.c->device()).slice(1, 0, p.n);
  const Product on_scratch(*p.a, p.ta, *p.b, p.tb, scratch);
  const std::vector<double> ms = time_candidates(s, on_scratch, candidates, beta, kTuningRepeats);
  size_t best = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] > 0 && (ms[best] < 0 || ms[i] < ms[best])) best = i;
  AMBER_CHECK(ms[best] > 0, "gemm: none of cuBLASLt's algorithms ran for ", p.batch, " x op(a) ", p.m, "x", p.k,
              ", op(b) ", p.k, "x", p.n);
  t.record(p.key, candidates[best].algo);
  return {candidates[best].algo, true};
}

}  // namespace

void set_gemm_tuning(bool measured, const std::string& file) {
  Tuning& t = tuning();
  std::lock_guard<std::mutex> lock(t.mutex);
  ++tuning_policy;
  t.open(measured, file);
}

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
          const Tensor& addend) {
  if (!prepare(a, ta, b, tb, c, beta, addend)) return;
  if (few_rows_gemm(a, ta, b, tb, c, alpha, beta, addend, row_pitch(c))) return;
  LtState& s = lt_state();
  Product p(a, ta, b, tb, c, addend);
  auto found = s.algos.find(p.key);
  if (found == s.algos.end()) {
    const auto [algo, cacheable] = choose(s, p, beta);
    if (!cacheable) return p.check(p.run(s, algo, alpha, beta), "matmul");
    found = s.algos.emplace(p.key, algo).first;
  }
  p.check(p.run(s, found->second, alpha, beta), "matmul");
}

std::vector<double> time_gemm_algorithms(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c,
                                         double beta, int count, int repeats) {
  if (!prepare(a, ta, b, tb, c, beta)) return {};
  LtState& s = lt_state();
  Product p(a, ta, b, tb, c);
  return time_candidates(s, p, p.heuristics(s, count), beta, repeats);
}

}  // namespace amber::cuda
