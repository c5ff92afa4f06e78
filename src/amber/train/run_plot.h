// `amber plot`'s figure: the metrics.jsonl of one or more runs drawn as one SVG, runs
// overlaid in their own colours: train loss, validation loss beside the unigram baseline,
// learning rate, tokens/s and MFU, against steps or hours of the run (elapsed_s).
#pragma once

#include <string>
#include <vector>

namespace amber {

enum class PlotAxis { steps, hours };

// Each run is a run folder (train.out_dir) or its metrics.jsonl; a run's name in the
// legend is its folder's.
std::string plot_runs(const std::vector<std::string>& runs, PlotAxis x);

}  // namespace amber
