// CUDA MoE routing (ops/cuda/moe/moe.h). The router runs a warp per token in fp32 with
// sums in a fixed shuffle order, each lane holding PerLane experts (the launch picks the
// smallest count that covers the experts); top-k takes k rounds of a warp arg-max (ties
// to the lower expert). The counting sort splits the copies into chunks of kSortChunk in
// token order: a block counts a chunk, one block turns the counts into each chunk's
// first row per expert, and a block per chunk places its copies, each warp walking its
// slice 32 copies at a time with __match_any_sync ranking the copies of one expert, so
// rows keep the CPU's stable order (token, then slot, within an expert) with no global
// atomics.
#include "amber/ops/cuda/moe/moe.h"

#include "amber/ops/cuda/activation/glu_math.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/quant/quant_kernels.cuh"

namespace amber::cuda {
namespace {

constexpr int kMaxExperts = 1024;  // 32 per lane of the router's warp
constexpr int kSortChunk = 4096;   // copies per counting-sort chunk
constexpr int kSortWarps = 8;      // warps of a sort block; each places kSortChunk / kSortWarps copies

__device__ __forceinline__ float score_of(RouterScore s, float logit, float top) {
  if (s == RouterScore::softmax) return expf(logit - top);
  if (s == RouterScore::sigmoid) return 1.0f / (1.0f + expf(-logit));
  const float softplus = fmaxf(logit, 0.0f) + log1pf(expf(-fabsf(logit)));
  return sqrtf(softplus);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <int kPerLane>
__global__ void route_forward_kernel(RouterScore score, int top_k, bool normalize, float scaling, const float* logits,
                                     const float* bias, int64_t tokens, int experts, float* scores, int* chosen,
                                     float* weights) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const float* l = logits + t * experts;
  float s[kPerLane];
  float top = -INFINITY;
  if (score == RouterScore::softmax)
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < experts) top = fmaxf(top, l[lane + 32 * i]);
  top = warp_max(top);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    s[i] = e < experts ? score_of(score, l[e], top) : 0.0f;
    sum += s[i];
  }
  if (score == RouterScore::softmax) {
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) s[i] /= sum;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < experts) scores[t * experts + lane + 32 * i] = s[i];
  // k rounds of a warp arg-max over score + bias, the chosen ones left out; the winner's
  // score travels with it.
  uint32_t taken = 0;
  float chosen_sum = 0;
  for (int j = 0; j < top_k; ++j) {
    float best = -INFINITY, best_s = 0;
    int best_e = experts, best_i = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e >= experts || (taken >> i & 1u)) continue;
      const float key = s[i] + (bias ? bias[e] : 0.0f);
      if (key > best) {
        best = key;
        best_s = s[i];
        best_e = e;
        best_i = i;
      }
    }
    const int mine = best_e;
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, o);
      const float other_s = __shfl_xor_sync(0xffffffffu, best_s, o);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_s = other_s;
        best_e = other_e;
      }
    }
    if (best_i >= 0 && mine == best_e) taken |= 1u << best_i;
    const float chosen_score = best_s;
    chosen_sum += chosen_score;
    if (lane == 0) {
      chosen[t * top_k + j] = best_e;
      weights[t * top_k + j] = chosen_score;
    }
  }
  __syncwarp();
  if (lane == 0) {
    const float factor = normalize ? scaling / chosen_sum : scaling;
    for (int j = 0; j < top_k; ++j) weights[t * top_k + j] *= factor;
  }
}

__global__ void route_backward_kernel(RouterScore score, int top_k, bool normalize, float scaling,
                                      const float* dweights, const float* scores, const int* chosen, int64_t tokens,
                                      int experts, float* dlogits) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const float* st = scores + t * experts;
  // Lane j holds slot j (top_k <= 32).
  const bool slot = lane < top_k;
  const int e_j = slot ? chosen[t * top_k + lane] : 0;
  const float g = slot ? dweights[t * top_k + lane] : 0.0f, s_j = slot ? st[e_j] : 0.0f;
  const float sum = warp_sum(s_j), dot = warp_sum(g * s_j);
  const float ds = slot ? (normalize ? scaling * (g / sum - dot / (sum * sum)) : scaling * g) : 0.0f;
  const float inner = score == RouterScore::softmax ? warp_sum(ds * s_j) : 0.0f;
  // Every lane runs every round (the shuffles need the whole warp).
  for (int base = 0; base < experts; base += 32) {
    const int e = base + lane;
    float d = 0;
    for (int j = 0; j < top_k; ++j) {
      const int ej = __shfl_sync(0xffffffffu, e_j, j);
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
      if (ej == e) d = dsj;
    }
    if (e >= experts) continue;
    const float s = st[e];
    float out;
    if (score == RouterScore::softmax)
      out = s * (d - inner);
    else if (score == RouterScore::sigmoid)
      out = d * s * (1.0f - s);
    else
      out = s > 0.0f ? d * -expm1f(-s * s) / (2.0f * s) : 0.0f;
    dlogits[t * experts + e] = out;
  }
}

