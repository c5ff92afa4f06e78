#include "amber/train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "amber/core/cuda_runtime.h"
#include "amber/core/device.h"
#include "amber/data/loader.h"
#include "amber/data/prompts.h"
#include "amber/data/tokenize_corpus.h"
#include "amber/data/tokenizer_json.h"
#include "amber/gen/generate.h"
#include "amber/model/flops.h"
#include "amber/ops/gemm.h"
#include "amber/train/checkpoint.h"
#include "amber/train/stop_signals.h"

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

std::string format_count(double x) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (x >= 1e9) out << x / 1e9 << "G";
  else if (x >= 1e6) out << x / 1e6 << "M";
  else if (x >= 1e3) out << x / 1e3 << "k";
  else out << x;
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

struct Trainer::State {
  RunConfig config;
  TrainOptions options;
  std::optional<data::Tokenizer> tokenizer;
  std::optional<int32_t> bos, eos;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<LanguageModel> preview_model;  // a CPU copy for sample previews of a GPU run
  std::vector<std::vector<int32_t>> sample_prompts;  // train.sample_prompts encoded, bos first
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainStep> train_step;  // the step's device work and its statistics
  Schedule schedule;
  std::unique_ptr<data::Loader> loader;
  std::vector<data::Batch> eval_batches;
  std::vector<double> unigram_log_prob;  // train-split unigram model, add-one smoothed
  int64_t step = 0;
  int64_t tokens_seen = 0;
  int64_t skipped_steps = 0;
  int stopped_by = 0;  // the signal that ended run() early, or 0
  double last_val_loss = NAN;
  std::ofstream metrics;
  // A terminal gets one self-overwriting progress line; a log file gets plain lines.
  bool terminal = isatty(fileno(stdout)) != 0;
  const char* line_start = terminal ? "\r\033[K" : "";

  void log_json(const nlohmann::json& record) {
    metrics << record.dump() << "\n";
    metrics.flush();
  }
};

