// `amber launch -n N -- <command>`: runs N ranks of an amber command on this machine.
#include <filesystem>

#include "amber/dist/local_launch.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct LaunchArgs {
  int processes = 1;
  std::string via;
  std::vector<std::string> command;
};

}  // namespace

void add_launch_command(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  auto* cmd = app.add_subcommand("launch", "Run N processes of an amber command on this machine as the ranks of "
                                           "one data-parallel run: amber launch -n 2 -- train run.toml "
                                           "(docs/distributed.md)");
  cmd->add_option("-n,--processes", args->processes, "Number of processes (ranks)")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--via", args->via,
                  "mpirun (Open MPI; needed for CPU ranks) or env (torchrun-style variables, for GPU ranks); "
                  "default: mpirun when this amber has MPI and mpirun is installed")
      ->check(CLI::IsMember({"mpirun", "env"}));
  cmd->add_option("command", args->command, "The amber command every rank runs, after --");
  cmd->callback([args] {
    dist::LocalLaunch launch;
    launch.processes = args->processes;
    launch.program = std::filesystem::read_symlink("/proc/self/exe").string();
    launch.args = args->command;
    launch.via = args->via.empty() ? dist::default_launch_via()
                                   : (args->via == "mpirun" ? dist::LaunchVia::mpirun : dist::LaunchVia::env);
    if (const int status = dist::launch_local(launch)) throw CLI::RuntimeError(status);
  });
}

}  // namespace amber::cli
