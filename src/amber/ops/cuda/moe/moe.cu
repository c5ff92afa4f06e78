// CUDA MoE routing (ops/cuda/moe/moe.h). The router runs a warp per token in fp32 with
// sums in a fixed shuffle order; top-k takes k rounds of a warp arg-max (ties to the
// lower expert). The counting sort splits the copies into chunks of kChunk in token
// order: one thread counts a chunk, one block turns the counts into each chunk's first
// row per expert, one thread per chunk places its copies, so rows keep the CPU's stable
// order (token, then slot, within an expert) with no atomics.
#include "amber/ops/cuda/moe/moe.h"

#include "amber/ops/cuda/common/common.cuh"

namespace amber::cuda {
namespace {

constexpr int kMaxExperts = 1024;           // 32 per lane of the router's warp
constexpr int kPerLane = kMaxExperts / 32;
constexpr int kChunk = 256;                 // copies per counting-sort chunk

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

// The copies of chunk c: [c kChunk, min((c + 1) kChunk, copies)) in token-major order.
__global__ void count_chunks_kernel(const int* chosen, int64_t copies, int experts, int chunks, int* counts) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  int* row = counts + static_cast<int64_t>(c) * experts;
  for (int e = 0; e < experts; ++e) row[e] = 0;
  const int64_t end = min(copies, static_cast<int64_t>(c + 1) * kChunk);
  for (int64_t i = static_cast<int64_t>(c) * kChunk; i < end; ++i) {
    const int e = chosen[i];
    if (e >= 0 && e < experts) ++row[e];
  }
}

// One block: offsets, and counts turned into each chunk's first row per expert.
__global__ void chunk_bases_kernel(int experts, int chunks, int* counts, int* offsets) {
  __shared__ int totals[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int running = 0;
    for (int c = 0; c < chunks; ++c) {
      int* cell = counts + static_cast<int64_t>(c) * experts + e;
      const int n = *cell;
      *cell = running;
      running += n;
    }
    totals[e] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (int e = 0; e < experts; ++e) {
      offsets[e] = running;
      running += totals[e];
    }
    offsets[experts] = running;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    for (int c = 0; c < chunks; ++c) counts[static_cast<int64_t>(c) * experts + e] += offsets[e];
}

__global__ void place_chunks_kernel(const int* chosen, int64_t copies, int top_k, int experts, int chunks, int* bases,
                                    int* slot_rows, int* row_tokens) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  int* base = bases + static_cast<int64_t>(c) * experts;
  const int64_t end = min(copies, static_cast<int64_t>(c + 1) * kChunk);
  for (int64_t i = static_cast<int64_t>(c) * kChunk; i < end; ++i) {
    const int e = chosen[i];
    if (e < 0 || e >= experts) continue;
    const int row = base[e]++;
    slot_rows[i] = row;
    row_tokens[row] = static_cast<int>(i / top_k);
  }
}

// Rows of `bytes` bytes copied 16 bytes (or 2) a thread.
template <class Unit>
__global__ void gather_kernel(const Unit* x, const int* row_tokens, int64_t rows, int64_t units, Unit* xs) {
  const int64_t n = rows * units;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / units, u = i % units;
    xs[i] = x[static_cast<int64_t>(row_tokens[r]) * units + u];
  }
}

template <class T>
__global__ void combine_kernel(const T* ys, const int* slot_rows, int64_t tokens, int64_t width, int top_k,
                               bool accumulate, T* out) {
  const int64_t n = tokens * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    float sum = accumulate ? to_f32(out[i]) : 0.0f;
    float part = 0;
    for (int j = 0; j < top_k; ++j) part += to_f32(ys[static_cast<int64_t>(slot_rows[t * top_k + j]) * width + c]);
    out[i] = from_f32<T>(accumulate ? sum + part : part);
  }
}

__global__ void weights_to_rows_kernel(const float* weights, const int* slot_rows, int64_t n, float* rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) rows[slot_rows[i]] = weights[i];
}

