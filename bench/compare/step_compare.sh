#!/usr/bin/env bash
# The whole-step comparison of issue 5: amber's `bench step` and the PyTorch
# reference (bench/compare/step_torch.py) on the same rungs and batch shapes, run one
# after the other by this one script; prints a markdown table (hardware first).
# Usage: bench/compare/step_compare.sh [AMBER_BINARY [RUNG...]]   (on a GPU machine)
#   RUNG: preset:documents, e.g. kohaku-200m:50-600 (default: every rung below and
#   Kohaku-1B; naming rungs skips Kohaku-1B unless kohaku-1b:2048 is named)
set -euo pipefail
amber=${1:-build/amber}
wanted=("${@:2}")
picked() { [ ${#wanted[@]} -eq 0 ] || [[ " ${wanted[*]} " == *" $1 "* ]]; }
# Timed in the card's steady state: an H200 under this load reaches its 700 W power
# cap within a second or two and lowers its clocks (Kohaku-200M on 50-600, fc5f14d:
# amber 35.5 ms a step over 10 steps after 3, 36.9 over 80; its SM clock 1594 MHz at
# 670 W against PyTorch's 1844 MHz at 647 W), so each arm runs WARMUP untimed steps and
# then 2 more seconds of them (both tools' --warmup-seconds default) before the STEPS
# it times. Before fc5f14d (2026-12-04) runs timed 10 steps after 3 (STEPS=10 WARMUP=3, and
# --warmup-seconds 0 in both tools for their exact method).
steps=${STEPS:-50}
warmup=${WARMUP:-30}
# Both arms clip the global gradient norm as training does by default (train.grad_clip
# 1.0; PyTorch's torch.nn.utils.clip_grad_norm_ before its fused AdamW). Before 9899652
# (2026-12-04) neither arm clipped (GRAD_CLIP=0 gives that comparison again).
clip=${GRAD_CLIP:-1.0}
# Each arm's figure is the median of REPEATS processes, the arms alternating (amber,
# PyTorch, amber, ...): a process's step time varies by up to about 1% on one card
# (docs/perf/step.md, d4410ab and 7cafaa4). Before 7cafaa4 every figure was one process
# (REPEATS=1, the default). An odd count gives a true median.
repeats=${REPEATS:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# The MoE rungs pass their sparse layers' shape to the PyTorch arm after the documents
# (amber reads it from the preset).
#        preset         dim  depth heads kv hidden  documents
rungs=("kohaku-500m    1280 22    20    4  3456    2048"
       "kohaku-200m    768  17    12    2  2048    2048"
       "kohaku-200m    768  17    12    2  2048    50-600"
       "kohaku-moe-1b  768  16    12    2  2048    2048 --moe-experts 64 --moe-top-k 8 --moe-hidden 384"
       "kohaku-moe-2b  896  21    14    2  2432    2048 --moe-experts 64 --moe-top-k 8 --moe-hidden 512")
# The step time in ms from a result line ("... step 36.25 ms | ..."), or nothing.
step_ms() { sed -n 's/.*step \([0-9.]*\) ms.*/\1/p' <<<"$1"; }
# Of the result lines given, the one with the median step time (the lower middle for
# an even count).
median_line() {
  local line
  for line in "$@"; do printf '%s\t%s\n' "$(step_ms "$line")" "$line"; done |
    sort -g | awk -v n=$# 'NR == int((n + 1) / 2) { sub(/^[^\t]*\t/, ""); print }'
}
# The step times of the result lines given, in run order ("36.27 / 36.66 / 36.30 ms").
step_list() {
  local line out=""
  for line in "$@"; do out+="${out:+ / }$(step_ms "$line")"; done
  echo "$out ms"
}
# torch's step over amber's, to three decimals ("-" when either arm printed no step).
speedup() {
  local torch amber
  torch=$(step_ms "$1")
  amber=$(step_ms "$2")
  if [ -n "$torch" ] && [ -n "$amber" ]; then awk -v t="$torch" -v a="$amber" 'BEGIN { printf "%.3fx", t / a }'
  else echo "-"; fi
}
# Energy a step in J: the mean board power over the timed steps ("..., 691 W of 700 W")
# times the step time, one decimal ("-" when the line has either figure missing). With
# both arms at the card's power cap the speed-up is the ratio of these.
energy() {
  local watts ms
  watts=$(sed -n 's/.* \([0-9.]*\) W of [0-9.]* W.*/\1/p' <<<"$1")
  ms=$(step_ms "$1")
  if [ -n "$watts" ] && [ -n "$ms" ]; then awk -v w="$watts" -v m="$ms" 'BEGIN { printf "%.1f J", w * m / 1000 }'
  else echo "-"; fi
}
# The serial tells runs on different cards apart: the ratio differs by a few percent
# from card to card (docs/perf/step.md, 9b3b2ee to 7cafaa4).
card=$(nvidia-smi --query-gpu=name,serial,driver_version --format=csv,noheader | head -1 |
       awk -F', ' '{ print $1 " (serial " $2 ", driver " $3 ")" }')
echo "| $card | $(date -u +%F) | $steps steps timed after $warmup |"
echo "| rung | documents | arm | result |"
echo "|---|---|---|---|"
for rung in "${rungs[@]}"; do
  read -r name dim depth heads kv hidden docs moe <<<"$rung"
  read -ra moe <<<"$moe"
  picked "$name:$docs" || continue
  # Measured GEMM algorithms, as training runs by default (train.gemm_tuning): the
  # first run times cuBLASLt's answers and writes the file; amber's figure is from runs
  # that read it back, as a resumed training run does. Its informational arms run next,
  # then the two measured arms back to back (from 7cafaa4; before, the PyTorch arm
  # ran after amber's heuristic and eager arms).
  run=("$amber" bench step --config "$root/configs/presets/$name.toml" --tokens 16384 --doc-len "$docs"
       --steps "$steps" --warmup "$warmup" --dtype bf16 --set "train.grad_clip=$clip")
  tuning=$(mktemp -u)
  "${run[@]}" --gemm-tuning "$tuning" >/dev/null 2>&1
  h=$("${run[@]}" --heuristic-gemm 2>&1 | tail -1)
  e=$("${run[@]}" --no-graph 2>&1 | tail -1)
  amber_runs=()
  torch_runs=()
  for ((r = 0; r < repeats; ++r)); do
    amber_runs+=("$("${run[@]}" --gemm-tuning "$tuning" 2>&1 | tail -1)")
    torch_runs+=("$(python3 "$here/step_torch.py" --dim "$dim" --depth "$depth" --heads "$heads" --kv-heads "$kv" \
                    --mlp-hidden "$hidden" --tokens 16384 --doc-len "$docs" --steps "$steps" --warmup "$warmup" \
                    --grad-clip "$clip" "${moe[@]}" 2>&1 | tail -1)")
  done
  rm -f "$tuning"
  a=$(median_line "${amber_runs[@]}")
  t=$(median_line "${torch_runs[@]}")
  echo "| $name | $docs | amber (CUDA graph) | $a |"
  echo "| $name | $docs | amber (CUDA graph, cuBLASLt's heuristic GEMM algorithms) | $h |"
  echo "| $name | $docs | amber (eager) | $e |"
  echo "| $name | $docs | torch.compile | $t |"
  if ((repeats > 1)); then
    echo "| $name | $docs | each arm's $repeats processes, in run order: amber / torch.compile |" \
         "$(step_list "${amber_runs[@]}"); $(step_list "${torch_runs[@]}") |"
  fi
  echo "| $name | $docs | amber's speed-up (torch.compile's step / amber's CUDA-graph step) | $(speedup "$t" "$a") |"
  echo "| $name | $docs | energy a step (mean board power x step): torch.compile / amber's CUDA graph |" \
       "$(energy "$t") / $(energy "$a") |"
done
# Kohaku-1B has no PyTorch arm here: the issue asks only that it fits and runs at
# 16384-token micro-batches with recompute off.
picked kohaku-1b:2048 || exit 0
a=$("$amber" bench step --config "$root/configs/presets/kohaku-1b.toml" --tokens 16384 --doc-len 2048 \
    --steps "$steps" --warmup "$warmup" --dtype bf16 --set "train.grad_clip=$clip" 2>&1 | tail -1)
echo "| kohaku-1b | 2048 | amber | $a |"