// The document of token t: the last d with cu[d] <= t (empty documents share their
// start with the next one, and the trailing ones start at the batch's end).
__device__ __forceinline__ int document_of(const int* cu, int docs, int64_t t) {
  int lo = 0, hi = docs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// counts [D, E] += each copy's (document, expert); integer atomics, so exact.
__global__ void document_counts_kernel(const int* chosen, int64_t copies, int top_k, const int* cu, int docs,
                                       int experts, int* counts) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= copies) return;
  const int d = document_of(cu, docs, i / top_k);
  atomicAdd(&counts[static_cast<int64_t>(d) * experts + chosen[i]], 1);
}

// A warp per token: its auxiliary losses into values[t] and their gradient, times the
// loss scale, added to its logits' gradient (RouterLossSpec in ops/moe.h).
__global__ void router_loss_kernel(RouterScore score, int top_k, float balance_weight, float z_weight,
                                   const float* logits, const float* scores, const int* counts, const int* cu,
                                   int docs, int64_t tokens, int experts, const double* loss_scale, float* dlogits,
                                   double* values) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const int d = document_of(cu, docs, t);
  const float coefficient = balance_weight * experts / (static_cast<float>(top_k) * (cu[d + 1] - cu[d]));
  const int* c = counts + static_cast<int64_t>(d) * experts;
  const float *l = logits + t * experts, *s = scores + t * experts;
  float score_sum = 0, weighted = 0, top = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    score_sum += s[e];
    weighted += coefficient * c[e] * s[e];
    top = fmaxf(top, l[e]);
  }
  score_sum = warp_sum(score_sum);
  weighted = warp_sum(weighted);
  top = warp_max(top);
  const float gp = weighted / score_sum;
  float exp_sum = 0, inner = 0;
  for (int e = lane; e < experts; e += 32) {
    exp_sum += expf(l[e] - top);
    inner += (coefficient * c[e] - gp) / score_sum * s[e];
  }
  exp_sum = warp_sum(exp_sum);
  inner = warp_sum(inner);
  const float lse = top + logf(exp_sum), scale = static_cast<float>(*loss_scale);
  for (int e = lane; e < experts; e += 32) {
    float ds = (coefficient * c[e] - gp) / score_sum;
    if (score == RouterScore::softmax)
      ds = s[e] * (ds - inner);
    else if (score == RouterScore::sigmoid)
      ds *= s[e] * (1.0f - s[e]);
    else
      ds = s[e] > 0.0f ? ds * -expm1f(-s[e] * s[e]) / (2.0f * s[e]) : 0.0f;
    const float z_grad = 2.0f * z_weight * lse * expf(l[e] - top) / exp_sum;
    dlogits[t * experts + e] += scale * (ds + z_grad);
  }
  if (lane == 0) values[t] = static_cast<double>(gp) + static_cast<double>(z_weight) * lse * lse;
}

// One block: sum += the values, each thread's in index order, then a fixed tree.
__global__ void ordered_total_kernel(const double* values, int64_t n, double* sum) {
  __shared__ double partial[1024];
  double local = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) local += values[i];
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum += partial[0];
}

