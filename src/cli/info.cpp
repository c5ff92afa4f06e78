// `amber info`: what this build can do, and for a config, the model it resolves to.
#include <iostream>

#include "amber/core/device.h"
#include "cli/commands.h"

namespace amber::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show build capabilities");
  cmd->callback([] {
#ifdef AMBER_WITH_CUDA
    std::cout << "CUDA backend: compiled in; devices visible: " << (cuda_available() ? "yes" : "no") << "\n";
#else
    std::cout << "CUDA backend: not compiled in (CPU only)\n";
#endif
  });
}

}  // namespace amber::cli