Trainer::Trainer(RunConfig config, TrainOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.options = std::move(options);
  const RunConfig& c = s.config;
  const Device device = device_from_name(c.train.device);
  AMBER_CHECK(device.is_cpu() || cuda_available(), "train.device = '", c.train.device,
              "' but no CUDA device is visible to this amber; use train.device = \"cpu\"");
  AMBER_CHECK(!c.data.dir.empty(), "data.dir is not set: point it at the output folder of `amber tokenize`");
  if (!c.data.tokenizer.empty()) s.tokenizer = data::load_tokenizer_json(c.data.tokenizer);
  const data::Tokenizer* tokenizer = s.tokenizer ? &*s.tokenizer : nullptr;
  s.bos = data::special_token_id(tokenizer, c.data.tokenizer, c.data.bos, "bos");
  s.eos = data::special_token_id(tokenizer, c.data.tokenizer, c.data.eos, "eos");
  if (s.tokenizer)
    AMBER_CHECK(s.tokenizer->vocab_size() <= c.model.vocab_size, "the tokenizer has ", s.tokenizer->vocab_size(),
                " tokens but model.vocab_size is ", c.model.vocab_size, "; raise model.vocab_size");

  const std::vector<std::string> train_shards = data::list_shards(c.data.dir, "train");
  const std::vector<std::string> val_shards = data::list_shards(c.data.dir, "val");
  AMBER_CHECK(!train_shards.empty(), "no training shards in ", c.data.dir, "; run `amber tokenize` first");
  AMBER_CHECK(c.train.sample_every == 0 || (s.tokenizer && !c.train.sample_prompts.empty()),
              "train.sample_every = ", c.train.sample_every, " needs data.tokenizer (to read the prompts and the ",
              "samples) and train.sample_prompts (\"\" samples after bos alone); or set train.sample_every = 0");
  // Encoded now, so that a prompt that cannot start a sample stops the run before its first step.
  for (const std::string& p : c.train.sample_every > 0 ? c.train.sample_prompts : std::vector<std::string>{})
    s.sample_prompts.push_back(data::prompt_ids(*s.tokenizer, s.bos, p, "train.sample_prompts"));
  data::LoaderConfig lc;
  lc.shards = train_shards;
  lc.token_budget = c.train.micro_batch_tokens;
  lc.max_seq_len = c.data.max_seq_len;
  lc.seed = c.train.seed;
  lc.bos_id = s.bos.value_or(-1);
  lc.eos_id = s.eos.value_or(-1);
  s.loader = std::make_unique<data::Loader>(lc);

  // A fixed evaluation set: the first eval_batches of the validation split in a
  // seed-0 order (at most one epoch), identical at every evaluation and across resumes.
  if (!val_shards.empty()) {
    data::LoaderConfig vc = lc;
    vc.shards = val_shards;
    vc.seed = 0;
    vc.prefetch = 0;
    data::Loader val(vc);
    int64_t tokens = 0;
    while (static_cast<int>(s.eval_batches.size()) < c.train.eval_batches && tokens < val.tokens_per_epoch()) {
      s.eval_batches.push_back(val.next());
      tokens += s.eval_batches.back().tokens.numel();
    }
  }
  // Checked now, not at the first evaluation, which may come hours into the run.
  for (const data::Batch& b : s.eval_batches) {
    const int32_t* ids = b.tokens.data<int32_t>();
    for (int64_t i = 0; i < b.tokens.numel(); ++i)
      AMBER_CHECK(ids[i] >= 0 && ids[i] < c.model.vocab_size, c.data.dir, ": validation token id ", ids[i],
                  " is outside model.vocab_size ", c.model.vocab_size,
                  "; the shards were made with a larger tokenizer");
  }
  // Unigram baseline from the training split's token counts.
  std::vector<double> counts(static_cast<size_t>(c.model.vocab_size), 1.0);
  double total = static_cast<double>(c.model.vocab_size);
  for (const std::string& path : train_shards) {
    const data::Shard shard = data::Shard::open(path, false);
    for (int64_t d = 0; d < shard.num_docs(); ++d)
      for (int32_t t : shard.document(d)) {
        AMBER_CHECK(t >= 0 && t < c.model.vocab_size, path, ": token id ", t, " is outside model.vocab_size ",
                    c.model.vocab_size, "; the shards were made with a larger tokenizer");
        counts[static_cast<size_t>(t)] += 1;
        total += 1;
      }
    const int64_t per_doc = (s.bos ? 1 : 0) + (s.eos ? 1 : 0);
    if (s.bos) counts[static_cast<size_t>(*s.bos)] += static_cast<double>(shard.num_docs());
    if (s.eos) counts[static_cast<size_t>(*s.eos)] += static_cast<double>(shard.num_docs());
    total += static_cast<double>(per_doc * shard.num_docs());
  }
  s.unigram_log_prob.resize(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) s.unigram_log_prob[i] = std::log(counts[i] / total);

  s.model = std::make_unique<LanguageModel>(c.model, DType::f32, device, dtype_from_name(c.train.compute_dtype));
  s.model->init_weights(c.train.seed);
  s.optimizer = build_optimizer(c.optimizer, s.model->params());
  s.train_step = std::make_unique<TrainStep>(*s.model, s.optimizer.get(),
                                             StepOptions{.grad_clip = c.train.grad_clip,
                                                         .cuda_graph = c.train.cuda_graph,
                                                         .micro_batch_tokens = c.train.micro_batch_tokens});
  s.schedule = make_schedule(c.schedule, c.train.steps);

  std::string resume_dir = s.options.resume_from;
  if (resume_dir.empty() && s.options.resume) resume_dir = latest_checkpoint(c.train.out_dir);
  AMBER_CHECK(!resume_dir.empty() || latest_checkpoint(c.train.out_dir).empty(), c.train.out_dir,
              " already holds checkpoints of an earlier run; continue it with --resume, or choose another "
              "train.out_dir (or remove the folder) to start afresh");
  fs::create_directories(c.train.out_dir);
  // Beside the checkpoints, so a resumed run reads the choices it made before.
  const bool tune = c.train.gemm_tuning && device.is_cuda();
  set_gemm_tuning({.measured = tune, .file = tune ? (fs::path(c.train.out_dir) / "gemm_algorithms.tsv").string() : ""});
  if (!resume_dir.empty()) {
    const nlohmann::json state = load_checkpoint(resume_dir, *s.model, s.optimizer.get());
    s.loader->restore(state.at("loader"));
    s.step = state.at("step").get<int64_t>();
    s.tokens_seen = state.at("tokens_seen").get<int64_t>();
    s.skipped_steps = state.value("skipped_steps", int64_t{0});
    std::cout << "resumed from " << resume_dir << " at step " << s.step << "\n";
    s.metrics.open(fs::path(c.train.out_dir) / "metrics.jsonl", std::ios::app);
  } else {
    s.metrics.open(fs::path(c.train.out_dir) / "metrics.jsonl", std::ios::trunc);
  }
  AMBER_CHECK(s.metrics, "cannot write ", (fs::path(c.train.out_dir) / "metrics.jsonl").string());
  std::ofstream(fs::path(c.train.out_dir) / "config.toml") << run_config_to_toml(c);
}

