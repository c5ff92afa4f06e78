#!/usr/bin/env bash
# FP8's loss gap against bf16's seed-to-seed spread (issue 44): one config trained on
# the GPU in bf16 and with an FP8 recipe on its attention and MLP projections (and, for
# an MoE config, its routed experts), each with the same seeds (initialisation and data
# order), for STEPS steps; prints
# both arms' mean curves, every run's final losses, and the FP8 - bf16 gap of the means
# beside the spread (max - min) of the bf16 seeds. Further arguments are --set
# overrides for every run.
# Usage: bench/compare/fp8_loss_gap.sh [AMBER_BINARY] [STEPS] [--set KEY=VALUE...]
#   CONFIG (default configs/loss_curve_200m.toml: Kohaku-200M on the bundled corpus,
#   which scripts/demo makes in data/fortunes), SEEDS (default "1 2 3"),
#   TOKENS (micro-batch tokens, default 4096), RECIPE (the FP8 arm's attention and MLP
#   recipe, default fp8_block), EXPERT_RECIPE (its routed experts', default
#   compute_dtype; fp8_block_hp_wgrad for FP8 experts). An MoE run, e.g.:
#   RECIPE=fp8_block_hp_wgrad EXPERT_RECIPE=fp8_block_hp_wgrad bench/compare/fp8_loss_gap.sh
#     build/amber 1000 --set model.moe_experts=8 --set model.moe_top_k=2 --set model.moe_hidden=384
set -euo pipefail
amber=${1:-build/amber}
steps=${2:-1000}
overrides=("${@:3}")
config=${CONFIG:-configs/loss_curve_200m.toml}
seeds=(${SEEDS:-1 2 3})
tokens=${TOKENS:-4096}
fp8_recipe=${RECIPE:-fp8_block}
fp8_expert_recipe=${EXPERT_RECIPE:-compute_dtype}
root=runs/fp8_loss_gap
rm -rf "$root"
for seed in "${seeds[@]}"; do
  for arm in bf16 fp8; do
    recipe=compute_dtype expert_recipe=compute_dtype
    [ "$arm" = fp8 ] && recipe=$fp8_recipe expert_recipe=$fp8_expert_recipe
    "$amber" train "$config" --quiet "${overrides[@]}" --set train.device=cuda --set train.compute_dtype=bf16 \
      --set train.steps="$steps" --set train.seed="$seed" --set train.micro_batch_tokens="$tokens" \
      --set train.eval_every="$steps" --set train.eval_batches=16 --set model.attention_recipe=$recipe \
      --set model.mlp_recipe=$recipe --set model.expert_recipe=$expert_recipe --set train.out_dir="$root/$arm-$seed"
  done
done
python3 - "$root" "${seeds[@]}" <<'PY'
import json, statistics, sys
root, seeds = sys.argv[1], sys.argv[2:]
def records(arm, seed):
    return [json.loads(l) for l in open(f"{root}/{arm}-{seed}/metrics.jsonl")]
runs = {(arm, s): records(arm, s) for arm in ("bf16", "fp8") for s in seeds}
def train(arm, s):
    return {r["step"]: r["loss"] for r in runs[arm, s] if r.get("type") == "train"}
def val(arm, s):
    return [r["val_loss"] for r in runs[arm, s] if r.get("type") == "eval"][-1]
def tail_mean(arm, s, n=100):
    t = train(arm, s)
    last = sorted(t)[-n:]
    return sum(t[k] for k in last) / len(last)
steps = sorted(train("bf16", seeds[0]))
print("| step | bf16 mean loss | fp8 mean loss | fp8 - bf16 |\n|---|---|---|---|")
for k in steps:
    if k in (1, 10) or k % 100 == 0:
        b = statistics.mean(train("bf16", s)[k] for s in seeds)
        f = statistics.mean(train("fp8", s)[k] for s in seeds)
        print(f"| {k} | {b:.4f} | {f:.4f} | {f - b:+.4f} |")
print("\n| seed | bf16 val loss | fp8 val loss | bf16 train loss, last 100 steps | fp8 |\n|---|---|---|---|---|")
for s in seeds:
    print(f"| {s} | {val('bf16', s):.4f} | {val('fp8', s):.4f} | {tail_mean('bf16', s):.4f} | {tail_mean('fp8', s):.4f} |")
for what, f in (("val loss", val), ("train loss (last 100 steps)", tail_mean)):
    b = [f("bf16", s) for s in seeds]
    q = [f("fp8", s) for s in seeds]
    gap, spread = statistics.mean(q) - statistics.mean(b), max(b) - min(b)
    print(f"{what}: fp8 - bf16 = {gap:+.4f} nats (means of {len(seeds)} seeds); bf16 seed spread {spread:.4f}: "
          f"{'within' if abs(gap) <= spread else 'outside'} it")
for arm in ("bf16", "fp8"):
    rates = [r["tokens_per_s"] for s in seeds for r in runs[arm, s] if r.get("type") == "train"][-50:]
    print(f"{arm}: {statistics.mean(rates):.0f} tokens/s over its last logged steps")
PY
