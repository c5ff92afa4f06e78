// CUDA RMSNorm and LayerNorm: one row per team of threads (a block, or 8-32 lanes of a
// warp for short rows such as QK-norm) with fp32 statistics, the row held in registers; the backward runs a fixed grid whose blocks own fixed row ranges and keep
// per-column partial weight gradients in registers, summed afterwards in block order,
// so dweight and dbias are bit-identical from run to run (no float atomics).
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/async_copy.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/common/row_pitch.cuh"
#include "amber/ops/cuda/norm/norm.h"

namespace amber::cuda {
namespace {

// Loads V weights, or ones when there is no affine weight.
template <class T, int V>
__device__ __forceinline__ void load_weight(const T* w, int64_t j, float (&out)[V]) {
  if (w) {
    load_f32<T, V>(w + j, out);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = 1.0f;
  }
}

// A team of threads owns one row at a time. L > 0: teams of L lanes inside a warp, so
// a block works on blockDim.x / L rows at once and reductions are shuffles (small rows,
// such as QK-norm over one head); L == 0: the whole block is one team.
template <int L>
struct Team {
  static_assert(L == 0 || L == 8 || L == 16 || L == 32, "a team is a block or divides a warp");
  static constexpr int kLanes = L > 0 ? L : 1;  // a divisor that is never zero
  __device__ __forceinline__ int lane() const { return L ? threadIdx.x % kLanes : threadIdx.x; }
  __device__ __forceinline__ int size() const { return L ? L : blockDim.x; }
  __device__ __forceinline__ int index() const { return L ? threadIdx.x / kLanes : 0; }
  __device__ __forceinline__ int count() const { return L ? blockDim.x / kLanes : 1; }
  __device__ __forceinline__ float sum(float v, float* scratch) const {
    if constexpr (L > 0) {
      for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      return v;
    } else {
      return block_sum(v, scratch);
    }
  }
};

// A lane owns packs lane + k * size (k < P) of V columns; packs past the row's end
// are invalid and never touched.
template <int L>
__device__ __forceinline__ bool pack_valid(const Team<L>& team, int k, int64_t groups) {
  return team.lane() + static_cast<int64_t>(k) * team.size() < groups;
}
template <int L>
__device__ __forceinline__ int64_t pack_column(const Team<L>& team, int k, int V) {
  return (team.lane() + static_cast<int64_t>(k) * team.size()) * V;
}

template <class T, int V, int P, int L>
__device__ __forceinline__ void load_row(const Team<L>& team, const T* row, int64_t groups,
                                         float (&out)[P][V]) {
#pragma unroll
  for (int k = 0; k < P; ++k) {
    if (row && pack_valid(team, k, groups)) {
      load_f32<T, V>(row + pack_column(team, k, V), out[k]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) out[k][e] = 0.0f;
    }
  }
}

// The backward's rows of x, dy and (when adding into it) the prior dx for block-wide
// teams with one 16-byte pack per thread: each thread copies its packs kStages - 1 rows
// ahead by cp.async into its own slots of shared memory and reads back only those (so no
// block barrier), keeping several rows per block in flight without holding them in
// registers.
template <class T, int V>
struct StagedRows {
  static constexpr int kStages = 3, kTensors = 3;
  static constexpr size_t bytes(int threads) { return static_cast<size_t>(kStages) * kTensors * threads * 16; }
  uint8_t* slots;  // [kStages][x, dy, prior dx][threads] packs of 16 bytes
  __device__ uint8_t* slot(int64_t step, int tensor) const {
    return slots + ((step % kStages) * kTensors + tensor) * blockDim.x * 16 + threadIdx.x * 16;
  }
  // Commits one group per call, empty for rows past `last`, so waits count uniformly.
  // prior: the dx the row's gradient is added to, or null.
  __device__ void issue(int64_t step, int64_t row, int64_t last, const T* x, RowPitch xp, const T* dy,
                        const T* prior, RowPitch pp, int64_t d, int64_t groups) const {
    const bool valid = row < last && threadIdx.x < groups;
    const int64_t column = threadIdx.x * V;
    cp_async_16(slot(step, 0), x + (valid ? xp.at(row, d) + column : 0), valid);
    cp_async_16(slot(step, 1), dy + (valid ? row * d + column : 0), valid);
    if (prior) cp_async_16(slot(step, 2), prior + (valid ? pp.at(row, d) + column : 0), valid);
    cp_async_commit();
  }
  __device__ void read(int64_t step, float (&a)[1][V], float (&g)[1][V]) const {
    load_f32<T, V>(reinterpret_cast<const T*>(slot(step, 0)), a[0]);
    load_f32<T, V>(reinterpret_cast<const T*>(slot(step, 1)), g[0]);
  }
  __device__ void read_prior(int64_t step, float (&p)[1][V]) const {
    load_f32<T, V>(reinterpret_cast<const T*>(slot(step, 2)), p[0]);
  }
};

// One row per team, held in registers between the statistics and the output.
// mean == nullptr: RMSNorm (no centring). bias may be null.
// With residual r: the row is sum = x + scale * r, rounded to T, stored, and normalised.
template <class T>
struct Residual {
  const T* r;  // null: a plain norm
  float scale;
  T* sum;
};

template <class T, int V, int P, int L>
__global__ void norm_forward_kernel(const T* x, RowPitch xp, Residual<T> res, const T* w, const T* bias, float eps,
                                    T* y, float* mean, float* rstd, int64_t rows, int64_t d) {
  __shared__ float scratch[32];
  const Team<L> team{};
  const int64_t row = static_cast<int64_t>(blockIdx.x) * team.count() + team.index();
  const int64_t groups = d / V;
  const bool live = row < rows;  // dead teams still take part in the shuffles
  float a[P][V];
  load_row<T, V, P, L>(team, live ? x + xp.at(row, d) : nullptr, groups, a);
  if (res.r) {
    float r[P][V];
    load_row<T, V, P, L>(team, live ? res.r + row * d : nullptr, groups, r);
#pragma unroll
    for (int k = 0; k < P; ++k) {
#pragma unroll
      for (int e = 0; e < V; ++e) a[k][e] = to_f32(from_f32<T>(a[k][e] + res.scale * r[k][e]));
      if (live && pack_valid(team, k, groups)) store_f32<T, V>(res.sum + row * d + pack_column(team, k, V), a[k]);
    }
  }
  float mu = 0.0f;
  if (mean) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < P; ++k)
#pragma unroll
      for (int e = 0; e < V; ++e) s += a[k][e];
    mu = team.sum(s, scratch) / static_cast<float>(d);
  }
  float ss = 0.0f;  // two-pass variance for LayerNorm: no cancellation at large means
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (pack_valid(team, k, groups))
#pragma unroll
      for (int e = 0; e < V; ++e) ss += (a[k][e] - mu) * (a[k][e] - mu);
  ss = team.sum(ss, scratch);
  if (!live) return;
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if (team.lane() == 0) {
    rstd[row] = inv;
    if (mean) mean[row] = mu;
  }
#pragma unroll
  for (int k = 0; k < P; ++k) {
    if (!pack_valid(team, k, groups)) continue;
    const int64_t c = pack_column(team, k, V);
    float g[V], b[V];
    load_weight<T, V>(w, c, g);
    if (bias) {
      load_f32<T, V>(bias + c, b);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) b[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) a[k][e] = (a[k][e] - mu) * inv * g[e] + b[e];
    store_f32<T, V>(y + row * d + c, a[k]);
  }
}