__global__ void add_load_kernel(const int* offsets, int experts, double* load) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < experts) load[e] += offsets[e + 1] - offsets[e];
}

// One block: mean load (a fixed-order tree), then each expert's sign step where the
// step applies; the load restarts either way.
__global__ void update_bias_kernel(float* bias, double* load, int experts, float rate, const double* apply) {
  __shared__ double partial[1024];
  double local = 0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) local += load[e];
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const double mean = partial[0] / experts;
  const bool applied = *apply != 0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    if (applied) bias[e] += rate * static_cast<float>((mean > load[e]) - (mean < load[e]));
    load[e] = 0;
  }
}

template <class T>
__global__ void scale_rows_kernel(const T* x, const float* w, int64_t rows, int64_t width, T* out) {
  const int64_t n = rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(to_f32(x[i]) * w[i / width]);
}

template <class T>
__global__ void weight_grads_kernel(const T* da, const T* act, const int* slot_rows, int64_t copies, int64_t width,
                                    float* dweights) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= copies) return;
  const int64_t r = slot_rows[i];
  float sum = 0;
  for (int64_t c = lane; c < width; c += 32) sum += to_f32(da[r * width + c]) * to_f32(act[r * width + c]);
  sum = warp_sum(sum);
  if (lane == 0) dweights[i] = sum;
}

// Blocks for kernels that take one item a thread (or warp), not a grid-stride loop.
unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

void check_router(const Tensor& logits, int top_k, const char* op) {
  AMBER_CHECK(logits.dtype() == DType::f32, op, ": the GPU router takes f32 logits, got ", dtype_name(logits.dtype()));
  AMBER_CHECK(logits.size(1) <= kMaxExperts && top_k <= 32, op, ": ", logits.size(1), " experts and top-", top_k,
              "; the GPU router takes at most ", kMaxExperts, " experts and top-32");
}

}  // namespace

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights) {
  const char* op = "moe_route_forward";
  check_router(logits, spec.top_k, op);
  const int64_t tokens = logits.size(0);
  if (tokens == 0) return;
  route_forward_kernel<<<blocks_for(tokens * 32, 256), 256, 0, current_stream()>>>(
      spec.score, spec.top_k, spec.normalize, static_cast<float>(spec.scaling), static_cast<const float*>(logits.raw()),
      bias.defined() ? static_cast<const float*>(bias.raw()) : nullptr, tokens, static_cast<int>(logits.size(1)),
      static_cast<float*>(scores.raw()), static_cast<int*>(experts.raw()), static_cast<float*>(weights.raw()));
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

void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows, Tensor& row_tokens) {
  const char* op = "moe_permute";
  AMBER_CHECK(num_experts <= kMaxExperts, op, ": ", num_experts, " experts; the GPU sort takes at most ", kMaxExperts);
  const int64_t copies = experts.numel();
  const int chunks = static_cast<int>((copies + kChunk - 1) / kChunk), e = static_cast<int>(num_experts);
  if (chunks == 0) {
    offsets.zero();
    return;
  }
  Tensor bases = Tensor::empty({chunks, num_experts}, DType::i32, experts.device());
  const int* chosen = static_cast<const int*>(experts.raw());
  count_chunks_kernel<<<blocks_for(chunks, 128), 128, 0, current_stream()>>>(chosen, copies, e, chunks,
                                                                           static_cast<int*>(bases.raw()));
  chunk_bases_kernel<<<1, 1024, 0, current_stream()>>>(e, chunks, static_cast<int*>(bases.raw()),
                                                       static_cast<int*>(offsets.raw()));
  place_chunks_kernel<<<blocks_for(chunks, 128), 128, 0, current_stream()>>>(
      chosen, copies, static_cast<int>(experts.size(1)), e, chunks, static_cast<int*>(bases.raw()),
      static_cast<int*>(slot_rows.raw()), static_cast<int*>(row_tokens.raw()));
  check_launch(op, experts.shape());
}

