#include "amber/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "amber/model/flops.h"

namespace amber {
namespace fs = std::filesystem;

namespace {

// A record's numbers as scalars tagged <type>/<key> (nested keys joined by "/", a list
// of MoE layers by each layer's name), a sample record's previews as text.
void add_scalars(TensorBoardWriter& out, const std::string& tag, const nlohmann::json& value, int64_t step,
                 double wall_time) {
  if (value.is_number()) {
    out.scalar(tag, step, value.get<double>(), wall_time);
  } else if (value.is_object()) {
    for (const auto& [key, item] : value.items()) add_scalars(out, tag + "/" + key, item, step, wall_time);
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const nlohmann::json& item = value[i];
      const bool named = item.is_object() && item.contains("layer") && item["layer"].is_string();
      add_scalars(out, tag + "/" + (named ? item["layer"].get<std::string>() : std::to_string(i)), item, step,
                  wall_time);
    }
  }
}

void write_tensorboard(TensorBoardWriter& out, const nlohmann::json& record) {
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t step = record["step"].get<int64_t>();
  const std::string type = record.value("type", std::string("record"));
  if (type == "sample") {
    const nlohmann::json& samples = record["samples"];
    for (size_t i = 0; i < samples.size(); ++i)
      out.text("samples/" + std::to_string(i), step,
               samples[i].value("prompt", std::string()) + samples[i].value("text", std::string()), wall_time);
  } else {
    for (const auto& [key, value] : record.items())
      if (key != "step" && key != "elapsed_s") add_scalars(out, type + "/" + key, value, step, wall_time);
  }
  out.flush();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = static_cast<int64_t>(seconds);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  return out.str();
}

// 512 MiB, 17.0 GiB.
std::string format_megabytes(double mb) {
  std::ostringstream out;
  out << std::fixed;
  if (mb < 1024) out << std::setprecision(0) << mb << " MiB";
  else out << std::setprecision(1) << mb / 1024 << " GiB";
  return out.str();
}

// Keeps the records of the metrics file at `path` up to `step`, writing them to a
// temporary file that then replaces it (so a failure leaves the file as it was), and
// returns the elapsed_s of the last record kept (0 without one). A line that is not a
// record (cut short by a kill mid-write) goes with the records after the step.
double keep_records_through(const fs::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return 0;  // the interrupted process logged nothing
  const fs::path temporary = path.string() + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(temporary, std::ios::trunc);
  AMBER_CHECK(out, "cannot write ", temporary.string(), " (to drop the records after step ", step, " from ",
              path.string(), "); check the folder's permissions and free space");
  double elapsed = 0;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer() ||
        record["step"].get<int64_t>() > step)
      continue;
    if (record.contains("elapsed_s") && record["elapsed_s"].is_number()) elapsed = record["elapsed_s"].get<double>();
    out << line << "\n";
  }
  out.close();
  AMBER_CHECK(out, "cannot write ", temporary.string(), " (to drop the records after step ", step, " from ",
              path.string(), "); check the free space");
  fs::rename(temporary, path);
  return elapsed;
}

double peak_memory_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

std::string format_count(double x) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (x >= 1e9) out << x / 1e9 << "G";
  else if (x >= 1e6) out << x / 1e6 << "M";
  else if (x >= 1e3) out << x / 1e3 << "k";
  else out << x;
  return out.str();
}

CardTelemetry::CardTelemetry(Device device) : device_(device) {
  if (device_.is_cuda()) cuda::start_card_sampling(device_.index);
}

CardTelemetry::~CardTelemetry() { cuda::stop_card_sampling(); }

cuda::CardState CardTelemetry::take(bool again) {
  if (!device_.is_cuda()) return {};
  const cuda::CardState card = cuda::stop_card_sampling();
  if (again) cuda::start_card_sampling(device_.index);
  return card;
}

