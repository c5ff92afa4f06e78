// The run loop over its parts: RunData (batches, evaluation set, baseline), TrainStep
// (the device's work), MetricsSink (what is reported), Evaluator (held-out loss and
// sample previews) and Checkpointer (where the run starts and what it leaves).
#include "amber/train/trainer.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <optional>

#include "amber/core/cuda_runtime.h"
#include "amber/core/device.h"
#include "amber/dist/communicator.h"
#include "amber/export/hf_folder.h"
#include "amber/export/hf_weights.h"
#include "amber/model/flops.h"
#include "amber/ops/gemm.h"
#include "amber/train/checkpointer.h"
#include "amber/train/device_peaks.h"
#include "amber/train/evaluator.h"
#include "amber/train/metrics.h"
#include "amber/train/run_data.h"
#include "amber/train/run_lock.h"
#include "amber/train/run_role.h"
#include "amber/train/stop_signals.h"
#include "amber/train/zero_optimizer.h"

namespace amber {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// Each rank of a GPU run takes the card of its local rank, unless the config names one.
Device run_device(const RunConfig& c, const dist::LaunchEnv& launch) {
  const Device device = device_from_name(c.train.device);
  AMBER_CHECK(device.is_cpu() || cuda_available(), "train.device = '", c.train.device,
              "' but no CUDA device is visible to this amber; use train.device = \"cpu\"");
  if (device.is_cuda() && launch.distributed() && c.train.device.find(':') == std::string::npos)
    return Device::cuda(launch.local_rank);
  return device;
}

// A step issued to the device whose statistics the host has not logged yet.
struct Issued {
  std::vector<int32_t> lengths;  // of its documents, over its micro-batches
  double multiplier = 0;         // of the learning rates
  Clock::time_point start;       // from when its time counts
  Clock::time_point issued;      // when run() returned (on the CPU, the step's end)
  bool replayed = false;         // whether it ran as a replay of the captured CUDA graph
};

}  // namespace

struct Trainer::State {
  State(RunConfig run_config, TrainOptions train_options);

  const RunConfig config;
  const TrainOptions options;
  const dist::LaunchEnv launch;  // this process's place, as its launcher set it
  const Device device;
  const std::unique_ptr<dist::Communicator> comm;  // the run's processes (a world of one alone)
  const RunRole role;
  const MfuPeak mfu_peak;
  std::optional<RunLock> lock;  // this run owns out_dir from its start until run() returns
  MetricsSink sink;
  RunData data;
  std::unique_ptr<LanguageModel> model;
  std::optional<dist::StoreShard> shard;  // train.zero = 1: the parameters this rank updates
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainStep> train_step;  // the step's device work and its statistics
  Schedule schedule;
  Evaluator evaluator;
  std::optional<Checkpointer> checkpointer;
  RunProgress progress;
  int64_t issued_steps = 0;  // steps handed to the device, at least progress.step
  std::vector<data::Batch> micro;
  int stopped_by = 0;  // the signal that ended run() early, or 0
  const StopSignals* signals = nullptr;  // while run() runs: this process's, its vote in each step
  int agreed_stop = 0;  // a signal some rank received, from the statistics of a finished step
  double last_val_loss = NAN;

  void print_summary();
  Issued issue(Clock::time_point start);
  void finish(const Issued& step, const AccumulatedStep& acc, Clock::time_point end, CardTelemetry& cards);
  void finish_waited(const Issued& step, CardTelemetry& cards);
  Issued finish_while_next_runs(const Issued& running, CardTelemetry& cards);
  void evaluate();
  void preview_samples();
  void save_checkpoint();
};

