#include "cli/usage.h"

#include <vector>

#include "amber/core/nearest_name.h"

namespace amber::cli {
namespace {

std::string with_suggestion(std::string message, const std::string& word, const std::vector<std::string>& names) {
  if (const std::string near = nearest_name(word, names); !near.empty()) message += "; did you mean '" + near + "'?";
  return message;
}

}  // namespace

std::string unknown_name(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* level = &app;
  std::string path = "amber";
  bool commands_done = false;  // past the command names: the rest are arguments and options
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return "";  // what follows are arguments, whatever they look like
    if (word.rfind("--", 0) == 0) {
      const std::string name = word.substr(0, word.find('='));
      if (level->get_option_no_throw(name) != nullptr) continue;
      std::vector<std::string> names;
      for (const CLI::Option* option : level->get_options())
        for (const std::string& long_name : option->get_lnames()) names.push_back("--" + long_name);
      return with_suggestion("'" + name + "' is not an option of " + path, name, names) + " (" + path +
             " --help lists them)";
    }
    if (word.empty() || word[0] == '-' || commands_done) continue;
    const std::vector<CLI::App*> commands = level->get_subcommands([](CLI::App*) { return true; });
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
    // A level without required commands takes this word as an argument.
    if (commands.empty() || level->get_require_subcommand_min() == 0) {
      commands_done = true;
      continue;
    }
    std::string message = with_suggestion("'" + word + "' is not a command of " + path, word, names) + " (commands: ";
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
