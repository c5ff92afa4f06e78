// Communicator: the collectives a run of several processes needs (all-reduce,
// reduce-scatter, all-gather, broadcast, all-to-all, barrier) on amber Tensors, behind
// one interface with a backend per transport: MPI between CPU processes, NCCL between
// GPUs, and a world of one for a single process, so that the undistributed run goes
// through the same calls. Backends are chosen once, by connect_communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "amber/core/tensor.h"
#include "amber/dist/launch_env.h"

namespace amber::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The rank among the processes of this machine (which GPU a process takes).
  virtual int local_rank() const = 0;
  // "single", "mpi" or "nccl", for logs and errors.
  virtual std::string backend() const = 0;

  // Every rank's `tensor` becomes the element-wise sum over all ranks. Contiguous; the
  // MPI backend reduces f32, f64, i32 and i64.
  virtual void all_reduce_sum(Tensor& tensor) = 0;
  // all_reduce_sum without waiting for it, so that it overlaps the work issued after it:
  // the sum is the one all_reduce_sum gives, and `tensor` (on the device a collective
  // reads: the GPU for NCCL) may be neither read nor written until all_reduce_sum_wait.
  // On a GPU the reduction starts once the work queued so far on the issuing stream is
  // done and runs beside the work queued after it; on the CPU MPI starts it at once.
  virtual void all_reduce_sum_start(Tensor& tensor) = 0;
  // Completes every all_reduce_sum_start since the last wait, in the order started: on
  // a GPU the issuing stream's later work waits for them (a join, capturable in a CUDA
  // graph); on the CPU it returns once they are done, under the same deadline as every
  // collective.
  virtual void all_reduce_sum_wait() = 0;
  // `input` is one block per rank, block r holding counts[r] elements; rank r's
  // `output` (counts[r] elements) becomes the sum over ranks of their block r. Blocks
  // may differ in size, so a shard can end on a whole parameter.
  virtual void reduce_scatter_sum(const Tensor& input, Tensor& output, std::span<const int64_t> counts) = 0;
  // The inverse layout: rank r's `input` (counts[r] elements) becomes block r of every
  // rank's `output`. `input` may be rank r's own block of `output` (in place).
  virtual void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts) = 0;
  // Every rank's `tensor` becomes root's.
  virtual void broadcast(Tensor& tensor, int root) = 0;
  // `input` and `output` hold world_size equal blocks: block j of rank i's input
  // becomes block i of rank j's output (the exchange of expert parallelism).
  virtual void all_to_all(const Tensor& input, Tensor& output) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // Puts the device work that `work` queues on this thread's stream under the deadline
  // of the communicator's collectives, named `what` ("step 12"): a GPU step replays its
  // collectives inside a CUDA graph, which the NCCL backend does not see launched. The
  // CPU backends wait for every collective themselves, so they just run `work`.
  virtual void watch(const std::string& /*what*/, const std::function<void()>& work) { work(); }
};

struct CommunicatorOptions {
  // A collective that has not completed after this many seconds ends the whole run
  // with an error naming the waiting rank and the collective: a peer has died or hangs.
  double timeout_s = 600;
};

// The communicator of this process: a world of one without a launcher (or as Slurm's
// only task), else the backend for `device` (MPI for the CPU, NCCL for a GPU), also for
// mpirun's or torchrun's world of one (`amber launch -n 1`), whose cost against a
// single process that measures. An error says what is missing when this amber was built without that backend.
std::unique_ptr<Communicator> connect_communicator(const LaunchEnv& env, Device device,
                                                   const CommunicatorOptions& options);

// A world of one: every collective leaves its data as a single process would have it.
std::unique_ptr<Communicator> single_process_communicator();

}  // namespace amber::dist
