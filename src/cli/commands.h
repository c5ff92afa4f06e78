// Subcommands of the `amber` binary; each adds itself to the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace amber::cli {

void add_info_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_plot_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_eval_command(CLI::App& app);

}  // namespace amber::cli
