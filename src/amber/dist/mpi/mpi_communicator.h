// The MPI backend: collectives between CPU processes over MPI's own transports (shared
// memory on one machine, the network between machines). mpi_communicator.cpp is built
// when CMake finds MPI, mpi_absent.cpp otherwise.
#pragma once

#include <memory>

#include "amber/dist/communicator.h"

namespace amber::dist {

// Whether this amber was built with MPI.
bool mpi_available();

// Initialises MPI (unless the program already has) and returns the communicator of
// MPI_COMM_WORLD; MPI is finalised with it when it initialised MPI, unless it is
// destroyed by an exception's unwinding (then mpirun ends the run). A collective still
// incomplete after timeout_s ends every rank (MPI_Abort) with an error naming this rank
// and the collective.
std::unique_ptr<Communicator> mpi_communicator(double timeout_s);

}  // namespace amber::dist
