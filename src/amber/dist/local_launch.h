// `amber launch`: starts N processes of amber on this machine as the ranks of one run,
// either through Open MPI's mpirun (which the MPI communicator needs, and which also
// ends every rank when one dies) or with torchrun-style variables (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the bootstrap of GPU communicators, watched by
// the launcher itself: when a rank fails it names the rank and stops the others.
#pragma once

#include <string>
#include <vector>

namespace amber::dist {

enum class LaunchVia { mpirun, env };

struct LocalLaunch {
  int processes = 1;
  std::string program;             // the amber binary every rank runs
  std::vector<std::string> args;   // its arguments, e.g. {"train", "run.toml"}
  LaunchVia via = LaunchVia::mpirun;
  double stop_grace_s = 30;        // a failed run's other ranks get SIGTERM, then SIGKILL after this
};

// mpirun when this amber has MPI and mpirun is on PATH, else the environment.
LaunchVia default_launch_via();

// Runs the processes and returns the launcher's exit status: 0 when every rank exited
// 0, else the first failed rank's status (128 + its signal for a signal). Under mpirun
// this process becomes mpirun and returns only when it could not be started (an Error).
int launch_local(const LocalLaunch& launch);

}  // namespace amber::dist
