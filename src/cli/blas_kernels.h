// The CPU's BLAS kernels, settled before anything else runs.
#pragma once

namespace amber::cli {

// Starts this process again with OPENBLAS_CORETYPE naming OpenBLAS's wider kernels when
// OpenBLAS chose narrower ones than the CPU runs (ops/cpu/blas.h says when), saying so
// on stderr; returns when nothing needs changing, the user set OPENBLAS_CORETYPE, or
// the restart failed.
void restart_with_wider_blas_kernels(char** argv);

}  // namespace amber::cli
