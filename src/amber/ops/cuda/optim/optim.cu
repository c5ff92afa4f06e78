// CUDA optimizer math: the AdamW update (fp32 master weights and state),
// deterministic reductions (every block owns a fixed chunk of elements, and the chunk
// sums are added in chunk order, so results never depend on scheduling) and the clip
// factor from a norm that stays in device memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/optim/optim.h"

namespace amber::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 8192;  // elements per reduction block

__global__ void advance_schedule_kernel(double* s, const double* gate, double beta1, double beta2) {
  s[kScheduleApply] = gate[kGateApply];
  s[kScheduleLrMultiplier] = gate[kGateLrMultiplier];
  s[kScheduleGradScale] = gate[kGateGradScale];
  if (gate[kGateApply] == 0.0) return;
  const double t = s[kScheduleSteps] + 1.0;
  s[kScheduleSteps] = t;
  s[kScheduleBias1] = 1.0 / (1.0 - pow(beta1, t));
  s[kScheduleBias2] = 1.0 / (1.0 - pow(beta2, t));
}

__global__ void finite_flag_kernel(const double* values, int64_t n, double* flag) {
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) finite = finite && isfinite(values[i]);
  *flag = finite ? 1.0 : 0.0;
}

// One element of the AdamW update: m and v move in place, the new value is returned.
struct AdamWElement {
  float b1, b2, eps, step, decay, c1, c2, grad_scale;
  __device__ __forceinline__ float operator()(float p, float raw_g, float& m, float& v) const {
    const float g = grad_scale * raw_g;
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    const float update = (m * c1) / (sqrtf(v * c2) + eps);
    return p - decay * p - step * update;
  }
};

// Up to kMax parameters of one working dtype for one launch, passed by value (a
// captured graph holds it). Parameter i owns the chunks first_chunk[i] ..
// first_chunk[i + 1] - 1 of kUpdateChunk elements each (Muon's tables likewise).
constexpr int64_t kUpdateChunk = 16384;  // a multiple of 4: chunks start on whole groups of four
struct AdamWTable {
  static constexpr int kMax = 32;
  struct Entry {
    float *p, *m, *v;
    const float* g;
    void* work;  // the working copy in the table's dtype, or null (the value is it)
    int64_t n;
    double lr, weight_decay;
    float b1, b2, eps;
    bool vector;  // every pointer allows groups of four
  };
  Entry e[kMax];
  int64_t first_chunk[kMax + 1];
  int count;
};

// Every update kernel reads the schedule first and leaves its tensors alone when the
// step does not apply; the lr factor arrives through the schedule, not the launch.
// AdamW: one block per chunk of any parameter in the table; four elements per thread
// and step where the parameter's pointers allow it, the rest one by one; `work`
// receives each new value rounded to W.
template <class W>
__global__ void __launch_bounds__(kThreads) adamw_kernel(const __grid_constant__ AdamWTable table,
                                                         const double* schedule) {
  if (schedule[kScheduleApply] == 0.0) return;
  const int64_t chunk = blockIdx.x;
  const int i = table_entry(table.first_chunk, table.count, chunk);
  const AdamWTable::Entry& t = table.e[i];
  const double lr_now = t.lr * schedule[kScheduleLrMultiplier];
  const AdamWElement adamw{t.b1,
                           t.b2,
                           t.eps,
                           static_cast<float>(lr_now),
                           static_cast<float>(lr_now * t.weight_decay),
                           static_cast<float>(schedule[kScheduleBias1]),
                           static_cast<float>(schedule[kScheduleBias2]),
                           static_cast<float>(schedule[kScheduleGradScale])};
  const int64_t begin = (chunk - table.first_chunk[i]) * kUpdateChunk;
  const int64_t end = begin + kUpdateChunk < t.n ? begin + kUpdateChunk : t.n;
  float *p = t.p, *m = t.m, *v = t.v;
  const float* g = t.g;
  W* work = static_cast<W*>(t.work);
  const int64_t quads_end = t.vector ? end / 4 : begin / 4;
  for (int64_t q = begin / 4 + threadIdx.x; q < quads_end; q += blockDim.x) {
    float4 pq = reinterpret_cast<const float4*>(p)[q], mq = reinterpret_cast<const float4*>(m)[q];
    float4 vq = reinterpret_cast<const float4*>(v)[q];
    const float4 gq = reinterpret_cast<const float4*>(g)[q];
    pq.x = adamw(pq.x, gq.x, mq.x, vq.x);
    pq.y = adamw(pq.y, gq.y, mq.y, vq.y);
    pq.z = adamw(pq.z, gq.z, mq.z, vq.z);
    pq.w = adamw(pq.w, gq.w, mq.w, vq.w);
    reinterpret_cast<float4*>(p)[q] = pq;
    reinterpret_cast<float4*>(m)[q] = mq;
    reinterpret_cast<float4*>(v)[q] = vq;
    if (work) store_f32<W, 4>(work + 4 * q, {pq.x, pq.y, pq.z, pq.w});
  }
  for (int64_t j = 4 * quads_end + threadIdx.x; j < end; j += blockDim.x) {
    p[j] = adamw(p[j], g[j], m[j], v[j]);
    if (work) work[j] = from_f32<W>(p[j]);
  }
}

