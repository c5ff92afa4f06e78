// The `amber` command line: parses arguments and wires subcommands; no logic lives here.
#include <CLI/CLI.hpp>

#include <iostream>

#include "amber/core/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"amber: pre-training engine for decoder-only language models (CPU and CUDA)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "amber 0.1.0");
  amber::cli::add_info_command(app);
  amber::cli::add_tokenizer_command(app);
  amber::cli::add_tokenize_command(app);
  amber::cli::add_train_command(app);
  amber::cli::add_sample_command(app);
  amber::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const amber::Error& e) {
    std::cerr << "amber: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