// The copies of chunk c: [c kSortChunk, min((c + 1) kSortChunk, copies)) in token-major
// order. counts [chunks, E]: the chunk's copies per expert.
__global__ void count_chunks_kernel(const int* chosen, int64_t copies, int experts, int* counts) {
  __shared__ int histogram[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSortChunk;
  const int64_t end = min(copies, begin + kSortChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int e = chosen[i];
    if (e >= 0 && e < experts) atomicAdd(&histogram[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    counts[static_cast<int64_t>(blockIdx.x) * experts + e] = histogram[e];
}

// One block of kMaxExperts threads: offsets (an inclusive scan of the experts' totals),
// and the counts turned into each chunk's first row per expert.
__global__ void chunk_bases_kernel(int experts, int chunks, int* counts, int* offsets) {
  __shared__ int scan[kMaxExperts];
  const int e = threadIdx.x;
  int total = 0;
  if (e < experts)
    for (int c = 0; c < chunks; ++c) {
      int* cell = counts + static_cast<int64_t>(c) * experts + e;
      const int n = *cell;
      *cell = total;
      total += n;
    }
  scan[e] = total;
  __syncthreads();
  for (int stride = 1; stride < kMaxExperts; stride *= 2) {
    const int add = e >= stride ? scan[e - stride] : 0;
    __syncthreads();
    scan[e] += add;
    __syncthreads();
  }
  if (e == 0) offsets[0] = 0;
  if (e < experts) {
    offsets[e + 1] = scan[e];
    const int first = scan[e] - total;
    for (int c = 0; c < chunks; ++c) counts[static_cast<int64_t>(c) * experts + e] += first;
  }
}

// A block per chunk: each warp counts its slice, the slices' first rows follow from the
// chunk's, then each warp places its copies 32 at a time in order.
__global__ void place_chunks_kernel(const int* chosen, int64_t copies, int top_k, int experts, const int* bases,
                                    int* slot_rows, int* row_tokens) {
  extern __shared__ int next_row[];  // [kSortWarps][experts]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kSlice = kSortChunk / kSortWarps;
  int* mine = next_row + warp * experts;
  for (int e = lane; e < experts; e += 32) mine[e] = 0;
  __syncwarp();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSortChunk + warp * kSlice;
  const int64_t end = min(copies, begin + kSlice);
  for (int64_t i = begin + lane; i < end; i += 32) {
    const int e = chosen[i];
    if (e >= 0 && e < experts) atomicAdd(&mine[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int row = bases[static_cast<int64_t>(blockIdx.x) * experts + e];
    for (int w = 0; w < kSortWarps; ++w) {
      const int n = next_row[w * experts + e];
      next_row[w * experts + e] = row;
      row += n;
    }
  }
  __syncthreads();
  for (int64_t round = begin; round < end; round += 32) {
    const int64_t i = round + lane;
    int e = i < end ? chosen[i] : -1;
    if (e >= experts) e = -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int row = mine[e] + __popc(peers & ((1u << lane) - 1u));
      slot_rows[i] = row;
      row_tokens[row] = static_cast<int>(i / top_k);
    }
    __syncwarp();
    if (e >= 0 && lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// A warp per row, its lanes striding over the row's units (the widest of 16, 8, 4, 2 or 1
// bytes that the row and both tensors' alignment allow): no division per unit, and a
// row's token read once. A lane loads up to kInFlight units before it stores any, so a
// 768-wide bf16 row's three 16-byte loads a lane are in flight together.
constexpr int kInFlight = 4;

template <class Unit>
__global__ void gather_kernel(const Unit* x, const int* row_tokens, int64_t rows, int64_t units, Unit* xs) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (r >= rows) return;
  const Unit* from = x + static_cast<int64_t>(row_tokens[r]) * units;
  Unit* to = xs + r * units;
  for (int64_t u0 = threadIdx.x % 32; u0 < units; u0 += 32 * kInFlight) {
    Unit v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i)
      if (u0 + 32 * i < units) v[i] = from[u0 + 32 * i];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i)
      if (u0 + 32 * i < units) to[u0 + 32 * i] = v[i];
  }
}

// Rows of fewer than 32 units (FP8 scales: six floats a 768-wide row) a thread per
// unit, so no lane of a warp idles.
template <class Unit>
__global__ void gather_narrow_kernel(const Unit* x, const int* row_tokens, int64_t rows, int units, Unit* xs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * units) return;
  const int64_t r = i / units;
  xs[i] = x[static_cast<int64_t>(row_tokens[r]) * units + (i - r * units)];
}

// Where the FP8 row codes of an op's output go (quantize_fp8_rows' layout).
struct Fp8RowsOut {
  uint8_t* values;
  float* scales;
  Fp8ScaleStrides strides;
};

// Half a warp's block of 128 elements of row r from column c on, eight a lane (v, zeros
// past the row): their codes and the block's scale where `inside`, the bits of
// quantize_fp8_rows.
template <class T>
__device__ __forceinline__ void store_block_codes(const float (&v)[8], Fp8RowsOut out, int64_t r, int64_t pitch,
                                                  int64_t c, bool inside) {
  using namespace quant_kernels;
  uint8_t q[8];
  const float scale = block_codes<T, 16>(v, q);
  if (!inside) return;
  store_row<true, 8>(out.values + r * pitch + c, 8, q);
  if (threadIdx.x % 16 == 0) out.scales[r * out.strides.row + c / kTile * out.strides.col] = scale;
}

// gather_kernel's rows of a 16-bit x with their FP8 row codes from the same pass: 16
// bytes a lane, a half warp per 1x128 block, up to kInFlight rounds of 256 elements
// loaded before any is stored (lanes past the row's end encode zeros, store nothing).
template <class T>
__global__ void __launch_bounds__(256, 4)
    gather_fp8_rows_kernel(const T* x, const int* row_tokens, int64_t rows, int64_t width, T* xs, Fp8RowsOut codes) {
  constexpr int kRound = 32 * Pack<T>::n;
  static_assert(Pack<T>::n == 8, "16-bit rows: a half warp's packs are one 128-wide block");
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* from = x + static_cast<int64_t>(row_tokens[r]) * width;
  for (int64_t c0 = 0; c0 < width; c0 += kRound * kInFlight) {
    Pack<T> p[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t c = c0 + i * kRound + lane * 8;
      if (c < width) p[i] = *reinterpret_cast<const Pack<T>*>(from + c);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      if (c0 + i * kRound >= width) break;
      const int64_t c = c0 + i * kRound + lane * 8;
      const bool inside = c < width;
      float v[8] = {};
      if (inside) {
        *reinterpret_cast<Pack<T>*>(xs + r * width + c) = p[i];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = to_f32(p[i].v[e]);
      }
      store_block_codes<T>(v, codes, r, width, c, inside);
    }
  }
}

// V elements of one token's row a thread; the slots summed in order in fp32.
template <class T, int V>
__global__ void combine_kernel(const T* ys, const int* slot_rows, int64_t tokens, int64_t width, int top_k,
                               bool accumulate, T* out) {
  const int64_t groups = width / V, n = tokens * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / groups, c = i % groups * V;
    float part[V] = {}, y[V], sum[V];
    for (int j = 0; j < top_k; ++j) {
      load_f32<T, V>(ys + static_cast<int64_t>(slot_rows[t * top_k + j]) * width + c, y);
#pragma unroll
      for (int e = 0; e < V; ++e) part[e] += y[e];
    }
    if (accumulate) {
      load_f32<T, V>(out + t * width + c, sum);
#pragma unroll
      for (int e = 0; e < V; ++e) part[e] = sum[e] + part[e];
    }
    store_f32<T, V>(out + t * width + c, part);
  }
}

__global__ void weights_to_rows_kernel(const float* weights, const int* slot_rows, int64_t n, float* rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) rows[slot_rows[i]] = weights[i];
}

// A 32x32 tile of dlogits [T, E] through shared memory, so that both the reads (along
// experts) and the writes (along tokens) are whole rows.
template <class T>
__global__ void router_grad_pair_kernel(const float* dlogits, int64_t tokens, int experts, T* pair) {
  __shared__ float tile[32][33];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int e0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t t = t0 + i;
    const int e = e0 + threadIdx.x;
    tile[i][threadIdx.x] = t < tokens && e < experts ? dlogits[t * experts + e] : 0.0f;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int e = e0 + i;
    const int64_t t = t0 + threadIdx.x;
    if (e >= experts || t >= tokens) continue;
    const float v = tile[threadIdx.x][i];
    const T hi = from_f32<T>(v);
    pair[e * tokens + t] = hi;
    pair[(experts + e) * tokens + t] = from_f32<T>(v - to_f32(hi));
  }
}

__global__ void add_load_kernel(const int* offsets, int experts, double* load) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < experts) load[e] += offsets[e + 1] - offsets[e];
}