Trainer::State::State(RunConfig run_config, TrainOptions train_options)
    : config(std::move(run_config)),
      options(std::move(train_options)),
      launch(dist::detect_launch_env()),
      device(run_device(config, launch)),
      comm(dist::connect_communicator(launch, device, {.timeout_s = config.train.comm_timeout_s})),
      role{comm->rank(), comm->world_size()},
      mfu_peak(amber::mfu_peak(config.train, device)),
      lock(role.locks_out_dir() ? std::optional<RunLock>(std::in_place, config.train.out_dir) : std::nullopt),
      sink(config, role, options.progress, mfu_peak.tflops),
      data(config, sink.console(), {role.rank, role.world_size, config.train.grad_accum}),
      evaluator(config, data) {
  const RunConfig& c = config;
  model = std::make_unique<LanguageModel>(c.model, DType::f32, device, dtype_from_name(c.train.compute_dtype));
  model->init_weights(c.train.seed);
  checkpointer.emplace(c, options.resume, options.resume_from, role);
  const bool resumed = checkpointer->resumes();
  // Into the whole store, before ZeRO-1 shards its master weights.
  if (!options.init_from.empty()) {
    AMBER_CHECK(!resumed, "--init-from starts a fresh run, but this run resumes (",
                options.resume_from.empty() ? "--resume" : "--resume-from " + options.resume_from,
                "); drop --init-from (the checkpoint holds the weights) or choose another train.out_dir");
    check_hf_config(options.init_from, c.model);
    load_hf_tensors(read_hf_tensors(options.init_from), *model, options.init_from);
    sink.console() << "weights from " << options.init_from << "\n";
  }
  if (c.train.zero == 1) {
    shard.emplace(model->store(), role.rank, role.world_size);
    const Placement& placement = model->store().placement();
    if (placement.compute != placement.master) model->store().keep_master_ranges(shard->ranges());
    optimizer = build_sharded_optimizer(c.optimizer, model->store(), *shard, *comm);
  } else {
    optimizer = build_optimizer(c.optimizer, model->store());
  }
  train_step = std::make_unique<TrainStep>(*model, optimizer.get(),
                                           StepOptions{.grad_clip = c.train.grad_clip,
                                                       .cuda_graph = c.train.cuda_graph,
                                                       .micro_batch_tokens = c.train.micro_batch_tokens,
                                                       .communicator = comm.get(),
                                                       .overlap_gradient_sums = c.train.overlap_grad_sums,
                                                       .shard = shard ? &*shard : nullptr});
  schedule = make_schedule(c.schedule, c.train.steps);
  // Beside the checkpoints, so a resumed run reads the choices it made before.
  const bool tune = c.train.gemm_tuning && device.is_cuda();
  set_gemm_tuning({.measured = tune, .file = tune ? (fs::path(c.train.out_dir) / "gemm_algorithms.tsv").string() : ""});
  if (resumed) {
    progress = checkpointer->restore(*model, *optimizer, *data.loader, sink.console());
    sink.console() << "resumed from " << checkpointer->resume_dir() << " at step " << progress.step << "\n";
  }
  sink.open(resumed, progress.step);
}

Trainer::Trainer(RunConfig config, TrainOptions options)
    : state_(std::make_unique<State>(std::move(config), std::move(options))) {}

Trainer::~Trainer() = default;

void Trainer::State::print_summary() {
  const RunConfig& c = config;
  const TrainConfig& t = c.train;
  std::ostream& out = sink.console();
  out << "model: " << model->parameter_count() / 1e6 << "M parameters"
      << (c.model.moe_experts > 0 ? concat(", ", count_active_parameters(c.model) / 1e6, "M active per token") : "")
      << " (dim " << c.model.dim << ", depth "
      << c.model.depth << ", heads " << c.model.heads << "/" << c.model.resolved_kv_heads() << ", vocab "
      << c.model.vocab_size << ") on " << model->device() << " in " << t.compute_dtype << "\n"
      << "optimizer " << c.optimizer.name << ", schedule " << c.schedule.kind << ":\n"
      << optimizer->describe() << "data: " << data.loader->num_chunks()
      << " training sequences (documents cut at data.max_seq_len; "
      << format_count(static_cast<double>(data.loader->tokens_per_epoch())) << " tokens per epoch), "
      << data.eval_batches.size() << " validation batches; "
      << (role.world_size > 1 ? concat(role.world_size, " processes (", comm->backend(), ") x ") : "")
      << t.grad_accum << " x " << t.micro_batch_tokens << " tokens per step\n"
      << mfu_peak.note << "\n";
  if (data.eval_batches.empty())
    out << "data: " << c.data.dir << " has no validation split, so nothing is evaluated (amber tokenize "
        << "--val-fraction above 0 makes one)\n";
  if (c.schedule.warmup_steps >= t.steps)
    out << "note: schedule.warmup_steps (" << c.schedule.warmup_steps << ") is not below train.steps (" << t.steps
        << "), so the learning rate never reaches its peak\n";
  if (progress.step >= t.steps)
    out << "nothing to train: the run is at step " << progress.step << " and train.steps is " << t.steps
        << " (raise train.steps to go on)\n";
}

Issued Trainer::State::issue(Clock::time_point start) {
  Issued step{{}, schedule(issued_steps), start, {}, false};
  for (data::Batch& b : micro) {
    b = data.loader->next();
    const std::vector<int32_t> l = b.seq.lengths();
    step.lengths.insert(step.lengths.end(), l.begin(), l.end());
  }
  train_step->run(micro, step.multiplier, data.loader->step_trained_tokens(), signals ? signals->received() : 0);
  step.issued = Clock::now();
  step.replayed = train_step->replayed();
  ++issued_steps;
  return step;
}