// Block b owns rows [b * rows_per_block, ...); its teams take every count()-th row, the
// next row's x and dy loaded while the current one is reduced. dx overwritten. When
// dw_partial is set, block b writes sum over its rows of dy * xhat into dw_partial[b, :]
// (and of dy into db_partial[b, :] when set): each lane accumulates its own columns in
// registers, then the teams are added in team order through shared memory, so the
// bits never depend on scheduling. mean == nullptr: RMSNorm.
// kDb: the bias gradient is wanted (LayerNorm with a bias); without it its
// accumulators take no registers. With one pack per thread and no bias the kernel is
// held to 64 registers (two 512-thread blocks' worth), so four 256-thread blocks fit
// on an SM where 70 registers let only three (ncu: occupancy 37.5%, register-limited).
// kStaged: the rows arrive through StagedRows (block-wide teams with one 16-byte pack
// per thread only); otherwise the next row loads into registers while the current one
// is reduced.
template <class T, int V, int P, int L>
constexpr bool kStageable = L == 0 && P == 1 && V * sizeof(T) == 16;

template <class T, int V, int P, int L, bool kDb, bool kStaged>
__global__ void __launch_bounds__(512, P == 1 && !kDb ? 2 : 1) norm_backward_kernel(const T* dy, const T* x, RowPitch xp, const T* w, const float* mean,
                                     const float* rstd, T* dx, RowPitch dxp, bool accumulate, float* dw_partial,
                                     float* db_partial, int64_t rows, int64_t rows_per_block, int64_t d) {
  static_assert(!kStaged || kStageable<T, V, P, L>, "staged rows are one 16-byte pack per thread of a block");
  // Dynamic shared memory: [teams][d] floats for dw, then for db (L > 0), or the
  // staged rows.
  extern __shared__ float team_acc[];
  __shared__ float scratch[32];
  const Team<L> team{};
  const int64_t groups = d / V;
  float ww[P][V], acc_w[P][V] = {}, acc_b[P][V] = {};
#pragma unroll
  for (int k = 0; k < P; ++k) {
    if (pack_valid(team, k, groups)) {
      load_weight<T, V>(w, pack_column(team, k, V), ww[k]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) ww[k][e] = 0.0f;
    }
  }
  const int64_t first = blockIdx.x * rows_per_block;
  const int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  const int64_t steps = (last - first + team.count() - 1) / team.count();  // same for every team
  const float inv_d = 1.0f / static_cast<float>(d);
  const auto row_at = [&](int64_t step) { return first + step * team.count() + team.index(); };
  float a[P][V], g[P][V];
  const StagedRows<T, V> staged{reinterpret_cast<uint8_t*>(team_acc)};
  const T* prior_rows = accumulate ? dx : nullptr;
  if constexpr (kStaged) {
    for (int64_t s = 0; s < StagedRows<T, V>::kStages - 1; ++s)
      staged.issue(s, row_at(s), last, x, xp, dy, prior_rows, dxp, d, groups);
  } else {
    const int64_t r = row_at(0);
    load_row<T, V, P, L>(team, r < last ? x + xp.at(r, d) : nullptr, groups, a);
    load_row<T, V, P, L>(team, r < last ? dy + r * d : nullptr, groups, g);
  }
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t row = row_at(step), next = row_at(step + 1);
    const bool live = row < last;
    float next_a[P][V], next_g[P][V];
    if constexpr (kStaged) {
      const int64_t ahead = step + StagedRows<T, V>::kStages - 1;
      staged.issue(ahead, row_at(ahead), last, x, xp, dy, prior_rows, dxp, d, groups);
      cp_async_wait<StagedRows<T, V>::kStages - 1>();
      staged.read(step, a, g);
    } else {
      load_row<T, V, P, L>(team, next < last ? x + xp.at(next, d) : nullptr, groups, next_a);
      load_row<T, V, P, L>(team, next < last ? dy + next * d : nullptr, groups, next_g);
    }
    // The residual stream's gradient this row adds to: staged with the row, or loaded
    // before the reductions so that they hide its latency.
    float prior[P][V] = {};
    if constexpr (kStaged) {
      if (accumulate) staged.read_prior(step, prior);
    } else if (accumulate && live) {
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (pack_valid(team, k, groups)) load_f32<T, V>(dx + dxp.at(row, d) + pack_column(team, k, V), prior[k]);
    }
    const float mu = mean && live ? mean[row] : 0.0f, inv = live ? rstd[row] : 0.0f;
    // xhat = (x - mu) inv, gw = dy * w: dx = inv (gw - mean(gw) - xhat mean(gw xhat));
    // RMSNorm drops the mean(gw) term. Invalid packs and dead rows hold g = 0.
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < P; ++k)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float gw = g[k][e] * ww[k][e];
        sum_g += gw;
        sum_gx += gw * (a[k][e] - mu) * inv;
      }
    sum_gx = team.sum(sum_gx, scratch);
    const float mg = mean ? team.sum(sum_g, scratch) * inv_d : 0.0f;
    const float mgx = sum_gx * inv_d;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (!live || !pack_valid(team, k, groups)) continue;
      float o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xhat = (a[k][e] - mu) * inv;
        o[e] = prior[k][e] + inv * (g[k][e] * ww[k][e] - mg - xhat * mgx);
        acc_w[k][e] += g[k][e] * xhat;
        if constexpr (kDb) acc_b[k][e] += g[k][e];
      }
      store_f32<T, V>(dx + dxp.at(row, d) + pack_column(team, k, V), o);
    }
    if constexpr (!kStaged) {
#pragma unroll
      for (int k = 0; k < P; ++k)
#pragma unroll
        for (int e = 0; e < V; ++e) a[k][e] = next_a[k][e], g[k][e] = next_g[k][e];
    }
  }
  if (!dw_partial && !db_partial) return;
  if constexpr (L > 0) {
    float* tw = team_acc;
    float* tb = team_acc + (dw_partial ? team.count() * d : 0);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (!pack_valid(team, k, groups)) continue;
      const int64_t c = team.index() * d + pack_column(team, k, V);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (dw_partial) tw[c + e] = acc_w[k][e];
        if constexpr (kDb) tb[c + e] = acc_b[k][e];
      }
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float sw = 0.0f, sb = 0.0f;
      for (int t = 0; t < team.count(); ++t) {
        if (dw_partial) sw += tw[t * d + j];
        if (db_partial) sb += tb[t * d + j];
      }
      if (dw_partial) dw_partial[blockIdx.x * d + j] = sw;
      if (db_partial) db_partial[blockIdx.x * d + j] = sb;
    }
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (!pack_valid(team, k, groups)) continue;
      const int64_t c = blockIdx.x * d + pack_column(team, k, V);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (dw_partial) dw_partial[c + e] = acc_w[k][e];
        if constexpr (kDb) db_partial[c + e] = acc_b[k][e];
      }
    }
  }
}