// Up to kMax Muon matrices of one working dtype for one launch, passed by value.
// Matrix i owns the chunks first_chunk[i] .. first_chunk[i + 1] - 1 of kUpdateChunk
// elements each.
struct MuonTable {
  static constexpr int kMax = 32;
  struct Entry {
    float *value, *momentum, *update;
    const float* grad;
    void* work;  // the working copy in the table's dtype, or null (the value is it)
    int64_t n;
    double decay_rate, update_rate;
  };
  Entry e[kMax];
  int64_t first_chunk[kMax + 1];
  int count;
};

// Muon's momentum and look-ahead: one block per chunk of any matrix in the table.
__global__ void __launch_bounds__(kThreads) muon_momentum_kernel(const __grid_constant__ MuonTable table, float mu,
                                                                 bool nesterov, const double* schedule) {
  if (schedule[kScheduleApply] == 0.0) return;
  const int64_t chunk = blockIdx.x;
  const int i = table_entry(table.first_chunk, table.count, chunk);
  const MuonTable::Entry& t = table.e[i];
  const float scale = static_cast<float>(schedule[kScheduleGradScale]);
  const int64_t begin = (chunk - table.first_chunk[i]) * kUpdateChunk;
  const int64_t end = begin + kUpdateChunk < t.n ? begin + kUpdateChunk : t.n;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const float m = mu * t.momentum[j] + scale * t.grad[j];
    t.momentum[j] = m;
    t.update[j] = nesterov ? mu * m + scale * t.grad[j] : m;
  }
}

// Muon's update of the weights, `work` receiving each new value rounded to W.
template <class W>
__global__ void __launch_bounds__(kThreads) muon_apply_kernel(const __grid_constant__ MuonTable table,
                                                              const double* schedule) {
  if (schedule[kScheduleApply] == 0.0) return;
  const int64_t chunk = blockIdx.x;
  const int i = table_entry(table.first_chunk, table.count, chunk);
  const MuonTable::Entry& t = table.e[i];
  const float keep = static_cast<float>(1.0 - schedule[kScheduleLrMultiplier] * t.decay_rate);
  const float step = static_cast<float>(schedule[kScheduleLrMultiplier] * t.update_rate);
  const int64_t begin = (chunk - table.first_chunk[i]) * kUpdateChunk;
  const int64_t end = begin + kUpdateChunk < t.n ? begin + kUpdateChunk : t.n;
  W* work = static_cast<W*>(t.work);
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const float v = keep * t.value[j] - step * t.update[j];
    t.value[j] = v;
    if (work) work[j] = from_f32<W>(v);
  }
}

// Up to kMax tensors of one dtype for one pair of launches, passed by value (a
// captured graph holds it; no table in device memory). Tensor i owns the chunks
// first_chunk[i] .. first_chunk[i + 1] - 1 of kChunk elements each.
struct SquareSumTable {
  static constexpr int kMax = 48;
  const void* data[kMax];
  int64_t n[kMax];
  int64_t first_chunk[kMax + 1];
  int count;
};

// One block per chunk of any tensor in the table: the chunk's squares summed in fp32.
template <class T>
__global__ void chunk_square_sums(const __grid_constant__ SquareSumTable table, double* partial) {
  __shared__ float scratch[32];
  const int64_t chunk = blockIdx.x;
  const int i = table_entry(table.first_chunk, table.count, chunk);
  const T* x = static_cast<const T*>(table.data[i]);
  const int64_t begin = (chunk - table.first_chunk[i]) * kChunk;
  const int64_t end = begin + kChunk < table.n[i] ? begin + kChunk : table.n[i];
  float s = 0.0f;
  // 16 bytes a load where the chunk is whole and the tensor aligned (kChunk is a
  // multiple of every pack), element by element otherwise; which one depends on the
  // shape and the pointer only, so the bits repeat from run to run.
  constexpr int V = 16 / sizeof(T);
  if (end - begin == kChunk && aligned16(x)) {
    for (int64_t j = begin + threadIdx.x * V; j < end; j += blockDim.x * V) {
      float v[V];
      load_f32<T, V>(x + j, v);
#pragma unroll
      for (int e = 0; e < V; ++e) s += v[e] * v[e];
    }
  } else {
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const float value = to_f32(x[j]);
      s += value * value;
    }
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[chunk] = s;
}

