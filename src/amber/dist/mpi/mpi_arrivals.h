// Which collective each rank has reached, as rank 0 knows it: every other rank sends
// rank 0 the number of each collective it enters (a point-to-point message beside the
// collective), so that when a collective times out on rank 0 it names the ranks that
// never entered it: the one that hangs, rather than the ones waiting for it.
#pragma once

#include <mpi.h>

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
  // Rank 0 takes in the arrivals that came; the others retire the sends that finished.
  void poll();
  // Rank 0: "rank 2 (last reached collective 56)" for every rank that has not reached
  // collective `number`, or "" when all have.
  std::string missing(int64_t number) const;
  // Before MPI_Finalize: the sends and receives still open completed or cancelled
  // (waiting at most `timeout_s` for the arrivals of the last collectives).
  void close(double timeout_s);

 private:
  static constexpr int kTag = 0x616d62;  // "amb"
  int rank_, world_;
  std::vector<int64_t> seen_, incoming_;  // rank 0: per rank
  std::vector<MPI_Request> receives_;     // rank 0: one posted receive per other rank
  std::deque<std::pair<MPI_Request, std::unique_ptr<int64_t>>> sends_;  // the others: in flight
};

}  // namespace amber::dist