// How a row of `groups` packs is split: teams of 8 or 32 lanes for short rows (256
// threads per block), up to 32 x kWarpPacks packs a warp (P packs a lane, eight rows a
// block), otherwise one block per row with P packs per thread (P a power of two, aiming
// at `aim` packs each, at most 512 threads), of whole warps. Calls fn(L, P, threads) as
// integral constants / int. Measured on the H200 at 65536 x 2048 bf16: the forward runs
// at 97% of the copy bandwidth with two packs per thread (80% with one), the backward,
// which holds two rows and the weight-gradient partials in registers, at 75% with one
// (55% with two). The forward takes warp rows up to 128 packs (at 16384 x 768 bf16,
// 0.025 -> 0.022 ms against 64-thread blocks: no block barrier in a row's reductions);
// the backward, which holds more per pack, only up to 32.
template <int kWarpPacks, class Fn>
void with_split(int64_t groups, int aim, const char* op, Fn&& fn) {
  using std::integral_constant;
  if (groups <= 8) return fn(integral_constant<int, 8>{}, integral_constant<int, 1>{}, 256);
  if (groups <= 32) return fn(integral_constant<int, 32>{}, integral_constant<int, 1>{}, 256);
  if constexpr (kWarpPacks >= 4) {
    if (groups <= 64) return fn(integral_constant<int, 32>{}, integral_constant<int, 2>{}, 256);
    if (groups <= 128) return fn(integral_constant<int, 32>{}, integral_constant<int, 4>{}, 256);
  }
  int threads = 64;
  while (threads * aim < groups && threads < 512) threads *= 2;
  const int64_t packs = (groups + threads - 1) / threads;
  // Then only the warps the row needs at that many packs each: a 1280-wide bf16 row
  // (160 packs) takes 160 threads, not 256 with 96 idle that still hold registers.
  const auto needed = [&](int p) { return static_cast<int>(((groups + p - 1) / p + 31) / 32 * 32); };
  const integral_constant<int, 0> block;
  if (packs <= 1) fn(block, integral_constant<int, 1>{}, needed(1));
  else if (packs <= 2) fn(block, integral_constant<int, 2>{}, needed(2));
  else if (packs <= 4) fn(block, integral_constant<int, 4>{}, needed(4));
  else if (packs <= 8) fn(block, integral_constant<int, 8>{}, needed(8));
  else fail(op, ": rows of ", groups, " packs exceed the kernel's ", 8 * threads,
            " per row; use a width that is a multiple of 8 (16-byte packs) or run on the CPU");
}

