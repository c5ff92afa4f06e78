#include "amber/train/run_plot.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "amber/io/svg_chart.h"

namespace amber {
namespace fs = std::filesystem;
namespace {

struct Run {
  std::string label;
  std::vector<nlohmann::json> records;
};

// A run's records. The last line of a run still being written may be cut short, so it
// is left out when it is not JSON; any other line that is not JSON is an error.
Run read_run(const std::string& given) {
  const fs::path path = fs::is_directory(given) ? fs::path(given) / "metrics.jsonl" : fs::path(given);
  std::ifstream in(path);
  AMBER_CHECK(in, "cannot read ", path.string(),
              ": give a run folder (a run's train.out_dir, which holds metrics.jsonl) or a metrics.jsonl file");
  Run run{fs::absolute(path).lexically_normal().parent_path().filename().string(), {}};
  std::string line, unreadable;
  int64_t number = 0, unreadable_at = 0;
  while (std::getline(in, line)) {
    ++number;
    AMBER_CHECK(unreadable.empty(), path.string(), " line ", unreadable_at,
                " is not a JSON record; is it a metrics.jsonl that amber train wrote?");
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object()) run.records.push_back(std::move(record));
    else unreadable = line, unreadable_at = number;
  }
  return run;
}

double number_or_nan(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : NAN;
}

double x_of(const nlohmann::json& record, PlotAxis axis, const std::string& label) {
  if (axis == PlotAxis::steps) return number_or_nan(record, "step");
  AMBER_CHECK(record.contains("elapsed_s"), "run '", label, "' has records without elapsed_s (written by an amber ",
              "before runs recorded their time); plot it with --x steps");
  return number_or_nan(record, "elapsed_s") / 3600;
}

// The series of one metric of one run: the records of `type` that hold `key`, scaled.
ChartSeries series(const Run& run, int color, PlotAxis axis, const char* type, const char* key, double scale = 1,
                   bool dashed = false) {
  ChartSeries s{{}, {}, color, dashed};
  for (const nlohmann::json& r : run.records) {
    if (r.value("type", "") != type || !r.contains(key)) continue;
    s.x.push_back(x_of(r, axis, run.label));
    s.y.push_back(number_or_nan(r, key) * scale);
  }
  return s;
}

}  // namespace

std::string plot_runs(const std::vector<std::string>& runs, PlotAxis x) {
  AMBER_CHECK(!runs.empty(), "amber plot needs at least one run folder");
  std::vector<Run> read;
  for (const std::string& r : runs) read.push_back(read_run(r));
  // Runs in folders of one name (a/run, b/run) are told apart by the paths given.
  std::set<std::string> labels;
  for (const Run& r : read) labels.insert(r.label);
  if (labels.size() < read.size())
    for (size_t i = 0; i < read.size(); ++i) read[i].label = runs[i];

  const std::string x_label = x == PlotAxis::steps ? "step" : "hours of training (elapsed_s)";
  Chart chart{"amber: " + std::to_string(read.size()) + (read.size() == 1 ? " run" : " runs"),
              {{"train loss", x_label, {}},
               {"validation loss (dashed: unigram baseline)", x_label, {}},
               {"learning rate", x_label, {}},
               {"tokens/s", x_label, {}},
               {"MFU (%)", x_label, {}}},
              {},
              2};
  bool baseline = false;
  for (size_t i = 0; i < read.size(); ++i) {
    const Run& run = read[i];
    const int color = static_cast<int>(i);
    chart.panels[0].series.push_back(series(run, color, x, "train", "loss"));
    chart.panels[1].series.push_back(series(run, color, x, "eval", "val_loss"));
    ChartSeries unigram = series(run, color, x, "eval", "unigram_loss", 1, true);
    baseline = baseline || !unigram.x.empty();
    chart.panels[1].series.push_back(std::move(unigram));
    chart.panels[2].series.push_back(series(run, color, x, "train", "lr"));
    chart.panels[3].series.push_back(series(run, color, x, "train", "tokens_per_s"));
    chart.panels[4].series.push_back(series(run, color, x, "train", "mfu", 100));
    chart.legend.push_back({run.label, color, false});
  }
  if (baseline) chart.legend.push_back({"unigram baseline of the run in that colour", 7, true});
  return chart_to_svg(chart);
}

}  // namespace amber
