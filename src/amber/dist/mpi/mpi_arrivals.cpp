#include "amber/dist/mpi/mpi_arrivals.h"

#include <chrono>
#include <thread>

#include "amber/core/error.h"

namespace amber::dist {

MpiArrivals::MpiArrivals(int rank, int world_size) : rank_(rank), world_(world_size) {
  if (rank_ != 0) return;
  seen_.assign(static_cast<size_t>(world_), 0);
  heard_.assign(static_cast<size_t>(world_), Clock::now());
  incoming_.assign(static_cast<size_t>(world_), 0);
  receives_.assign(static_cast<size_t>(world_), MPI_REQUEST_NULL);
  for (int r = 1; r < world_; ++r)
    MPI_Irecv(&incoming_[static_cast<size_t>(r)], 1, MPI_INT64_T, r, kTag, MPI_COMM_WORLD,
              &receives_[static_cast<size_t>(r)]);
}

void MpiArrivals::enter(int64_t number) {
  if (rank_ == 0) {
    seen_[0] = number;
    return;
  }
  send(number);
}

void MpiArrivals::still_in(int64_t number) {
  if (rank_ != 0 && Clock::now() - sent_ > std::chrono::seconds(1)) send(number);
}

void MpiArrivals::send(int64_t number) {
  sent_ = Clock::now();
  auto value = std::make_unique<int64_t>(number);
  MPI_Request request;
  MPI_Isend(value.get(), 1, MPI_INT64_T, 0, kTag, MPI_COMM_WORLD, &request);
  sends_.emplace_back(request, std::move(value));
}

void MpiArrivals::poll() {
  if (rank_ != 0) {
    while (!sends_.empty()) {
      int done = 0;
      MPI_Test(&sends_.front().first, &done, MPI_STATUS_IGNORE);
      if (!done) return;
      sends_.pop_front();
    }
    return;
  }
  // A rank's messages arrive in order (MPI does not overtake), so the last is the newest.
  for (int r = 1; r < world_; ++r) {
    const size_t i = static_cast<size_t>(r);
    for (int done = 1; done;) {
      MPI_Test(&receives_[i], &done, MPI_STATUS_IGNORE);
      if (!done) break;
      seen_[i] = incoming_[i];
      heard_[i] = Clock::now();
      MPI_Irecv(&incoming_[i], 1, MPI_INT64_T, r, kTag, MPI_COMM_WORLD, &receives_[i]);
    }
  }
}

std::string MpiArrivals::missing(int64_t number, double silent_s) const {
  std::string out;
  for (int r = 1; r < static_cast<int>(seen_.size()); ++r) {
    const int64_t last = seen_[static_cast<size_t>(r)];
    const double silent = std::chrono::duration<double>(Clock::now() - heard_[static_cast<size_t>(r)]).count();
    if (last < number)
      out += concat(out.empty() ? "" : ", ", "rank ", r, " (last reached collective ", last, ")");
    else if (silent > silent_s)
      out += concat(out.empty() ? "" : ", ", "rank ", r, " (silent for ", static_cast<int>(silent), " s inside it)");
  }
  return out;
}

void MpiArrivals::close(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const auto drained = [&] {
    poll();
    if (rank_ != 0) return sends_.empty();
    for (int64_t seen : seen_)
      if (seen < seen_[0]) return false;
    return true;
  };
  while (!drained() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  for (MPI_Request& r : receives_) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  for (auto& [request, value] : sends_) {
    MPI_Cancel(&request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  sends_.clear();
}

}  // namespace amber::dist