MetricsSink::MetricsSink(const RunConfig& config, RunRole role, bool progress, double peak_tflops)
    : config_(config),
      role_(role),
      progress_(progress),
      peak_tflops_(peak_tflops),
      terminal_(isatty(fileno(stdout)) != 0),
      line_start_(terminal_ ? "\r\033[K" : ""),
      process_start_(std::chrono::steady_clock::now()) {}

void MetricsSink::open(bool resumed, int64_t resumed_step) {
  if (!role_.writes_metrics()) return;
  const fs::path dir(config_.train.out_dir);
  const fs::path path = dir / "metrics.jsonl";
  if (resumed) elapsed_before_ = keep_records_through(path, resumed_step);
  metrics_.open(path, resumed ? std::ios::app : std::ios::trunc);
  AMBER_CHECK(metrics_, "cannot write ", path.string());
  log_buffer_.open((dir / "train.log").string(), resumed);
  if (config_.train.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>((dir / "tensorboard").string());
  std::ofstream(dir / "config.toml") << run_config_to_toml(config_);
}

void MetricsSink::begin_run(int64_t first_step) {
  run_start_ = std::chrono::steady_clock::now();
  first_step_ = first_step;
}

void MetricsSink::log_json(nlohmann::json record) {
  if (!role_.writes_metrics()) return;
  record["time"] = utc_timestamp(std::chrono::system_clock::now());
  record["elapsed_s"] =
      elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - process_start_).count();
  // A sample preview may end inside a UTF-8 character (a byte-level model emits bytes):
  // such bytes are written as U+FFFD rather than failing the run.
  metrics_ << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  metrics_.flush();
  if (tensorboard_ && record.contains("step")) write_tensorboard(*tensorboard_, record);
}

void MetricsSink::log_step(const FinishedStep& step, Device device, CardTelemetry& cards) {
  const TrainConfig& t = config_.train;
  const AccumulatedStep& acc = step.stats;
  const bool skip = !acc.applied;
  if (skip)
    line() << "step " << step.step << ": "
           << (acc.trained_tokens == 0 ? "no trained tokens" : "non-finite loss or gradient norm")
           << ", update skipped (" << step.skipped_steps << " skipped so far)\n";
  const double per_token = static_cast<double>(acc.trained_tokens);
  const double loss = acc.trained_tokens > 0 ? acc.loss_sum / per_token : NAN;
  int64_t step_tokens = 0;
  for (int32_t l : step.lengths) step_tokens += l;
  const double tokens_per_s = static_cast<double>(step_tokens) / step.seconds;
  nlohmann::json record = {{"type", "train"},
                           {"step", step.step},
                           {"loss", loss},
                           {"z_loss", acc.trained_tokens ? acc.z_loss_sum / per_token : 0.0},
                           {"lr", step.lr},
                           {"grad_norm", acc.grad_norm},
                           {"grad_scale", acc.grad_scale},
                           {"tokens_per_s", tokens_per_s},
                           {"tokens_seen", step.tokens_seen},
                           {"step_time_s", step.seconds},
                           {"peak_memory_mb", peak_memory_mb()},
                           {"skipped", skip}};
  nlohmann::json& groups = record["lr_groups"] = nlohmann::json::object();
  for (const auto& [group, lr] : step.lr_groups) groups[group] = lr;
  if (device.is_cuda()) {
    record["device_peak_memory_mb"] = static_cast<double>(cuda::pool_peak_bytes(device.index)) / (1 << 20);
    record["graph_replay"] = step.replayed;
  }
  const bool logged_step = step.step % t.log_every == 0 || step.step == t.steps || step.step == first_step_ + 1;
  cuda::CardState card;  // not available: nothing sampled for this step
  if (logged_step) {
    card = cards.take(step.step < t.steps);
    if (card.available) {
      record["sm_mhz"] = card.sm_mhz;
      record["board_watts"] = card.watts;
    }
  }
  if (!step.routing.empty()) {
    // The worst layer in the headline fields, every layer under moe_layers.
    nlohmann::json layers = nlohmann::json::array();
    for (const RoutingStats& r : step.routing)
      layers.push_back({{"layer", r.layer},
                        {"max_over_mean", r.max_over_mean},
                        {"dead_experts", r.dead_experts},
                        {"bias_spread", r.bias_spread}});
    const RoutingSummary summary = summarize_routing(step.routing);
    record["moe_load_max_over_mean"] = summary.worst_max_over_mean;
    record["moe_dead_experts"] = summary.dead_experts;
    record["moe_bias_spread"] = summary.bias_spread;
    record["moe_layers"] = std::move(layers);
    record["router_loss"] = acc.trained_tokens ? acc.router_loss_sum / per_token : 0.0;
  }
  if (peak_tflops_ > 0) {
    const FlopCount f = count_flops(config_.model, step.lengths);
    record["mfu"] = f.model / step.seconds / (peak_tflops_ * 1e12);
    record["hfu"] = f.hardware / step.seconds / (peak_tflops_ * 1e12);
  }
  log_json(record);
  if (progress_ && logged_step) print_progress(step, record, card);
}

