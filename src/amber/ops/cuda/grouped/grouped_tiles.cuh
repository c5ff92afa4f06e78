// The work plan every grouped kernel starts from: each expert's rows, read from the
// offsets on the device and clamped to the buffers (malformed offsets can make a
// result wrong, never an access out of bounds), and for the m-grouped kernels the
// first work item of each expert, a prefix sum over per-expert tile counts that one
// warp computes in shared memory at the start of every block.
#pragma once

#include <cstdint>

namespace amber::cuda::grouped {

constexpr int kMaxExperts = 512;

struct Plan {
  int begin[kMaxExperts];  // first row of each expert
  int count[kMaxExperts];  // its rows
  int first[kMaxExperts + 1];  // its first work item; first[experts] = all items
};

// By the block's first warp, then a block barrier. tiles(rows) = an expert's items.
template <class Tiles>
__device__ __forceinline__ void make_plan(Plan& p, const int* offsets, int experts, int rows, Tiles tiles) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, chunk = (experts + 31) / 32;
    const int e0 = min(lane * chunk, experts), e1 = min(e0 + chunk, experts);
    const auto clamp = [&](int r) { return min(max(r, 0), rows); };
    int local = 0;
    for (int e = e0; e < e1; ++e) {
      const int b = clamp(offsets[e]);
      p.begin[e] = b;
      p.count[e] = max(clamp(offsets[e + 1]) - b, 0);
      local += tiles(p.count[e]);
    }
    int inclusive = local;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += v;
    }
    int running = inclusive - local;
    for (int e = e0; e < e1; ++e) {
      p.first[e] = running;
      running += tiles(p.count[e]);
    }
    if (lane == 31) p.first[experts] = inclusive;
  }
  __syncthreads();
}

// The expert owning work item w (w below first[experts]): the last one whose first
// item is at most w, which skips experts without items.
__device__ __forceinline__ int expert_of(const Plan& p, int experts, int w) {
  int lo = 0, hi = experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.first[mid] <= w)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace amber::cuda::grouped
