#include "amber/dist/launch_env.h"

#include <cstdlib>

#include "amber/core/error.h"

namespace amber::dist {
namespace {

struct Variables {
  const char* rank;
  const char* world;
  const char* local;
  LaunchEnv::Launcher launcher;
};

// In this order: mpirun under Slurm sets both its own and Slurm's variables, and its own
// describe the MPI job (srun of a non-MPI step sets only Slurm's).
constexpr Variables kLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", LaunchEnv::Launcher::mpi},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", LaunchEnv::Launcher::mpi},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", LaunchEnv::Launcher::slurm},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", LaunchEnv::Launcher::torchrun},
};

int integer_variable(const char* name, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  AMBER_CHECK(*text && *end == 0 && value >= 0 && value < (1L << 30), "environment variable ", name, "='", text,
              "' is not a non-negative integer; fix or unset it (it is read to place this process in a run)");
  return static_cast<int>(value);
}

}  // namespace

std::string LaunchEnv::launcher_name() const {
  switch (launcher) {
    case Launcher::mpi: return "mpirun";
    case Launcher::slurm: return "srun";
    case Launcher::torchrun: return "torchrun-style environment (RANK, WORLD_SIZE)";
    case Launcher::none: break;
  }
  return "no launcher";
}

LaunchEnv detect_launch_env(const std::function<const char*(const char*)>& getenv) {
  const auto get = [&](const char* name) { return getenv ? getenv(name) : std::getenv(name); };
  LaunchEnv env;
  for (const Variables& v : kLaunchers) {
    const char* rank = get(v.rank);
    if (!rank) continue;
    const char* world = get(v.world);
    AMBER_CHECK(world, v.rank, " is set but ", v.world, " is not; a launcher sets both (unset ", v.rank,
                " to run a single process)");
    env.launcher = v.launcher;
    env.rank = integer_variable(v.rank, rank);
    env.world_size = integer_variable(v.world, world);
    const char* local = get(v.local);
    env.local_rank = local ? integer_variable(v.local, local) : env.rank;
    AMBER_CHECK(env.world_size >= 1 && env.rank < env.world_size, v.rank, "=", env.rank, " is not below ", v.world,
                "=", env.world_size, "; the launcher's variables disagree");
    break;
  }
  if (env.launcher == LaunchEnv::Launcher::torchrun) {
    const char* addr = get("MASTER_ADDR");
    const char* port = get("MASTER_PORT");
    env.master_addr = addr ? addr : "";
    env.master_port = port ? integer_variable("MASTER_PORT", port) : 0;
  }
  return env;
}

}  // namespace amber::dist
