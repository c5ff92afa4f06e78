// This amber was built without MPI: connect_communicator says so before calling this.
#include "amber/core/error.h"
#include "amber/dist/mpi/mpi_communicator.h"

namespace amber::dist {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> mpi_communicator(double) {
  fail("this amber was built without MPI; install Open MPI (libopenmpi-dev) and build again");
}

}  // namespace amber::dist