void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs) {
  const char* op = "moe_gather";
  const int64_t rows = xs.size(0), bytes = x.size(1) * static_cast<int64_t>(dtype_size(x.dtype()));
  if (rows == 0) return;
  if (bytes % 16 == 0 && aligned16(x.raw()) && aligned16(xs.raw()))
    gather_kernel<<<grid_for(rows * bytes / 16, 256), 256, 0, current_stream()>>>(
        static_cast<const uint4*>(x.raw()), static_cast<const int*>(row_tokens.raw()), rows, bytes / 16,
        static_cast<uint4*>(xs.raw()));
  else
    gather_kernel<<<grid_for(rows * bytes / 2, 256), 256, 0, current_stream()>>>(
        static_cast<const uint16_t*>(x.raw()), static_cast<const int*>(row_tokens.raw()), rows, bytes / 2,
        static_cast<uint16_t*>(xs.raw()));
  check_launch(op, xs.shape());
}

void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate) {
  const char* op = "moe_combine";
  const int64_t tokens = out.size(0), width = out.size(1);
  if (tokens == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    combine_kernel<T><<<grid_for(tokens * width, 256), 256, 0, current_stream()>>>(
        static_cast<const T*>(ys.raw()), static_cast<const int*>(slot_rows.raw()), tokens, width,
        static_cast<int>(slot_rows.size(1)), accumulate, static_cast<T*>(out.raw()));
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

void moe_add_load(const Tensor& offsets, Tensor& load) {
  const int experts = static_cast<int>(load.numel());
  add_load_kernel<<<blocks_for(experts, 256), 256, 0, current_stream()>>>(static_cast<const int*>(offsets.raw()),
                                                                        experts, static_cast<double*>(load.raw()));
  check_launch("moe_add_load", load.shape());
}

void moe_update_bias(Tensor& bias, Tensor& load, double rate, const Tensor& apply) {
  const int experts = static_cast<int>(bias.numel());
  update_bias_kernel<<<1, 1024, 0, current_stream()>>>(static_cast<float*>(bias.raw()),
                                                       static_cast<double*>(load.raw()), experts,
                                                       static_cast<float>(rate), static_cast<const double*>(apply.raw()));
  check_launch("moe_update_bias", bias.shape());
}

void moe_scale_rows(const Tensor& x, const Tensor& row_weights, Tensor& out) {
  const char* op = "moe_scale_rows";
  AMBER_CHECK(row_weights.dtype() == DType::f32, op, ": the GPU takes f32 row weights, got ",
              dtype_name(row_weights.dtype()));
  const int64_t rows = x.size(0), width = x.size(1);
  if (rows == 0) return;
  with_element_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    scale_rows_kernel<T><<<grid_for(rows * width, 256), 256, 0, current_stream()>>>(
        static_cast<const T*>(x.raw()), static_cast<const float*>(row_weights.raw()), rows, width,
        static_cast<T*>(out.raw()));
  });
  check_launch(op, x.shape());
}

void moe_weight_grads(const Tensor& da, const Tensor& act, const Tensor& slot_rows, Tensor& dweights) {
  const char* op = "moe_weight_grads";
  AMBER_CHECK(dweights.dtype() == DType::f32, op, ": the GPU writes f32 gate-weight gradients, got ",
              dtype_name(dweights.dtype()));
  const int64_t copies = slot_rows.numel(), width = da.size(1);
  if (copies == 0) return;
  with_element_type(da.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    weight_grads_kernel<T><<<blocks_for(copies * 32, 256), 256, 0, current_stream()>>>(
        static_cast<const T*>(da.raw()), static_cast<const T*>(act.raw()), static_cast<const int*>(slot_rows.raw()),
        copies, width, static_cast<float*>(dweights.raw()));
  });
  check_launch(op, da.shape());
}

}  // namespace amber::cuda
