// LaunchEnv: what the launcher that started this process says about the run's
// processes, read from its environment variables: Open MPI's mpirun (OMPI_COMM_WORLD_*),
// MPICH and Intel MPI (PMI_*), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)
// and torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), which `amber launch` sets as well.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace amber::dist {

struct LaunchEnv {
  enum class Launcher { none, mpi, slurm, torchrun };
  Launcher launcher = Launcher::none;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // torchrun-style: the rendezvous of rank 0
  int master_port = 0;

  bool distributed() const { return world_size > 1; }
  // "mpirun", "srun", "torchrun-style environment" or "no launcher", for messages.
  std::string launcher_name() const;
};

// Reads the launcher's variables through `getenv` (std::getenv by default); an error
// names a variable that is malformed or inconsistent and how to set it.
LaunchEnv detect_launch_env(const std::function<const char*(const char*)>& getenv = {});

}  // namespace amber::dist
