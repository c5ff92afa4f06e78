// OverlappedBuckets: the gradient buckets' all-reduce started during the backward. The
// step's last micro-batch hands it to the model's backward as its GradientReady; at
// each report (the head, the final norm, each block from the last, the embedding) every
// bucket whose slice of the gradient buffers is then entirely final starts its sum
// (Communicator::all_reduce_sum_start), and finish() waits for them before the
// optimizer reads the gradients. Each bucket is the same collective on the same slice
// as GradientBuckets::all_reduce's, so the sums are the same, bit for bit; only when
// each is issued changes.
#pragma once

#include <cstddef>
#include <vector>

#include "amber/dist/communicator.h"
#include "amber/dist/data_parallel.h"
#include "amber/model/gradient_ready.h"

namespace amber::dist {

class OverlappedBuckets final : public GradientReady {
 public:
  // `buckets` and `comm` must outlive this.
  OverlappedBuckets(const GradientBuckets& buckets, Communicator& comm);

  // Before the backward that reports to it: no bucket started yet.
  void arm();
  // Starts, in bucket order, every bucket not yet started that is now final. Every rank
  // runs the same model, so every rank starts the same buckets in the same order.
  void gradients_final(size_t first) override;
  // After that backward: checks that every bucket started, then waits for them all.
  void finish();
  // The buckets (indices into GradientBuckets::buckets) in the order the last backward
  // started them.
  const std::vector<size_t>& started() const { return started_; }

 private:
  const GradientBuckets& buckets_;
  Communicator& comm_;
  std::vector<bool> is_started_;
  std::vector<size_t> started_;
};

}  // namespace amber::dist
