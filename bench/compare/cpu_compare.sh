#!/usr/bin/env bash
# The CPU step against PyTorch on the CPU: amber's `bench step --device cpu` (f32,
# AdamW, the gradient norm clipped at 1) and the PyTorch reference of the same model
# and batch (bench/compare/cpu_torch.py), eager and torch.compile, at the same thread
# count, the arms alternating; prints a markdown table (hardware first) and keeps every
# run's output in OUT (default docs/perf/data/cpu-compare-DATE-COMMIT.txt).
# Usage: bench/compare/cpu_compare.sh [AMBER_BINARY]
#   THREADS="2 8": thread counts (default 2, and 8 when the machine has 8 cores)
#   COMMIT: the commit to name (default: the checkout's HEAD)
#   ROUNDS=3: processes per arm; each arm's figure is its fastest round (other work on
#   a shared machine only ever slows a round down)
set -euo pipefail
amber=${1:-build/amber}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cores=$(nproc)
threads=${THREADS:-$( ((cores >= 8)) && echo "2 8" || echo 2)}
rounds=${ROUNDS:-3}
commit=${COMMIT:-$(git -C "$root" rev-parse --short HEAD)}
out=${OUT:-$root/docs/perf/data/cpu-compare-$(date -u +%F)-$commit.txt}
mkdir -p "$(dirname "$out")"
: >"$out"
# The two models of docs/perf/cpu.md: config, the PyTorch arm's shape, tokens, documents.
#       config              dim depth heads kv head_dim hidden tokens documents
models=("configs/tiny.toml  128 4     4     2  32       384    4096   512"
        "configs/small.toml 512 8     8     4  64       1536   2048   512")

ms_of() { grep -o 'step [0-9.]* ms' | head -1 | awk '{ print $2 }'; }
best() { tr ' ' '\n' | grep . | sort -g | head -1; }

echo "$(lscpu | sed -n 's/^Model name: *//p'), $cores cores; $(python3 -c 'import torch; print("torch", torch.__version__)'); commit $commit; $(date -u +%F)"
echo
echo "| model | threads | tokens (documents) | amber ms | PyTorch eager ms | PyTorch compiled ms | amber / eager | amber / compiled |"
echo "|---|---|---|---|---|---|---|---|"
for n in $threads; do
  for row in "${models[@]}"; do
    read -r config dim depth heads kv head_dim hidden tokens docs <<<"$row"
    declare -A runs=([amber]="" [eager]="" [compiled]="")
    for ((r = 1; r <= rounds; r++)); do
      line=$(OMP_NUM_THREADS=$n "$amber" bench step --config "$root/$config" --device cpu --dtype f32 \
        --set optimizer.name=adamw --tokens "$tokens" --doc-len "$docs" --steps 3 --warmup 1 --warmup-seconds 0 2>&1 |
        tee -a "$out")
      runs[amber]+="$(ms_of <<<"$line") "
      for arm in eager compiled; do
        flag=$([ $arm = compiled ] && echo --compile || true)
        line=$(cd "$here" && python3 cpu_torch.py --dim "$dim" --depth "$depth" --heads "$heads" --kv-heads "$kv" \
          --head-dim "$head_dim" --mlp-hidden "$hidden" --tokens "$tokens" --doc-len "$docs" --threads "$n" \
          --steps 3 --warmup 2 $flag 2>&1 | grep '^torch' | tee -a "$out")
        runs[$arm]+="$(ms_of <<<"$line") "
      done
    done
    a=$(best <<<"${runs[amber]}")
    e=$(best <<<"${runs[eager]}")
    c=$(best <<<"${runs[compiled]}")
    printf '| %s | %s | %s (%s) | %s | %s | %s | %.2fx | %.2fx |\n' "$(basename "$config" .toml)" "$n" "$tokens" \
      "$docs" "$a" "$e" "$c" "$(awk -v x="$e" -v y="$a" 'BEGIN { print x / y }')" \
      "$(awk -v x="$c" -v y="$a" 'BEGIN { print x / y }')"
  done
done
echo
echo "raw output: ${out#$root/}"
