// The command line's conventions for what the user typed wrong: usage errors (an unknown
// option or command, a missing argument, a value that fails its check) exit with status
// 2, as POSIX tools and Python's argparse do, and a mistyped command or option name gets
// the nearest valid one. Status 1 stays for errors of the work itself (a bad config
// value, a truncated shard).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace amber::cli {

inline constexpr int kUsageError = 2;

// The first name in the arguments that `app` lacks, as an error with the nearest valid
// name: a command (or a command of a command: `tokenizer tarin`) where one is required,
// or a long option (`--stpes`) of the command it follows. Empty when every name is
// known; a word in a command's argument position is its argument, not checked here.
std::string unknown_name(CLI::App& app, int argc, const char* const* argv);

// Makes CLI11's parse errors read as amber's other errors ("amber: error: ...").
void use_amber_error_format(CLI::App& app);

// Prints the error (or the help or version asked for) and returns the exit status: 0
// for --help and --version, kUsageError for a usage error, and the status a command
// chose for itself (a CLI::RuntimeError: `amber train` stopped by a signal).
int report_parse_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace amber::cli