void MetricsSink::print_progress(const FinishedStep& step, const nlohmann::json& record,
                                 const cuda::CardState& card) {
  const TrainConfig& t = config_.train;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  const double eta = elapsed / static_cast<double>(step.step - first_step_) * static_cast<double>(t.steps - step.step);
  const int width = 24, filled = static_cast<int>(width * step.step / t.steps);
  std::ostream& out = line();
  out << "step " << std::setw(6) << step.step << "/" << t.steps << " ["
      << std::string(static_cast<size_t>(filled), '=') << std::string(static_cast<size_t>(width - filled), ' ')
      << "] loss " << std::fixed << std::setprecision(4) << record["loss"].get<double>() << " | lr "
      << std::scientific << std::setprecision(2) << step.lr << " | gnorm " << std::fixed << std::setprecision(3)
      << step.stats.grad_norm << " | " << format_count(record["tokens_per_s"].get<double>()) << " tok/s";
  if (record.contains("mfu")) out << " | MFU " << std::setprecision(1) << 100 * record["mfu"].get<double>() << "%";
  if (record.contains("moe_load_max_over_mean"))
    out << " | experts max/mean " << std::setprecision(2) << record["moe_load_max_over_mean"].get<double>() << ", "
        << record["moe_dead_experts"].get<int>() << " dead";
  // Memory at its peak so far: the device pool's on a GPU, the process's resident set on the CPU.
  const double mb = record.value("device_peak_memory_mb", record["peak_memory_mb"].get<double>());
  out << " | mem " << format_megabytes(mb);
  if (card.available) out << " | " << std::setprecision(0) << card.sm_mhz << " MHz " << card.watts << " W";
  out << " | ETA " << format_duration(eta) << std::flush;
  if (!terminal_ || step.step % (t.log_every * 10) == 0 || step.step == t.steps) out << "\n";
}

void MetricsSink::log_eval(int64_t step, double val_loss, double unigram_loss, int64_t val_tokens) {
  line() << "eval @ step " << step << ": val loss " << std::fixed << std::setprecision(4) << val_loss << " (ppl "
         << std::setprecision(1) << std::exp(val_loss) << ")  unigram baseline " << std::setprecision(4)
         << unigram_loss << "  gap " << unigram_loss - val_loss << " nats\n";
  log_json({{"type", "eval"}, {"step", step}, {"val_loss", val_loss}, {"perplexity", std::exp(val_loss)},
            {"unigram_loss", unigram_loss}, {"val_tokens", val_tokens}});
}

void MetricsSink::log_samples(int64_t step, const std::vector<std::string>& prompts,
                              const std::vector<std::string>& texts) {
  line() << "samples @ step " << step << ":\n";
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    console() << "  [" << prompts[i] << "]" << texts[i] << "\n";
    samples.push_back({{"prompt", prompts[i]}, {"text", texts[i]}});
  }
  log_json({{"type", "sample"}, {"step", step}, {"samples", std::move(samples)}});
}

}  // namespace amber
