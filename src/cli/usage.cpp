#include "cli/usage.h"

#include <vector>

#include "amber/core/nearest_name.h"

namespace amber::cli {

std::string unknown_command(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* level = &app;
  std::string path = "amber";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    // Options follow the command names; a level without commands takes arguments.
    const std::vector<CLI::App*> commands = level->get_subcommands([](CLI::App*) { return true; });
    if (word.empty() || word[0] == '-' || commands.empty()) return "";
    CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (CLI::App* command : commands) {
      if (command->check_name(word)) next = command;
      names.push_back(command->get_name());
    }
    if (next) {
      level = next;
      path += " " + word;
      continue;
    }
    if (level->get_require_subcommand_min() == 0) return "";
    std::string message = "'" + word + "' is not a command of " + path;
    if (const std::string near = nearest_name(word, names); !near.empty())
      message += "; did you mean '" + near + "'?";
    message += " (commands: ";
    for (size_t n = 0; n < names.size(); ++n) message += (n ? ", " : "") + names[n];
    return message + "; " + path + " --help describes them)";
  }
  return "";
}

void use_amber_error_format(CLI::App& app) {
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("amber: error: ") + e.what() + " (--help shows the usage)\n";
  });
}

int report_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  const int status = app.exit(e);
  if (e.get_name() == "RuntimeError" || status == 0) return status;
  return kUsageError;
}

}  // namespace amber::cli
