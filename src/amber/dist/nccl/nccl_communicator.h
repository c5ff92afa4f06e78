// The NCCL backend: collectives between GPUs, on a stream of the communicator's own
// that waits for the issuing stream's work and that the issuing stream then waits for,
// so a collective captured in the step's CUDA graph becomes a fork and a join of it.
// nccl_communicator.cpp is built in CUDA builds that find NCCL, nccl_absent.cpp
// otherwise.
#pragma once

#include <memory>

#include "amber/dist/communicator.h"

namespace amber::dist {

// Whether this amber was built with NCCL.
bool nccl_available();

// The communicator of the ranks `env` describes, on GPU `device` (each rank its own).
// NCCL's unique id goes from rank 0 to the others over MPI when an MPI launcher or srun
// started the ranks, else over the TCP rendezvous at MASTER_ADDR:MASTER_PORT.
std::unique_ptr<Communicator> nccl_communicator(const LaunchEnv& env, int device, double timeout_s);

}  // namespace amber::dist
