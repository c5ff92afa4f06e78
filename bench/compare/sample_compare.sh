#!/usr/bin/env bash
# Generation on the GPU against the CPU path. Trains a Kohaku-200M checkpoint on the GPU
# in bf16 (configs/loss_curve_200m.toml at the preset's 65536-id vocabulary, the fortunes
# tokenizer's 4096 ids sampled), then continues 8 prompts greedily for TOKENS new
# tokens with `amber sample` on the CPU (f32) and on the GPU (f32 with and without the
# CUDA graph, bf16 with it), and once more on the GPU in f32 sampled at temperature 0.8,
# top-p 0.95. Prints each arm's decode time a step, the speed-up over the CPU, whether
# its text equals the CPU's, and `amber eval` beside the run's own logged val_loss. The
# training run previews samples on the GPU halfway and at its end.
# Usage: bench/compare/sample_compare.sh [AMBER_BINARY]
#   env: STEPS (training steps, 100), TOKENS (new tokens a prompt, 128), OUT (logs, sample-compare/)
#   (on a GPU machine, with data/fortunes made by scripts/demo)
set -euo pipefail
amber=${1:-build/amber}
steps=${STEPS:-100}
tokens=${TOKENS:-128}
out=${OUT:-sample-compare}
config=configs/loss_curve_200m.toml
mkdir -p "$out"
run="$out/run"
rm -rf "$run"
"$amber" train "$config" --quiet --set model.vocab_size=65536 --set train.device=cuda --set train.compute_dtype=bf16 --set train.steps="$steps" \
  --set train.eval_every="$steps" --set train.checkpoint_every="$steps" --set train.out_dir="$run" \
  --set train.sample_every=$((steps / 2)) --set 'train.sample_prompts=["The", "A man"]' > "$out/train.log" 2>&1
prompts=(--prompt "The" --prompt "A man" --prompt "Life is" --prompt "Never" --prompt "When the"
  --prompt "You will" --prompt "It is better to" --prompt "Computers")

arm() {  # name, then amber sample options
  local name=$1
  shift
  "$amber" sample --checkpoint "$run" "${prompts[@]}" --max-tokens "$tokens" --temperature 0 "$@" \
    > "$out/$name.txt" 2> "$out/$name.err"
}
arm cpu_f32 --device cpu --dtype f32
arm gpu_f32_graph --device cuda --dtype f32
arm gpu_f32_plain --device cuda --dtype f32 --no-graph
arm gpu_bf16_graph --device cuda --dtype bf16
# Sampled rather than greedy (the host's filters and draw over the 65536-id rows).
"$amber" sample --checkpoint "$run" "${prompts[@]}" --max-tokens "$tokens" --temperature 0.8 --top-p 0.95 --seed 1 \
  --device cuda --dtype f32 > "$out/gpu_f32_sampled.txt" 2> "$out/gpu_f32_sampled.err"

step_ms() { grep -oE '\(([0-9.]+) ms a step' "$out/$1.err" | grep -oE '[0-9.]+'; }
cpu_ms=$(step_ms cpu_f32)
echo "Kohaku-200M ($steps training steps), 8 prompts, $tokens greedy tokens each; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "| arm | decode ms a step (8 tokens) | speed-up over the CPU | text equals the CPU's |"
echo "|---|---|---|---|"
for name in cpu_f32 gpu_f32_graph gpu_f32_plain gpu_bf16_graph; do
  ms=$(step_ms "$name")
  same=$(cmp -s "$out/cpu_f32.txt" "$out/$name.txt" && echo yes || echo no)
  echo "| $name | $ms | $(awk -v c="$cpu_ms" -v g="$ms" 'BEGIN { printf "%.1fx", c / g }') | $same |"
done
for name in cpu_f32 gpu_f32_graph gpu_f32_plain gpu_bf16_graph gpu_f32_sampled; do
  echo "$name: $(tail -1 "$out/$name.err")"
done

logged=$(python3 -c "import json,sys; print([r['val_loss'] for r in map(json.loads, open(sys.argv[1])) if r['type'] == 'eval'][-1])" "$run/metrics.jsonl")
"$amber" eval --checkpoint "$run" > "$out/eval.txt" 2>&1
echo "previews during training: $(grep -c '"type":"sample"' "$run/metrics.jsonl") sample records"
echo "run's logged val_loss $logged; amber eval: $(grep -E '^val_loss|^perplexity|on cuda|on cpu' "$out/eval.txt" | tr '\n' ' ')"