Trainer::~Trainer() = default;

namespace {

struct EvalResult {
  double loss = NAN, unigram = NAN;
  int64_t tokens = 0;
};

EvalResult evaluate(LanguageModel& model, const std::vector<data::Batch>& batches,
                    const std::vector<double>& unigram_log_prob) {
  EvalResult r;
  double loss = 0, unigram = 0;
  for (const data::Batch& b : batches) {
    const LMHead::Loss l = model.evaluate(b.tokens, b.targets, b.seq);
    loss += l.sum - l.z_loss_sum;  // report cross-entropy alone
    r.tokens += l.tokens;
    const int32_t* t = b.targets.data<int32_t>();
    for (int64_t i = 0; i < b.targets.numel(); ++i)
      if (t[i] != kNoTarget) unigram -= unigram_log_prob[static_cast<size_t>(t[i])];
  }
  if (r.tokens > 0) {
    r.loss = loss / static_cast<double>(r.tokens);
    r.unigram = unigram / static_cast<double>(r.tokens);
  }
  return r;
}

}  // namespace

double Trainer::run() {
  State& s = *state_;
  const RunConfig& c = s.config;
  const TrainConfig& t = c.train;
  std::cout << "model: " << s.model->parameter_count() / 1e6 << "M parameters (dim " << c.model.dim << ", depth "
            << c.model.depth << ", heads " << c.model.heads << "/" << c.model.resolved_kv_heads() << ", vocab "
            << c.model.vocab_size << ") on " << s.model->device() << " in " << c.train.compute_dtype << "\n"
            << "optimizer " << c.optimizer.name << ", schedule " << c.schedule.kind << ":\n"
            << s.optimizer->describe() << "data: " << s.loader->num_chunks()
            << " training sequences (documents cut at data.max_seq_len; "
            << format_count(static_cast<double>(s.loader->tokens_per_epoch())) << " tokens per epoch), "
            << s.eval_batches.size() << " validation batches; " << t.grad_accum << " x " << t.micro_batch_tokens
            << " tokens per step\n";
  if (s.eval_batches.empty())
    std::cout << "data: " << c.data.dir << " has no validation split, so nothing is evaluated (amber tokenize "
              << "--val-fraction above 0 makes one)\n";
  if (c.schedule.warmup_steps >= t.steps)
    std::cout << "note: schedule.warmup_steps (" << c.schedule.warmup_steps << ") is not below train.steps ("
              << t.steps << "), so the learning rate never reaches its peak\n";
  if (s.step >= t.steps)
    std::cout << "nothing to train: the run is at step " << s.step << " and train.steps is " << t.steps
              << " (raise train.steps to go on)\n";

  auto do_eval = [&] {
    if (s.eval_batches.empty()) return;
    const EvalResult e = evaluate(*s.model, s.eval_batches, s.unigram_log_prob);
    s.last_val_loss = e.loss;
    std::cout << s.line_start << "eval @ step " << s.step << ": val loss " << std::fixed << std::setprecision(4)
              << e.loss << " (ppl " << std::setprecision(1) << std::exp(e.loss) << ")  unigram baseline "
              << std::setprecision(4) << e.unigram << "  gap " << e.unigram - e.loss << " nats\n";
    s.log_json({{"type", "eval"}, {"step", s.step}, {"val_loss", e.loss}, {"unigram_loss", e.unigram},
                {"val_tokens", e.tokens}});
  };
  auto do_samples = [&] {
    GenerationConfig g;
    g.max_new_tokens = t.sample_tokens;
    g.eos_id = s.eos.value_or(-1);
    g.vocab_limit = s.tokenizer->vocab_size();  // a padded vocabulary's extra ids have no text
    g.sampling.temperature = 0.8;
    g.sampling.top_p = 0.95;
    g.sampling.seed = t.seed + static_cast<uint64_t>(s.step);
    // Generation runs on the CPU (its cached attention has no CUDA kernel yet): a GPU
    // run samples from a CPU copy of the current weights.
    LanguageModel* sampler = s.model.get();
    if (s.model->device().is_cuda()) {
      if (!s.preview_model) s.preview_model = std::make_unique<LanguageModel>(c.model);
      for (size_t i = 0; i < s.model->params().size(); ++i)
        s.preview_model->params()[i]->value.copy_from(s.model->params()[i]->value);
      sampler = s.preview_model.get();
    }
    const auto out = generate(*sampler, s.sample_prompts, g);
    std::cout << s.line_start << "samples @ step " << s.step << ":\n";
    for (size_t i = 0; i < out.size(); ++i) {
      std::vector<int32_t> ids = out[i];
      if (!ids.empty() && s.eos && ids.back() == *s.eos) ids.pop_back();
      std::cout << "  [" << t.sample_prompts[i] << "]" << s.tokenizer->decode(ids) << "\n";
    }
  };
  auto do_checkpoint = [&] {
    nlohmann::json state = {{"tokens_seen", s.tokens_seen},
                            {"skipped_steps", s.skipped_steps},
                            {"loader", s.loader->state_json()},
                            {"config", run_config_to_toml(c)}};
    const std::string path = save_checkpoint(t.out_dir, s.step, *s.model, *s.optimizer, state, t.keep_checkpoints);
    std::cout << s.line_start << "checkpoint: " << path << "\n";
  };

  using Clock = std::chrono::steady_clock;
  const auto run_start = Clock::now();
  const int64_t first_step = s.step;
  std::vector<data::Batch> micro(static_cast<size_t>(t.grad_accum));
  // On a GPU the card's SM clock and board power are sampled between logged steps: a
  // card at its power limit runs below its boost clock, which explains tokens/s that
  // sink over the first minute (docs/perf/step.md, session 19).
  const Device device = s.model->device();
  struct StopsSampling {  // however the loop ends, no sampling thread outlives it
    ~StopsSampling() { cuda::stop_card_sampling(); }
  } stops_sampling;
  if (device.is_cuda()) cuda::start_card_sampling(device.index);

  // A step issued to the device whose statistics the host has not logged yet.
  struct Issued {
    std::vector<int32_t> lengths;  // of its documents, over its micro-batches
    double multiplier = 0;         // of the learning rates
    Clock::time_point start;       // from when its time counts
    Clock::time_point issued;      // when run() returned (on the CPU, the step's end)
    bool replayed = false;         // whether it ran as a replay of the captured CUDA graph
  };
  int64_t issued_steps = s.step;
  auto issue = [&](Clock::time_point start) {
    Issued step{{}, s.schedule(issued_steps), start, {}, false};
    for (data::Batch& b : micro) {
      b = s.loader->next();
      const std::vector<int32_t> l = b.seq.lengths();
      step.lengths.insert(step.lengths.end(), l.begin(), l.end());
    }
    s.train_step->run(micro, step.multiplier);
    step.issued = Clock::now();
    step.replayed = s.train_step->replayed();
    ++issued_steps;
    return step;
  };
  auto log_step = [&](const Issued& step, const AccumulatedStep& acc, Clock::time_point end) {
    const double norm = acc.grad_norm;
    const double loss = acc.trained_tokens > 0 ? acc.loss_sum / static_cast<double>(acc.trained_tokens) : NAN;
    const bool skip = !acc.applied;
    if (skip) {
      ++s.skipped_steps;
      std::cout << s.line_start << "step " << s.step + 1 << ": "
                << (acc.trained_tokens == 0 ? "no trained tokens" : "non-finite loss or gradient norm")
                << ", update skipped (" << s.skipped_steps << " skipped so far)\n";
    }
    ++s.step;
    s.tokens_seen += acc.trained_tokens;
    const double seconds = std::chrono::duration<double>(end - step.start).count();
    int64_t step_tokens = 0;
    for (int32_t l : step.lengths) step_tokens += l;
    const double tokens_per_s = static_cast<double>(step_tokens) / seconds;
    nlohmann::json record = {{"type", "train"},
                             {"step", s.step},
                             {"loss", loss},
                             {"z_loss", acc.trained_tokens ? acc.z_loss_sum / static_cast<double>(acc.trained_tokens) : 0.0},
                             {"lr", c.optimizer.lr * step.multiplier},
                             {"grad_norm", norm},
                             {"grad_scale", acc.grad_scale},
                             {"tokens_per_s", tokens_per_s},
                             {"tokens_seen", s.tokens_seen},
                             {"step_time_s", seconds},
                             {"peak_memory_mb", peak_memory_mb()},
                             {"skipped", skip}};
    if (device.is_cuda()) {
      record["device_peak_memory_mb"] = static_cast<double>(cuda::pool_peak_bytes(device.index)) / (1 << 20);
      record["graph_replay"] = step.replayed;
    }
    const bool logged_step = s.step % t.log_every == 0 || s.step == t.steps || s.step == first_step + 1;
    cuda::CardState card;  // not available: nothing sampled for this step
    if (device.is_cuda() && logged_step) {
      card = cuda::stop_card_sampling();
      if (card.available) {
        record["sm_mhz"] = card.sm_mhz;
        record["board_watts"] = card.watts;
      }
      if (s.step < t.steps) cuda::start_card_sampling(device.index);
    }
    if (t.peak_tflops > 0) {
      const FlopCount f = count_flops(c.model, step.lengths);
      record["mfu"] = f.model / seconds / (t.peak_tflops * 1e12);
      record["hfu"] = f.hardware / seconds / (t.peak_tflops * 1e12);
    }
    s.log_json(record);
    if (s.options.progress && logged_step) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
      const double eta = elapsed / static_cast<double>(s.step - first_step) * static_cast<double>(t.steps - s.step);
      const int width = 24, filled = static_cast<int>(width * s.step / t.steps);
      std::cout << s.line_start << "step " << std::setw(6) << s.step << "/" << t.steps << " ["
                << std::string(static_cast<size_t>(filled), '=') << std::string(static_cast<size_t>(width - filled), ' ')
                << "] loss " << std::fixed << std::setprecision(4) << loss << " | lr " << std::scientific
                << std::setprecision(2) << c.optimizer.lr * step.multiplier << " | gnorm " << std::fixed
                << std::setprecision(3) << norm << " | " << format_count(tokens_per_s) << " tok/s";
      if (record.contains("mfu")) std::cout << " | MFU " << std::setprecision(1) << 100 * record["mfu"].get<double>() << "%";
      // Memory at its peak so far: the device pool's on a GPU, the process's resident set on the CPU.
      const double mb = record.value("device_peak_memory_mb", record["peak_memory_mb"].get<double>());
      std::cout << " | mem " << format_megabytes(mb);
      if (card.available) std::cout << " | " << std::setprecision(0) << card.sm_mhz << " MHz " << card.watts << " W";
      std::cout << " | ETA " << format_duration(eta) << std::flush;
      if (!s.terminal || s.step % (t.log_every * 10) == 0 || s.step == t.steps) std::cout << "\n";
    }
  };

  // Waits for the step's end, then logs it. The clock is read after the wait: as two
  // arguments of one call, the compiler may read it first (g++ 12 did: a GPU run's last
  // step logged 62 microseconds, 33 million tokens/s).
  auto log_finished = [&](const Issued& step) {
    const AccumulatedStep acc = s.train_step->read();
    log_step(step, acc, Clock::now());
  };

  // Losses, norm, clipping and the decision to update stay on the device. The host
  // issues step k + 1 before it reads and logs step k, so that loading batches and
  // logging overlap the device's work. It waits for step k's end instead where it acts
  // on the model after step k: an evaluation, samples, a checkpoint (whose loader state
  // must not have moved on to step k + 1).
  auto due = [](int64_t every, int64_t step) { return every > 0 && step % every == 0; };
  std::optional<Issued> running;
  const StopSignals stop_signals;
  while (s.step < t.steps) {
    if (!running) running = issue(Clock::now());
    // A signal during the last step lets the run finish as it would have.
    if (const int signal = stop_signals.received(); signal && s.step + 1 < t.steps) {
      // The step in flight is the last the loader gave out, so the checkpoint after it
      // resumes exactly where this run stops.
      log_finished(*running);
      do_checkpoint();
      s.stopped_by = signal;
      std::cout << "stopped by signal " << signal << " after step " << s.step << "; continue with --resume\n";
      break;
    }
    const int64_t step = s.step + 1;  // the running step's number
    const bool last = step == t.steps;
    const bool eval = due(t.eval_every, step) || last;
    const bool samples = due(t.sample_every, step) || (last && t.sample_every > 0);
    const bool checkpoint = due(t.checkpoint_every, step) || last;
    if (!eval && !samples && !checkpoint) {
      Issued next = issue(Clock::now());
      const AccumulatedStep acc = s.train_step->previous();
      // On a GPU the running step is over once the next has begun, which previous()
      // waited for; the CPU ran it within its run().
      Clock::time_point end = running->issued;
      if (device.is_cuda()) end = next.start = Clock::now();
      log_step(*running, acc, end);
      running = std::move(next);
      continue;
    }
    log_finished(*running);
    running.reset();
    if (eval) do_eval();
    if (samples) do_samples();
    if (checkpoint) do_checkpoint();
  }
  return s.last_val_loss;
}

int Trainer::stopped_by() const { return state_->stopped_by; }

}  // namespace amber
