#!/usr/bin/env bash
# The loss-curve check: a config (configs/loss_curve_200m.toml unless CONFIG names
# another) trained on the GPU in bf16 (its steps) and on the CPU in f32 (the first 50
# steps), same seed and data order; prints both curves side by side and the largest gap
# over the shared steps. Further arguments are --set overrides for both runs, e.g. the
# MoE check:
#   CONFIG=configs/demo.toml bench/compare/loss_curve.sh build/amber 50 \
#     --set model.moe_experts=8 --set model.moe_top_k=2 --set model.moe_hidden=96 ...
# Usage: bench/compare/loss_curve.sh [AMBER_BINARY] [CPU_STEPS] [--set KEY=VALUE...]
#   (on a GPU machine, with data/fortunes made by scripts/demo)
set -euo pipefail
amber=${1:-build/amber}
cpu_steps=${2:-50}
overrides=("${@:3}")
config=${CONFIG:-configs/loss_curve_200m.toml}
rm -rf runs/loss_curve_gpu runs/loss_curve_cpu
"$amber" train "$config" --quiet "${overrides[@]}" --set train.device=cuda --set train.compute_dtype=bf16 \
  --set train.out_dir=runs/loss_curve_gpu
# train.device is "auto" by default, which on this machine is the GPU: the reference
# run names the CPU.
"$amber" train "$config" --quiet "${overrides[@]}" --set train.device=cpu --set train.steps="$cpu_steps" \
  --set train.out_dir=runs/loss_curve_cpu
python3 - "$cpu_steps" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r for r in map(json.loads, open(path)) if r.get("type") == "train"}
gpu, cpu = losses("runs/loss_curve_gpu/metrics.jsonl"), losses("runs/loss_curve_cpu/metrics.jsonl")
shared = sorted(set(gpu) & set(cpu))
print("| step | CPU f32 loss | GPU bf16 loss | GPU - CPU |\n|---|---|---|---|")
for s in shared:
    if s <= 5 or s % 5 == 0:
        print(f"| {s} | {cpu[s]['loss']:.4f} | {gpu[s]['loss']:.4f} | {gpu[s]['loss'] - cpu[s]['loss']:+.4f} |")
gap = max(abs(gpu[s]["loss"] - cpu[s]["loss"]) for s in shared)
print(f"largest |GPU - CPU| over steps 1-{shared[-1]}: {gap:.4f} nats")
last = max(gpu)
print(f"GPU step {last}: loss {gpu[last]['loss']:.4f}, {gpu[last]['tokens_per_s']:.0f} tokens/s")
PY
