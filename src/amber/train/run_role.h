// RunRole: this process's place among a run's processes, and the one place that says
// what follows from it: which process writes metrics.jsonl, the console lines, the run's
// config and its checkpoints, and so holds the lock on out_dir. A single process is rank 0 of 1; data parallel sets the
// rank and world size from its communicator.
#pragma once

namespace amber {

struct RunRole {
  int rank = 0;
  int world_size = 1;

  // One process reports for the whole run: metrics.jsonl, config.toml and the console.
  bool writes_metrics() const { return rank == 0; }
  // One process writes checkpoints (they hold whole-model names, so any split loads them).
  bool writes_checkpoints() const { return rank == 0; }
  // The process that writes into out_dir owns it for the run (RunLock).
  bool locks_out_dir() const { return rank == 0; }
  // One process evaluates and samples: every rank holds the same weights after a step,
  // so the others would only repeat its numbers.
  bool evaluates() const { return rank == 0; }
};

}  // namespace amber