// The sum of partial[0 .. count) by a block of kThreads, the fixed-order half of every
// reduction here: thread t adds partials t, t + kThreads, ... in index order, then the
// threads' sums meet in a fixed tree, so the bits never depend on scheduling (one
// thread alone was latency-bound on its loads). Valid in thread 0.
__device__ double ordered_sum(const double* partial, int64_t count) {
  __shared__ double sums[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += partial[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  return sums[0];
}

// One block per tensor of the table: out[i] = its chunks' sums in order.
__global__ void __launch_bounds__(kThreads) tensor_square_sums(const __grid_constant__ SquareSumTable table,
                                                               const double* partial, double* out) {
  const int i = blockIdx.x;
  const int64_t first = table.first_chunk[i];
  const double s = ordered_sum(partial + first, table.first_chunk[i + 1] - first);
  if (threadIdx.x == 0) out[i] = s;
}

// Up to kMax f64 tensors, each summed whole by one block.
struct SumTable {
  static constexpr int kMax = 48;
  const double* data[kMax];
  int64_t n[kMax];
};

__global__ void __launch_bounds__(kThreads) tensor_sums(const __grid_constant__ SumTable table, double* out) {
  const double s = ordered_sum(table.data[blockIdx.x], table.n[blockIdx.x]);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// *out = sqrt of the sum of the per-tensor squares in index order.
__global__ void __launch_bounds__(kThreads) root_of_sum(const double* squares, int64_t count, double* out) {
  const double s = ordered_sum(squares, count);
  if (threadIdx.x == 0) *out = sqrt(s);
}

// The host's formula, in double: the bits the CPU's clip_scale writes.
__global__ void clip_scale_kernel(double* scale, const double* norm, double max_norm) {
  const double total = *norm;
  if (total > max_norm) *scale = max_norm / total;  // not when within bounds, or NaN (a skipped step)
}

// The factor is formed in double from the f64 squared norm of the element's part (of
// `per` elements), as the host would.
template <class T>
__global__ void divide_by_norm_kernel(T* x, int64_t n, int64_t per, const double* squares, double floor,
                                      double margin) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float scale = static_cast<float>(1.0 / (fmax(sqrt(squares[i / per]), floor) * margin));
    x[i] = from_f32<T>(scale * to_f32(x[i]));
  }
}

template <class T>
__global__ void non_finite_kernel(const T* x, int64_t n, int* flag) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!isfinite(to_f32(x[i]))) *flag = 1;  // every writer stores the same value
}

}  // namespace

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2) {
  advance_schedule_kernel<<<1, 1, 0, current_stream()>>>(static_cast<double*>(schedule.raw()),
                                                           static_cast<const double*>(gate.raw()), beta1, beta2);
  check_launch("advance_schedule", schedule.shape());
}

void finite_flag(const Tensor& values, Tensor& flag) {
  finite_flag_kernel<<<1, 1, 0, current_stream()>>>(static_cast<const double*>(values.raw()), values.numel(),
                                                      static_cast<double*>(flag.raw()));
  check_launch("finite_flag", values.shape());
}

namespace {

// The parameter's separate working copy, or null when the value is it.
void* working_copy(const AdamWOperands& p) {
  return p.work->shares_storage_with(*p.value) ? nullptr : p.work->raw();
}

// The dtype the update writes its working copy in: the copy's, or f32 when the value is it.
DType work_type(const AdamWOperands& p) { return working_copy(p) ? p.work->dtype() : DType::f32; }

void launch_adamw(const AdamWTable& table, DType work, const Tensor& schedule, const char* op) {
  with_element_type(work, op, [&](auto tag) {
    using W = decltype(tag);
    adamw_kernel<W><<<static_cast<unsigned>(table.first_chunk[table.count]), kThreads, 0, current_stream()>>>(
        table, static_cast<const double*>(schedule.raw()));
  });
  check_launch(op, {table.count});
}

}  // namespace

