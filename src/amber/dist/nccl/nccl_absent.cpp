// This amber was built without NCCL (no CUDA, or no libnccl): connect_communicator says
// so before calling this.
#include "amber/core/error.h"
#include "amber/dist/nccl/nccl_communicator.h"

namespace amber::dist {

bool nccl_available() { return false; }

std::unique_ptr<Communicator> nccl_communicator(const LaunchEnv&, int, double) {
  fail("this amber was built without NCCL; build it where the CUDA toolkit and NCCL (libnccl-dev) are installed");
}

}  // namespace amber::dist
