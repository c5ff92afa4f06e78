// The `amber` command line: parses arguments and wires subcommands; no logic lives here.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "amber/core/error.h"
#include "cli/blas_kernels.h"
#include "cli/commands.h"
#include "cli/usage.h"

int main(int argc, char** argv) {
  amber::cli::restart_with_wider_blas_kernels(argv);
  CLI::App app{"amber: pre-training engine for decoder-only language models (CPU and CUDA)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "amber 0.1.0");
  amber::cli::add_info_command(app);
  amber::cli::add_tokenizer_command(app);
  amber::cli::add_tokenize_command(app);
  amber::cli::add_train_command(app);
  amber::cli::add_sample_command(app);
  amber::cli::add_export_command(app);
  amber::cli::add_eval_command(app);
  amber::cli::add_bench_command(app);
  amber::cli::add_plot_command(app);
  amber::cli::add_launch_command(app);
  amber::cli::use_amber_error_format(app);
  if (const std::string unknown = amber::cli::unknown_name(app, argc, argv); !unknown.empty()) {
    std::cerr << "amber: error: " << unknown << "\n";
    return amber::cli::kUsageError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return amber::cli::report_parse_error(app, e);
  } catch (const amber::Error& e) {
    std::cerr << "amber: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "amber: error: out of memory: a size in the input or the config is larger than this machine can "
                 "allocate\n";
    return 1;
  } catch (const std::exception& e) {
    // Library errors that amber's checks did not turn into an amber::Error (a filesystem
    // or JSON failure): still a message and an exit status, never an abort.
    std::cerr << "amber: error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "amber: error: unexpected failure of unknown type\n";
    return 1;
  }
  return 0;
}