void adamw_steps(std::span<const AdamWOperands> params, const Tensor& schedule) {
  const char* op = "adamw_step";
  for (const AdamWOperands& p : params)
    for (const Tensor* t : {static_cast<const Tensor*>(p.value), p.grad, static_cast<const Tensor*>(p.m),
                            static_cast<const Tensor*>(p.v)})
      AMBER_CHECK(t->dtype() == DType::f32, op, ": GPU AdamW keeps fp32 weights, gradients and state; got ",
                  dtype_name(t->dtype()));
  for (const AdamWOperands& p : params) {
    const DType work = work_type(p);
    AMBER_CHECK(work == DType::f32 || work == DType::bf16 || work == DType::f16, op,
                ": the working copy must be f32, bf16 or f16, got ", dtype_name(work));
  }
  // Parameters of one working dtype, in order, fill tables of up to kMax.
  for (const DType work : {DType::f32, DType::bf16, DType::f16}) {
    AdamWTable table{};
    const auto flush = [&] {
      if (table.count > 0) launch_adamw(table, work, schedule, op);
      table = AdamWTable{};
    };
    for (const AdamWOperands& p : params) {
      if (work_type(p) != work || p.value->numel() == 0) continue;
      void* out = working_copy(p);
      const int64_t n = p.value->numel();
      const size_t bytes = dtype_size(work);
      table.e[table.count] = {static_cast<float*>(p.value->raw()),
                              static_cast<float*>(p.m->raw()),
                              static_cast<float*>(p.v->raw()),
                              static_cast<const float*>(p.grad->raw()),
                              out,
                              n,
                              p.hyper.lr,
                              p.hyper.weight_decay,
                              static_cast<float>(p.hyper.beta1),
                              static_cast<float>(p.hyper.beta2),
                              static_cast<float>(p.hyper.eps),
                              aligned16(p.value->raw()) && aligned16(p.grad->raw()) && aligned16(p.m->raw()) &&
                                  aligned16(p.v->raw()) && (!out || reinterpret_cast<uintptr_t>(out) % (4 * bytes) == 0)};
      table.first_chunk[table.count + 1] = table.first_chunk[table.count] + (n + kUpdateChunk - 1) / kUpdateChunk;
      if (++table.count == AdamWTable::kMax) flush();
    }
    flush();
  }
}

namespace {

// Calls launch(table, work dtype) for the entries of each working dtype, in order, in
// tables of up to kMax.
template <class Launch>
void for_muon_tables(std::span<const MuonOperands> params, const char* op, Launch&& launch) {
  for (const MuonOperands& p : params)
    for (const Tensor* t : {static_cast<const Tensor*>(p.value), p.grad, static_cast<const Tensor*>(p.momentum),
                            static_cast<const Tensor*>(p.update)})
      AMBER_CHECK(t->dtype() == DType::f32, op, ": GPU Muon keeps fp32 weights, gradients and state; got ",
                  dtype_name(t->dtype()));
  const auto work_of = [](const MuonOperands& p) {
    return p.work->shares_storage_with(*p.value) ? DType::f32 : p.work->dtype();
  };
  for (const DType work : {DType::f32, DType::bf16, DType::f16}) {
    MuonTable table{};
    const auto flush = [&] {
      if (table.count > 0) launch(table, work);
      table = MuonTable{};
    };
    for (const MuonOperands& p : params) {
      if (work_of(p) != work || p.value->numel() == 0) continue;
      const int64_t n = p.value->numel();
      table.e[table.count] = {static_cast<float*>(p.value->raw()),
                              static_cast<float*>(p.momentum->raw()),
                              static_cast<float*>(p.update->raw()),
                              static_cast<const float*>(p.grad->raw()),
                              p.work->shares_storage_with(*p.value) ? nullptr : p.work->raw(),
                              n,
                              p.decay_rate,
                              p.update_rate};
      table.first_chunk[table.count + 1] = table.first_chunk[table.count] + (n + kUpdateChunk - 1) / kUpdateChunk;
      if (++table.count == MuonTable::kMax) flush();
    }
    flush();
  }
}

}  // namespace

void muon_momentum_steps(std::span<const MuonOperands> params, double mu, bool nesterov, const Tensor& schedule) {
  const char* op = "muon_momentum_steps";
  for_muon_tables(params, op, [&](const MuonTable& table, DType) {
    muon_momentum_kernel<<<static_cast<unsigned>(table.first_chunk[table.count]), kThreads, 0, current_stream()>>>(
        table, static_cast<float>(mu), nesterov, static_cast<const double*>(schedule.raw()));
    check_launch(op, {table.count});
  });
}

