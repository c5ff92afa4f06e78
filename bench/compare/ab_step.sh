#!/usr/bin/env bash
# Two amber binaries' whole-step times on the same rungs, measured by this one script on
# one card: the binaries alternate (old, new, old, new, ...) and each figure is the
# median of REPEATS processes. A change meant to leave the step's speed alone (a
# restructuring) is held to it this way. Both read one GEMM tuning file per rung, made
# by an untimed run of the old binary, so both run the same cuBLASLt algorithms.
# Usage: bench/compare/ab_step.sh OLD_AMBER NEW_AMBER [RUNG...]   (on a GPU machine)
#   RUNG: preset:documents (default: kohaku-500m:2048 kohaku-200m:50-600)
#   REPEATS (env, default 3), STEPS (default 50), WARMUP (default 30)
set -euo pipefail
old=$1
new=$2
rungs=("${@:3}")
((${#rungs[@]})) || rungs=(kohaku-500m:2048 kohaku-200m:50-600)
repeats=${REPEATS:-3}
steps=${STEPS:-50}
warmup=${WARMUP:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
step_ms() { sed -n 's/.*step \([0-9.]*\) ms.*/\1/p' <<<"$1"; }
median() { printf '%s\n' "$@" | sort -g | awk -v n=$# 'NR == int((n + 1) / 2)'; }
echo "| rung | documents | binary | step times in run order (ms) | median (ms) |"
echo "|---|---|---|---|---|"
for rung in "${rungs[@]}"; do
  name=${rung%%:*}
  docs=${rung#*:}
  run=(bench step --config "$root/configs/presets/$name.toml" --tokens 16384 --doc-len "$docs"
       --steps "$steps" --warmup "$warmup" --dtype bf16)
  tuning=$(mktemp -u)
  "$old" "${run[@]}" --gemm-tuning "$tuning" >/dev/null 2>&1
  old_ms=()
  new_ms=()
  for ((r = 0; r < repeats; ++r)); do
    old_ms+=("$(step_ms "$("$old" "${run[@]}" --gemm-tuning "$tuning" 2>&1 | tail -1)")")
    new_ms+=("$(step_ms "$("$new" "${run[@]}" --gemm-tuning "$tuning" 2>&1 | tail -1)")")
  done
  rm -f "$tuning"
  o=$(median "${old_ms[@]}")
  n=$(median "${new_ms[@]}")
  echo "| $name | $docs | old ($old) | ${old_ms[*]} | $o |"
  echo "| $name | $docs | new ($new) | ${new_ms[*]} | $n |"
  echo "| $name | $docs | new / old | | $(awk -v a="$n" -v b="$o" 'BEGIN { printf "%.4f", a / b }') |"
done
