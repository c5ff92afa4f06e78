// Which collective each rank has reached, as rank 0 knows it: every other rank sends
// rank 0 the number of each collective it enters (a point-to-point message beside the
// collective), and again every second while it waits in it, so that when a collective
// times out on rank 0 it names the ranks that never entered it or fell silent inside
// it: the one that hangs, rather than the ones waiting for it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace amber::dist {

class MpiArrivals {
 public:
  MpiArrivals(int rank, int world_size);
  MpiArrivals(const MpiArrivals&) = delete;
  MpiArrivals& operator=(const MpiArrivals&) = delete;

  // On entering collective number `number` (1, 2, ... alike on every rank).
  void enter(int64_t number);
  // While waiting in collective `number`: tells rank 0 again once a second has passed.
  void still_in(int64_t number);
  // Rank 0 takes in the arrivals that came; the others retire the sends that finished.
  void poll();
  // Rank 0: "rank 2 (last reached collective 56)" for every rank that has not reached
  // collective `number`, and "rank 1 (silent for 9 s inside it)" for every rank in it
  // that has not been heard from for `silent_s`; "" when there is none.
  std::string missing(int64_t number, double silent_s) const;
  // Before MPI_Finalize: the sends and receives still open completed or cancelled
  // (waiting at most `timeout_s` for the arrivals of the last collectives).
  void close(double timeout_s);

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kTag = 0x616d62;  // "amb"
  void send(int64_t number);

  int rank_, world_;
  std::vector<int64_t> seen_, incoming_;  // rank 0: per rank
  std::vector<Clock::time_point> heard_;  // rank 0: per rank, the last message
  Clock::time_point sent_;                // the others: the last message
  std::vector<MPI_Request> receives_;     // rank 0: one posted receive per other rank
  std::deque<std::pair<MPI_Request, std::unique_ptr<int64_t>>> sends_;  // the others: in flight
};

}  // namespace amber::dist