// One block: the load's sum and maximum and the idle experts (fixed-order trees), each
// expert's sign step where the step applies, the bias's spread; the load restarts.
__global__ void end_step_kernel(float* bias, double* load, int experts, float rate, const double* apply,
                                double* stats) {
  __shared__ double total[1024], busiest[1024], idle[1024];
  __shared__ float low[1024], high[1024];
  const int i = threadIdx.x;
  double sum = 0, most = 0, none = 0;
  for (int e = i; e < experts; e += blockDim.x) {
    sum += load[e];
    most = fmax(most, load[e]);
    none += load[e] == 0;
  }
  total[i] = sum;
  busiest[i] = most;
  idle[i] = none;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (i < stride) {
      total[i] += total[i + stride];
      busiest[i] = fmax(busiest[i], busiest[i + stride]);
      idle[i] += idle[i + stride];
    }
    __syncthreads();
  }
  const double mean = total[0] / experts;
  const bool applied = *apply != 0;
  float lo = INFINITY, hi = -INFINITY;
  for (int e = i; e < experts; e += blockDim.x) {
    if (bias) {
      if (applied) bias[e] += rate * static_cast<float>((mean > load[e]) - (mean < load[e]));
      lo = fminf(lo, bias[e]);
      hi = fmaxf(hi, bias[e]);
    }
    load[e] = 0;
  }
  low[i] = lo;
  high[i] = hi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (i < stride) {
      low[i] = fminf(low[i], low[i + stride]);
      high[i] = fmaxf(high[i], high[i + stride]);
    }
    __syncthreads();
  }
  if (i == 0) {
    stats[0] = mean > 0 ? busiest[0] / mean : 0;
    stats[1] = idle[0];
    stats[2] = bias ? static_cast<double>(high[0]) - low[0] : 0;
  }
}

