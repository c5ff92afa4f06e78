// `amber plot`: draws the metrics of one or more runs into an SVG file.
#include <fstream>
#include <iostream>

#include "amber/core/error.h"
#include "amber/train/run_plot.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct PlotArgs {
  std::vector<std::string> runs;
  std::string out;
  std::string x = "steps";
};

}  // namespace

void add_plot_command(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  auto* cmd = app.add_subcommand("plot", "Draw runs' train and validation loss, learning rate, tokens/s and MFU "
                                         "into one SVG, runs overlaid");
  cmd->add_option("runs", args->runs, "Run folders (train.out_dir) or metrics.jsonl files")->required();
  cmd->add_option("--out", args->out, "The SVG file to write")->required();
  cmd->add_option("--x", args->x, "The horizontal axis: steps, or hours of training (elapsed_s)")
      ->check(CLI::IsMember({"steps", "hours"}))
      ->capture_default_str();
  cmd->callback([args] {
    const std::string svg = plot_runs(args->runs, args->x == "hours" ? PlotAxis::hours : PlotAxis::steps);
    std::ofstream out(args->out, std::ios::trunc);
    AMBER_CHECK(out, "cannot write --out ", args->out);
    out << svg;
    out.close();
    AMBER_CHECK(out, "cannot write --out ", args->out, " (is the disk full?)");
    std::cout << "wrote " << args->out << " (" << args->runs.size() << (args->runs.size() == 1 ? " run)" : " runs)")
              << "\n";
  });
}

}  // namespace amber::cli