void Trainer::State::finish(const Issued& step, const AccumulatedStep& acc, Clock::time_point end,
                            CardTelemetry& cards) {
  if (!acc.applied) ++progress.skipped_steps;
  ++progress.step;
  // The ranks' votes are summed, so a rank that received no signal itself names the one
  // that arrived where a single rank voted, else the launcher's usual SIGTERM.
  if (acc.stop_votes > 0 && !agreed_stop) {
    const int mine = signals ? signals->received() : 0;
    agreed_stop = mine ? mine : acc.stop_votes < 64 ? static_cast<int>(acc.stop_votes) : SIGTERM;
  }
  progress.tokens_seen += acc.trained_tokens;
  std::vector<std::pair<std::string, double>> lr_groups = optimizer->learning_rates();
  for (auto& [group, lr] : lr_groups) lr *= step.multiplier;
  sink.log_step({.step = progress.step,
                 .stats = acc,
                 .lr = config.optimizer.lr * step.multiplier,
                 .lr_groups = std::move(lr_groups),
                 .seconds = std::chrono::duration<double>(end - step.start).count(),
                 .lengths = step.lengths,
                 .replayed = step.replayed,
                 .tokens_seen = progress.tokens_seen,
                 .skipped_steps = progress.skipped_steps,
                 .routing = model->routing_stats(acc.routing)},
                device, cards);
}

// Waits for the step's end, then logs it. The clock is read after the wait: as two
// arguments of one call, the compiler may read it first (g++ 12 did: a GPU run's last
// step logged 62 microseconds, 33 million tokens/s).
void Trainer::State::finish_waited(const Issued& step, CardTelemetry& cards) {
  const AccumulatedStep acc = train_step->read();
  finish(step, acc, Clock::now(), cards);
}

// Issues the next step, then logs the running one while the next runs; returns the next.
Issued Trainer::State::finish_while_next_runs(const Issued& running, CardTelemetry& cards) {
  Issued next = issue(Clock::now());
  const AccumulatedStep acc = train_step->previous();
  // On a GPU the running step is over once the next has begun, which previous() waited
  // for; the CPU ran it within its run().
  Clock::time_point end = running.issued;
  if (device.is_cuda()) end = next.start = Clock::now();
  finish(running, acc, end, cards);
  return next;
}

void Trainer::State::evaluate() {
  if (!role.evaluates() || !evaluator.has_eval_set()) return;
  const EvalResult e = evaluator.evaluate(*model);
  last_val_loss = e.loss;
  sink.log_eval(progress.step, e.loss, e.unigram, e.tokens);
}

void Trainer::State::preview_samples() {
  if (!role.evaluates()) return;
  sink.log_samples(progress.step, config.train.sample_prompts, evaluator.samples(*model, progress.step));
}

void Trainer::State::save_checkpoint() {
  if (const std::optional<std::string> path = checkpointer->save(progress, *model, *optimizer, *data.loader))
    sink.line() << "checkpoint: " << *path << "\n";
}

// Losses, norm, clipping and the decision to update stay on the device. The host
// issues step k + 1 before it reads and logs step k, so that loading batches and
// logging overlap the device's work. It waits for step k's end instead where it acts
// on the model after step k: an evaluation, samples, a checkpoint (whose loader state
// must not have moved on to step k + 1).
double Trainer::run() {
  State& s = *state_;
  const TrainConfig& t = s.config.train;
  s.print_summary();
  CardTelemetry cards(s.device);
  s.sink.begin_run(s.progress.step);
  s.issued_steps = s.progress.step;
  s.micro.assign(static_cast<size_t>(t.grad_accum), {});
  auto due = [](int64_t every, int64_t step) { return every > 0 && step % every == 0; };
  std::optional<Issued> running;
  const StopSignals stop_signals;
  s.signals = &stop_signals;
  while (s.progress.step < t.steps) {
    // A signal reaches every rank's loop with the same step's statistics (each step
    // carries every rank's vote), so all ranks stop after the same step; one that
    // arrives during the last step lets the run finish as it would have.
    if (s.agreed_stop && (running ? s.progress.step + 1 : s.progress.step) < t.steps) {
      // The step in flight is the last the loader gave out, so the checkpoint after it
      // resumes exactly where this run stops.
      if (running) s.finish_waited(*running, cards);
      s.save_checkpoint();
      s.stopped_by = s.agreed_stop;
      s.sink.console() << "stopped by signal " << s.agreed_stop << " after step " << s.progress.step
                       << "; continue with --resume\n";
      break;
    }
    if (!running) running = s.issue(Clock::now());
    const int64_t step = s.progress.step + 1;  // the running step's number
    const bool last = step == t.steps;
    const bool eval = due(t.eval_every, step) || last;
    const bool samples = due(t.sample_every, step) || (last && t.sample_every > 0);
    const bool checkpoint = due(t.checkpoint_every, step) || last;
    if (!eval && !samples && !checkpoint) {
      running = s.finish_while_next_runs(*running, cards);
      continue;
    }
    s.finish_waited(*running, cards);
    running.reset();
    if (eval) s.evaluate();
    if (samples) s.preview_samples();
    if (checkpoint) s.save_checkpoint();
  }
  s.signals = nullptr;
  s.lock.reset();  // the run writes nothing more into out_dir
  return s.last_val_loss;
}

int Trainer::stopped_by() const { return state_->stopped_by; }

}  // namespace amber