// A warp per copy i (row r = slot_rows[i]), V elements a lane at a time; every lane runs
// every round (lanes past the row compute zeros and store nothing), so with kCodes each
// half warp holds one 1x128 block of the gate's or the up half's gradient and encodes it
// from the values as rounded to T (the bits of quantize_fp8_rows(dgate_up)).
template <class T, int V, bool kCodes>
__global__ void __launch_bounds__(256, 4)
    swiglu_backward_kernel(const T* da, const T* gate_up, const float* row_weights, const int* slot_rows,
                           int64_t copies, int64_t width, T* dgate_up, T* act_w, float* dweights, Fp8RowsOut codes) {
  static_assert(!kCodes || V == 8, "a half warp holds one 128-wide block");
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= copies) return;
  const int64_t r = slot_rows[i];
  const float w = row_weights[r];
  const T* gate = gate_up + r * 2 * width;
  T* dgate = dgate_up + r * 2 * width;
  float dot = 0;
  for (int64_t c0 = 0; c0 < width; c0 += 32 * V) {
    const int64_t c = c0 + lane * V;
    const bool inside = c < width;
    float dg[V] = {}, du[V] = {};
    if (inside) {
      float g[V], u[V], d[V], a[V];
      load_f32<T, V>(gate + c, g);
      load_f32<T, V>(gate + width + c, u);
      load_f32<T, V>(da + r * width + c, d);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float silu = Silu::value(g[e]), act = silu * u[e], dw = w * d[e];
        dot += d[e] * act;
        a[e] = w * act;
        dg[e] = dw * u[e] * Silu::derivative(g[e]);
        du[e] = dw * silu;
      }
      store_f32<T, V>(act_w + r * width + c, a);
      store_f32<T, V>(dgate + c, dg);
      store_f32<T, V>(dgate + width + c, du);
    }
    if constexpr (kCodes) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        dg[e] = to_f32(from_f32<T>(dg[e]));
        du[e] = to_f32(from_f32<T>(du[e]));
      }
      store_block_codes<T>(dg, codes, r, 2 * width, c, inside);
      store_block_codes<T>(du, codes, r, 2 * width, width + c, inside);
    }
  }
  dot = warp_sum(dot);
  if (lane == 0) dweights[i] = dot;
}

// Blocks for kernels that take one item a thread (or warp), not a grid-stride loop.
unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

void check_router(const Tensor& logits, int top_k, const char* op) {
  AMBER_CHECK(logits.dtype() == DType::f32, op, ": the GPU router takes f32 logits, got ", dtype_name(logits.dtype()));
  AMBER_CHECK(logits.size(1) <= kMaxExperts && top_k <= 32, op, ": ", logits.size(1), " experts and top-", top_k,
              "; the GPU router takes at most ", kMaxExperts, " experts and top-32");
}