void muon_apply_steps(std::span<const MuonOperands> params, const Tensor& schedule) {
  const char* op = "muon_apply_steps";
  for_muon_tables(params, op, [&](const MuonTable& table, DType work) {
    with_element_type(work, op, [&](auto tag) {
      muon_apply_kernel<decltype(tag)>
          <<<static_cast<unsigned>(table.first_chunk[table.count]), kThreads, 0, current_stream()>>>(
              table, static_cast<const double*>(schedule.raw()));
    });
    check_launch(op, {table.count});
  });
}

void squared_norms_into(std::span<const Tensor> tensors, Tensor& squares) {
  const char* op = "squared_norms_into";
  double* out = static_cast<double*>(squares.raw());
  // Runs of up to kMax tensors of one dtype: two launches each, whatever their sizes.
  for (size_t next = 0; next < tensors.size();) {
    const size_t first = next;
    const DType dtype = tensors[first].dtype();
    SquareSumTable table{};
    for (; next < tensors.size() && table.count < SquareSumTable::kMax && tensors[next].dtype() == dtype; ++next) {
      const int i = table.count++;
      table.data[i] = tensors[next].raw();
      table.n[i] = tensors[next].numel();
      table.first_chunk[i + 1] = table.first_chunk[i] + (table.n[i] + kChunk - 1) / kChunk;
    }
    const int64_t chunks = table.first_chunk[table.count];
    AMBER_CHECK(chunks < (int64_t{1} << 31), op, ": ", chunks, " chunks of ", kChunk,
                " elements exceed the launch grid");
    // Chunk partials come from the stream-ordered pool: no host synchronisation.
    Tensor partial = Tensor::empty({std::max<int64_t>(chunks, 1)}, DType::f64, squares.device());
    if (chunks > 0) {
      with_element_type(dtype, op, [&](auto tag) {
        chunk_square_sums<decltype(tag)><<<static_cast<unsigned>(chunks), kThreads, 0, current_stream()>>>(
            table, static_cast<double*>(partial.raw()));
      });
      check_launch(op, tensors[first].shape());
    }
    tensor_square_sums<<<static_cast<unsigned>(table.count), kThreads, 0, current_stream()>>>(
        table, static_cast<const double*>(partial.raw()), out + first);
    check_launch(op, squares.shape());
  }
}

void sums_into(std::span<const Tensor> tensors, Tensor& sums) {
  double* out = static_cast<double*>(sums.raw());
  for (size_t first = 0; first < tensors.size(); first += SumTable::kMax) {
    SumTable table{};
    const size_t count = std::min<size_t>(SumTable::kMax, tensors.size() - first);
    for (size_t i = 0; i < count; ++i) {
      table.data[i] = static_cast<const double*>(tensors[first + i].raw());
      table.n[i] = tensors[first + i].numel();
    }
    tensor_sums<<<static_cast<unsigned>(count), kThreads, 0, current_stream()>>>(table, out + first);
    check_launch("sums_into", sums.shape());
  }
}

void norm_from_squares(const Tensor& squares, Tensor& out) {
  root_of_sum<<<1, kThreads, 0, current_stream()>>>(static_cast<const double*>(squares.raw()), squares.numel(),
                                                       static_cast<double*>(out.raw()));
  check_launch("norm_from_squares", squares.shape());
}

void clip_scale(Tensor& scale, const Tensor& norm, double max_norm) {
  clip_scale_kernel<<<1, 1, 0, current_stream()>>>(static_cast<double*>(scale.raw()),
                                                      static_cast<const double*>(norm.raw()), max_norm);
  check_launch("clip_scale", scale.shape());
}

void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin) {
  const char* op = "divide_by_norm_";
  const int64_t n = t.numel();
  if (n == 0) return;
  with_element_type(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    divide_by_norm_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(t.raw()), n, n / squares.numel(), static_cast<const double*>(squares.raw()), floor,
        margin);
  });
  check_launch(op, t.shape());
}

bool all_finite(const Tensor& t) {
  const char* op = "all_finite";
  const int64_t n = t.numel();
  if (n == 0) return true;
  Tensor flag = Tensor::zeros({1}, DType::i32, t.device());
  with_element_type(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    non_finite_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(t.raw()), n, static_cast<int*>(flag.raw()));
  });
  check_launch(op, t.shape());
  return flag.to(Device::cpu()).item(0) == 0;
}

}  // namespace amber::cuda
