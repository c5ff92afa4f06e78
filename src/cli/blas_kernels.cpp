#include "cli/blas_kernels.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "amber/ops/cpu/blas.h"

namespace amber::cli {

void restart_with_wider_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string core = cpu::wider_blas_core();
  if (core.empty()) return;
  std::cerr << "amber: OpenBLAS chose its AVX2 kernels on a CPU with AVX-512; starting again with "
               "OPENBLAS_CORETYPE="
            << core << " (about twice as fast on the CPU; set OPENBLAS_CORETYPE to choose)\n";
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
}

}  // namespace amber::cli