// The SwiGLU backward's launch, with the FP8 row codes of dgate_up where `codes` has values.
void launch_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                            const Tensor& slot_rows, Tensor& dgate_up, Tensor& act_w, Tensor& dweights,
                            Fp8RowsOut codes, const char* op) {
  AMBER_CHECK(dweights.dtype() == DType::f32, op, ": the GPU takes f32 router weights and gradients, got ",
              dtype_name(dweights.dtype()));
  const int64_t copies = slot_rows.numel(), width = da.size(1);
  if (copies == 0) return;
  with_element_type(da.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kPack = 16 / sizeof(T);
    const auto launch = [&]<int V, bool kCodes>() {
      swiglu_backward_kernel<T, V, kCodes><<<blocks_for(copies * 32, 256), 256, 0, current_stream()>>>(
          static_cast<const T*>(da.raw()), static_cast<const T*>(gate_up.raw()),
          static_cast<const float*>(row_weights.raw()), static_cast<const int*>(slot_rows.raw()), copies, width,
          static_cast<T*>(dgate_up.raw()), static_cast<T*>(act_w.raw()), static_cast<float*>(dweights.raw()), codes);
    };
    const bool packed = width % kPack == 0 && aligned16(da.raw()) && aligned16(gate_up.raw()) &&
                        aligned16(dgate_up.raw()) && aligned16(act_w.raw());
    if constexpr (kPack == 8) {
      if (codes.values != nullptr) {
        launch.template operator()<kPack, true>();
        return;
      }
    }
    if (packed)
      launch.template operator()<kPack, false>();
    else
      launch.template operator()<1, false>();
  });
  check_launch(op, da.shape());
}

}  // namespace

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights) {
  const char* op = "moe_route_forward";
  check_router(logits, spec.top_k, op);
  const int64_t tokens = logits.size(0);
  if (tokens == 0) return;
  const int num_experts = static_cast<int>(logits.size(1)), per_lane = (num_experts + 31) / 32;
  const auto launch = [&]<int kPerLane>() {
    route_forward_kernel<kPerLane><<<blocks_for(tokens * 32, 256), 256, 0, current_stream()>>>(
        spec.score, spec.top_k, spec.normalize, static_cast<float>(spec.scaling),
        static_cast<const float*>(logits.raw()), bias.defined() ? static_cast<const float*>(bias.raw()) : nullptr,
        tokens, num_experts, static_cast<float*>(scores.raw()), static_cast<int*>(experts.raw()),
        static_cast<float*>(weights.raw()));
  };
  if (per_lane <= 1) launch.template operator()<1>();
  else if (per_lane <= 2) launch.template operator()<2>();
  else if (per_lane <= 4) launch.template operator()<4>();
  else if (per_lane <= 8) launch.template operator()<8>();
  else launch.template operator()<32>();
  check_launch(op, logits.shape());
}

void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits) {
  const char* op = "moe_route_backward";
  check_router(scores, spec.top_k, op);
  const int64_t tokens = scores.size(0);
  if (tokens == 0) return;
  route_backward_kernel<<<blocks_for(tokens * 32, 256), 256, 0, current_stream()>>>(
      spec.score, spec.top_k, spec.normalize, static_cast<float>(spec.scaling),
      static_cast<const float*>(dweights.raw()), static_cast<const float*>(scores.raw()),
      static_cast<const int*>(experts.raw()), tokens, static_cast<int>(scores.size(1)),
      static_cast<float*>(dlogits.raw()));
  check_launch(op, scores.shape());
}