void require_input_dtype(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  AMBER_CHECK(t.dtype() == x.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " but the input is ",
              dtype_name(x.dtype()), "; on the GPU they must match");
}

void require_activation(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  if (!t.defined()) return;
  require_contiguous(t, op);
  require_input_dtype(t, x, what, op);
}

void require_stat(const Tensor& t, const char* what, const char* op) {
  require_contiguous(t, op);
  AMBER_CHECK(t.dtype() == DType::f32, op, ": ", what, " must be f32 on the GPU, got ",
              dtype_name(t.dtype()));
}

// 16-byte packs need every row of a strided view to start on a 16-byte boundary.
bool rows_aligned(const RowPitch& p, int pack) { return p.token_stride % pack == 0; }

// The shape of one norm call, after its tensors were validated for the GPU.
struct NormCall {
  const char* op;
  int64_t rows, d;
  RowPitch x_pitch;
};

NormCall prepare(const char* op, const Tensor& x, std::initializer_list<std::pair<const Tensor*, const char*>> same,
                 std::initializer_list<std::pair<const Tensor*, const char*>> stats) {
  const RowPitch pitch = row_pitch(x, "input", op);
  for (const auto& [t, what] : same) require_activation(*t, x, what, op);
  for (const auto& [t, what] : stats)
    if (t->defined()) require_stat(*t, what, op);
  const int64_t d = x.size(-1);
  return {op, d > 0 ? x.numel() / d : 0, d, pitch};
}

