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

MetricsSink::MetricsSink(const RunConfig& config, RunRole role, bool progress)
    : config_(config),
      role_(role),
      progress_(progress),
      terminal_(isatty(fileno(stdout)) != 0),
      line_start_(terminal_ ? "\r\033[K" : "") {}

void MetricsSink::open(bool resumed) {
  if (!role_.writes_metrics()) return;
  const fs::path path = fs::path(config_.train.out_dir) / "metrics.jsonl";
  metrics_.open(path, resumed ? std::ios::app : std::ios::trunc);
  AMBER_CHECK(metrics_, "cannot write ", path.string());
  std::ofstream(fs::path(config_.train.out_dir) / "config.toml") << run_config_to_toml(config_);
}

void MetricsSink::begin_run(int64_t first_step) {
  run_start_ = std::chrono::steady_clock::now();
  first_step_ = first_step;
}

void MetricsSink::log_json(const nlohmann::json& record) {
  if (!role_.writes_metrics()) return;
  metrics_ << record.dump() << "\n";
  metrics_.flush();
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
    double worst = 0, spread = 0;
    int dead = 0;
    nlohmann::json layers = nlohmann::json::array();
    for (const RoutingStats& r : step.routing) {
      worst = std::max(worst, r.max_over_mean);
      spread = std::max(spread, r.bias_spread);
      dead += r.dead_experts;
      layers.push_back({{"layer", r.layer},
                        {"max_over_mean", r.max_over_mean},
                        {"dead_experts", r.dead_experts},
                        {"bias_spread", r.bias_spread}});
    }
    record["moe_load_max_over_mean"] = worst;
    record["moe_dead_experts"] = dead;
    record["moe_bias_spread"] = spread;
    record["moe_layers"] = std::move(layers);
    record["router_loss"] = acc.trained_tokens ? acc.router_loss_sum / per_token : 0.0;
  }
  if (t.peak_tflops > 0) {
    const FlopCount f = count_flops(config_.model, step.lengths);
    record["mfu"] = f.model / step.seconds / (t.peak_tflops * 1e12);
    record["hfu"] = f.hardware / step.seconds / (t.peak_tflops * 1e12);
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
  log_json({{"type", "eval"}, {"step", step}, {"val_loss", val_loss}, {"unigram_loss", unigram_loss},
            {"val_tokens", val_tokens}});
}

}  // namespace amber