void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum) {
  const char* op = "moe_router_loss";
  check_router(logits, spec.top_k, op);
  const int64_t tokens = logits.size(0), copies = experts.numel();
  const int num = static_cast<int>(logits.size(1)), docs = static_cast<int>(cu_seqlens.numel() - 1);
  if (tokens == 0 || docs == 0) return;
  Tensor counts = Tensor::zeros({docs, num}, DType::i32, logits.device());
  Tensor values = Tensor::empty({tokens}, DType::f64, logits.device());
  const int* cu = static_cast<const int*>(cu_seqlens.raw());
  document_counts_kernel<<<blocks_for(copies, 256), 256, 0, current_stream()>>>(
      static_cast<const int*>(experts.raw()), copies, spec.top_k, cu, docs, num, static_cast<int*>(counts.raw()));
  router_loss_kernel<<<blocks_for(tokens * 32, 256), 256, 0, current_stream()>>>(
      spec.score, spec.top_k, static_cast<float>(loss.balance_weight), static_cast<float>(loss.z_weight),
      static_cast<const float*>(logits.raw()), static_cast<const float*>(scores.raw()),
      static_cast<const int*>(counts.raw()), cu, docs, tokens, num, static_cast<const double*>(loss_scale.raw()),
      static_cast<float*>(dlogits.raw()), static_cast<double*>(values.raw()));
  ordered_total_kernel<<<1, 1024, 0, current_stream()>>>(static_cast<const double*>(values.raw()), tokens,
                                                        static_cast<double*>(sum.raw()));
  check_launch(op, logits.shape());
}

void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows, Tensor& row_tokens) {
  const char* op = "moe_permute";
  AMBER_CHECK(num_experts <= kMaxExperts, op, ": ", num_experts, " experts; the GPU sort takes at most ", kMaxExperts);
  const int64_t copies = experts.numel();
  const int chunks = static_cast<int>((copies + kSortChunk - 1) / kSortChunk), e = static_cast<int>(num_experts);
  if (chunks == 0) {
    offsets.zero();
    return;
  }
  Tensor bases = Tensor::empty({chunks, num_experts}, DType::i32, experts.device());
  const int* chosen = static_cast<const int*>(experts.raw());
  int* chunk_bases = static_cast<int*>(bases.raw());
  count_chunks_kernel<<<chunks, 256, 0, current_stream()>>>(chosen, copies, e, chunk_bases);
  chunk_bases_kernel<<<1, kMaxExperts, 0, current_stream()>>>(e, chunks, chunk_bases, static_cast<int*>(offsets.raw()));
  place_chunks_kernel<<<chunks, 32 * kSortWarps, kSortWarps * e * sizeof(int), current_stream()>>>(
      chosen, copies, static_cast<int>(experts.size(1)), e, chunk_bases, static_cast<int*>(slot_rows.raw()),
      static_cast<int*>(row_tokens.raw()));
  check_launch(op, experts.shape());
}

void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs) {
  const char* op = "moe_gather";
  const int64_t rows = xs.size(0), bytes = x.size(1) * static_cast<int64_t>(dtype_size(x.dtype()));
  if (rows == 0 || bytes == 0) return;
  const auto launch = [&]<class Unit>() {
    const int64_t units = bytes / static_cast<int64_t>(sizeof(Unit));
    const auto* from = static_cast<const Unit*>(x.raw());
    const auto* tokens = static_cast<const int*>(row_tokens.raw());
    auto* to = static_cast<Unit*>(xs.raw());
    if (units >= 32)
      gather_kernel<<<blocks_for(rows * 32, 256), 256, 0, current_stream()>>>(from, tokens, rows, units, to);
    else
      gather_narrow_kernel<<<blocks_for(rows * units, 256), 256, 0, current_stream()>>>(from, tokens, rows,
                                                                                       static_cast<int>(units), to);
  };
  const uintptr_t alignment = reinterpret_cast<uintptr_t>(x.raw()) | reinterpret_cast<uintptr_t>(xs.raw());
  const auto fits = [&](int64_t unit) { return bytes % unit == 0 && alignment % unit == 0; };
  if (fits(16))
    launch.template operator()<uint4>();
  else if (fits(8))
    launch.template operator()<uint2>();
  else if (fits(4))
    launch.template operator()<uint32_t>();
  else if (fits(2))
    launch.template operator()<uint16_t>();
  else
    launch.template operator()<uint8_t>();
  check_launch(op, xs.shape());
}

bool moe_gather_fp8_rows(const Tensor& x, const Tensor& row_tokens, Tensor& xs, Tensor& values, Tensor& scales) {
  const char* op = "moe_gather_fp8_rows";
  const int64_t rows = xs.size(0), width = x.size(1);
  const bool fits = (x.dtype() == DType::bf16 || x.dtype() == DType::f16) && width % quant_kernels::kTile == 0 &&
                    aligned16(x.raw()) && aligned16(xs.raw()) && reinterpret_cast<uintptr_t>(values.raw()) % 8 == 0;
  if (!fits) return false;
  if (rows == 0) return true;
  with_element_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2)
      gather_fp8_rows_kernel<T><<<blocks_for(rows * 32, 256), 256, 0, current_stream()>>>(
          static_cast<const T*>(x.raw()), static_cast<const int*>(row_tokens.raw()), rows, width,
          static_cast<T*>(xs.raw()),
          {static_cast<uint8_t*>(values.raw()), static_cast<float*>(scales.raw()), fp8_scale_strides(scales)});
  });
  check_launch(op, xs.shape());
  return true;
}

