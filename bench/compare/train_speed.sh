#!/usr/bin/env bash
# `amber train`'s own speed, which the step bench does not see: the host's loading,
# staging and logging between steps. Trains Kohaku-200M (65536-token vocabulary) on the
# fortunes corpus in 16384-token micro-batches, bf16 on the GPU, once per binary given,
# the binaries alternating over REPEATS rounds; prints each run's median tokens/s and
# step time over the steps after the first WARMUP (the card's power-capped steady state).
# Usage: bench/compare/train_speed.sh AMBER_BINARY [AMBER_BINARY...]  (on a GPU machine,
# with data/fortunes made by scripts/demo)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 AMBER_BINARY [AMBER_BINARY...]" >&2; exit 2; }
steps=${STEPS:-120}
warmup=${WARMUP:-40}
repeats=${REPEATS:-2}
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
echo "| binary | round | median tokens/s | median step ms |"
echo "|---|---|---|---|"
for round in $(seq 1 "$repeats"); do
  for amber in "$@"; do
    out="$runs/run"
    rm -rf "$out"
    "$amber" train configs/loss_curve_200m.toml --quiet --set model.vocab_size=65536 \
      --set train.micro_batch_tokens=16384 --set data.max_seq_len=2048 --set train.steps="$steps" \
      --set train.device=cuda --set train.compute_dtype=bf16 --set train.out_dir="$out" >/dev/null
    python3 - "$out/metrics.jsonl" "$warmup" "$amber" "$round" <<'PY'
import json, statistics, sys
path, warmup, binary, round_ = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
steps = [r for r in map(json.loads, open(path)) if r.get("type") == "train" and r["step"] > warmup]
tps = statistics.median(r["tokens_per_s"] for r in steps)
ms = 1e3 * statistics.median(r["step_time_s"] for r in steps)
print(f"| {binary} | {round_} | {tps:,.0f} | {ms:.2f} |")
PY
  done
done