template <class T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw()) : nullptr;
}

bool all_aligned(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && !aligned16(t->raw())) return false;
  return true;
}

void norm_forward(const NormCall& c, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  double eps, Tensor& y, Tensor& mean, Tensor& rstd, const ResidualAdd& add) {
  if (c.rows == 0) return;
  with_element_type(x.dtype(), c.op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const Tensor none;
    const Tensor& r = add.residual ? *add.residual : none;
    const Tensor& sum = add.residual ? *add.sum : none;
    if (add.residual) {
      require_activation(r, x, "residual", c.op);
      require_activation(sum, x, "sum", c.op);
    }
    const Residual<T> res{ptr<T>(r), static_cast<float>(add.scale),
                          sum.defined() ? static_cast<T*>(sum.raw()) : nullptr};
    AMBER_CHECK(!add.residual || x.is_contiguous(), c.op, ": a residual add needs a contiguous input");
    const bool packed =
        c.d % N == 0 && rows_aligned(c.x_pitch, N) && all_aligned({&x, &weight, &bias, &y, &r, &sum});
    float* pm = mean.defined() ? static_cast<float*>(mean.raw()) : nullptr;
    float* pr = static_cast<float*>(rstd.raw());
    T* py = static_cast<T*>(y.raw());
    const auto launch = [&](auto v) {
      constexpr int V = decltype(v)::value;
      with_split<4>(c.d / V, 2, c.op, [&](auto team, auto packs, int threads) {
        constexpr int L = decltype(team)::value;
        const int64_t rows_per_block = L ? threads / L : 1;
        norm_forward_kernel<T, V, decltype(packs)::value, L>
            <<<static_cast<unsigned>((c.rows + rows_per_block - 1) / rows_per_block), threads, 0,
               current_stream()>>>(ptr<T>(x), c.x_pitch, res, ptr<T>(weight), ptr<T>(bias),
                                      static_cast<float>(eps), py, pm, pr, c.rows, c.d);
      });
    };
    if (packed) launch(std::integral_constant<int, N>{});
    else launch(std::integral_constant<int, 1>{});
  });
  check_launch(c.op, x.shape());
}