void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate) {
  const char* op = "moe_combine";
  const int64_t tokens = out.size(0), width = out.size(1);
  if (tokens == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kPack = 16 / sizeof(T);
    const auto launch = [&]<int V>() {
      combine_kernel<T, V><<<grid_for(tokens * width / V, 256), 256, 0, current_stream()>>>(
          static_cast<const T*>(ys.raw()), static_cast<const int*>(slot_rows.raw()), tokens, width,
          static_cast<int>(slot_rows.size(1)), accumulate, static_cast<T*>(out.raw()));
    };
    if (width % kPack == 0 && aligned16(ys.raw()) && aligned16(out.raw()))
      launch.template operator()<kPack>();
    else
      launch.template operator()<1>();
  });
  check_launch(op, out.shape());
}

void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights) {
  const char* op = "moe_weights_to_rows";
  AMBER_CHECK(weights.dtype() == DType::f32, op, ": the GPU takes f32 weights, got ", dtype_name(weights.dtype()));
  const int64_t n = weights.numel();
  if (n == 0) return;
  weights_to_rows_kernel<<<blocks_for(n, 256), 256, 0, current_stream()>>>(
      static_cast<const float*>(weights.raw()), static_cast<const int*>(slot_rows.raw()), n,
      static_cast<float*>(row_weights.raw()));
  check_launch(op, weights.shape());
}

void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair) {
  const char* op = "moe_router_grad_pair";
  const int64_t tokens = dlogits.size(0), experts = dlogits.size(1);
  if (tokens == 0 || experts == 0) return;
  const dim3 grid(static_cast<unsigned>((tokens + 31) / 32), static_cast<unsigned>((experts + 31) / 32)), block(32, 8);
  with_element_type(pair.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    router_grad_pair_kernel<T><<<grid, block, 0, current_stream()>>>(
        static_cast<const float*>(dlogits.raw()), tokens, static_cast<int>(experts), static_cast<T*>(pair.raw()));
  });
  check_launch(op, dlogits.shape());
}

void moe_add_load(const Tensor& offsets, Tensor& load) {
  const int experts = static_cast<int>(load.numel());
  add_load_kernel<<<blocks_for(experts, 256), 256, 0, current_stream()>>>(static_cast<const int*>(offsets.raw()),
                                                                        experts, static_cast<double*>(load.raw()));
  check_launch("moe_add_load", load.shape());
}

void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats) {
  const int experts = static_cast<int>(load.numel());
  end_step_kernel<<<1, 1024, 0, current_stream()>>>(bias.defined() ? static_cast<float*>(bias.raw()) : nullptr,
                                                    static_cast<double*>(load.raw()), experts,
                                                    static_cast<float>(rate), static_cast<const double*>(apply.raw()),
                                                    static_cast<double*>(stats.raw()));
  check_launch("moe_end_step", load.shape());
}

void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights) {
  launch_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights, {},
                         "moe_swiglu_backward");
}

bool moe_swiglu_backward_fp8_rows(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                                  const Tensor& slot_rows, Tensor& dgate_up, Tensor& act_w, Tensor& dweights,
                                  Tensor& values, Tensor& scales) {
  const int64_t width = da.size(1);
  const bool fits = (da.dtype() == DType::bf16 || da.dtype() == DType::f16) && width % quant_kernels::kTile == 0 &&
                    aligned16(da.raw()) && aligned16(gate_up.raw()) && aligned16(dgate_up.raw()) &&
                    aligned16(act_w.raw()) && reinterpret_cast<uintptr_t>(values.raw()) % 8 == 0;
  if (!fits) return false;
  launch_swiglu_backward(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights,
                         {static_cast<uint8_t*>(values.raw()), static_cast<float*>(scales.raw()),
                          fp8_scale_strides(scales)},
                         "moe_swiglu_backward_fp8_rows");
  return true;
}

}  // namespace amber::cuda
