#!/usr/bin/env bash
# The trainer with the step captured as a CUDA graph against the same run issued
# eagerly: configs/loss_curve_200m.toml on the GPU in bf16 for STEPS steps, with an
# evaluation every 20 steps (which moves the activation arena, so the graph is
# dropped and captured again). Prints the largest loss difference between the runs
# (0 when replay matches eager bit for bit), each run's tokens/s over its last 10 steps
# and the graph run's steps that ran eagerly (two before each capture).
# Usage: bench/compare/graph_train_check.sh [AMBER_BINARY] [STEPS]  (on a GPU machine,
# with data/fortunes made by scripts/demo)
set -euo pipefail
amber=${1:-build/amber}
steps=${2:-60}
config=configs/loss_curve_200m.toml
for mode in true false; do
  "$amber" train "$config" --quiet --set train.device=cuda --set train.compute_dtype=bf16 \
    --set train.steps="$steps" --set train.eval_every=20 --set train.cuda_graph="$mode" \
    --set train.out_dir="runs/graph_check_$mode"
done
python3 - <<'PY'
import json
def records(path):
    return [r for r in map(json.loads, open(path))]
graph, eager = (records(f"runs/graph_check_{m}/metrics.jsonl") for m in ("true", "false"))
train = lambda rs: {r["step"]: r for r in rs if r.get("type") == "train"}
evals = lambda rs: {r["step"]: r["val_loss"] for r in rs if r.get("type") == "eval"}
g, e = train(graph), train(eager)
gap = max(abs(g[s]["loss"] - e[s]["loss"]) for s in g)
print(f"steps {len(g)}: largest |graph - eager| train loss {gap:.3g}; "
      f"eval losses graph {evals(graph)} eager {evals(eager)}")
rate = lambda rs: sum(rs[s]["tokens_per_s"] for s in sorted(rs)[-10:]) / 10
print(f"tokens/s over the last 10 steps: graph {rate(g):.0f}, eager {rate(e):.0f}")
eager_steps = [s for s in sorted(g) if not g[s].get("graph_replay")]
print(f"graph run's steps not replayed (eager before a capture): {eager_steps}")
PY