void norm_backward(const NormCall& c, const Tensor& dy, const Tensor& x, const Tensor& weight,
                   const Tensor& mean, const Tensor& rstd, Tensor& dx, bool accumulate, Tensor& dweight,
                   Tensor& dbias) {
  if (c.rows == 0) return;
  const bool want_dw = weight.defined() && dweight.defined(), want_db = dbias.defined();
  const RowPitch dx_pitch = row_pitch(dx, "input grad", c.op);
  require_input_dtype(dx, x, "input grad", c.op);
  Tensor dw_partial, db_partial;
  with_element_type(x.dtype(), c.op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const bool packed = c.d % N == 0 && rows_aligned(c.x_pitch, N) && rows_aligned(dx_pitch, N) &&
                        all_aligned({&dy, &x, &weight, &dx});
    const auto launch = [&](auto v) {
      constexpr int V = decltype(v)::value;
      with_split<1>(c.d / V, 1, c.op, [&](auto team, auto packs, int threads) {
        constexpr int L = decltype(team)::value;
        constexpr int P = decltype(packs)::value;
        // Staged rows take 144 bytes of shared memory per thread: up to 256 threads
        // within the default 48 KB beside the block's scratch (at 512 the launch
        // failed). Wider rows load into registers.
        const bool staged = kStageable<T, V, P, L> && threads <= 256;
        const auto pick = [&](auto db) {
          constexpr bool kDb = decltype(db)::value;
          if constexpr (kStageable<T, V, P, L>)
            return staged ? norm_backward_kernel<T, V, P, L, kDb, true> : norm_backward_kernel<T, V, P, L, kDb, false>;
          else
            return norm_backward_kernel<T, V, P, L, kDb, false>;
        };
        const auto kernel = want_db ? pick(std::true_type{}) : pick(std::false_type{});
        const size_t smem = L ? (threads / L) * c.d * sizeof(float) * ((want_dw ? 1 : 0) + (want_db ? 1 : 0))
                              : (staged ? StagedRows<T, V>::bytes(threads) : 0);
        // One wave of blocks, as many as fit on the device at once: a second, partial
        // wave would leave SMs idle at the end. The grid depends on the shape, the
        // kernel and the device only, so the partial sums (and the gradient bits) are
        // the same on every run.
        const int64_t target = resident_blocks(kernel, threads, smem);
        const int64_t rows_per_block = (c.rows + target - 1) / target;
        const int64_t blocks = (c.rows + rows_per_block - 1) / rows_per_block;
        if (want_dw) dw_partial = Tensor::empty({blocks, c.d}, DType::f32, x.device());
        if (want_db) db_partial = Tensor::empty({blocks, c.d}, DType::f32, x.device());
        kernel<<<static_cast<unsigned>(blocks), threads, smem, current_stream()>>>(
            ptr<T>(dy), ptr<T>(x), c.x_pitch, ptr<T>(weight), mean.defined() ? ptr<float>(mean) : nullptr,
            ptr<float>(rstd), static_cast<T*>(dx.raw()), dx_pitch, accumulate,
            want_dw ? static_cast<float*>(dw_partial.raw()) : nullptr,
            want_db ? static_cast<float*>(db_partial.raw()) : nullptr, c.rows, rows_per_block, c.d);
      });
    };
    if (packed) launch(std::integral_constant<int, N>{});
    else launch(std::integral_constant<int, 1>{});
  });
  check_launch(c.op, x.shape());
  if (want_dw) add_column_sums(dw_partial, dweight, c.op);
  if (want_db) add_column_sums(db_partial, dbias, c.op);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd,
                     const ResidualAdd& add) {
  const NormCall c = prepare("rmsnorm_forward", x, {{&weight, "weight"}, {&y, "output"}}, {{&rstd, "rstd"}});
  Tensor no_mean;
  norm_forward(c, x, weight, Tensor(), eps, y, no_mean, rstd, add);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate) {
  const NormCall c = prepare("rmsnorm_backward", x,
                             {{&dy, "grad"}, {&weight, "weight"}}, {{&rstd, "rstd"}});
  Tensor no_bias;
  norm_backward(c, dy, x, weight, Tensor(), rstd, dx, accumulate, dweight, no_bias);
}

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd, const ResidualAdd& add) {
  const NormCall c = prepare("layernorm_forward", x,
                             {{&weight, "weight"}, {&bias, "bias"}, {&y, "output"}},
                             {{&mean, "mean"}, {&rstd, "rstd"}});
  norm_forward(c, x, weight, bias, eps, y, mean, rstd, add);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) {
  const NormCall c = prepare("layernorm_backward", x,
                             {{&dy, "grad"}, {&weight, "weight"}},
                             {{&mean, "mean"}, {&rstd, "rstd"}});
  norm_backward(c, dy, x, weight, mean, rstd, dx, accumulate, dweight, dbias);
}

}  // namespace amber::cuda
