#!/usr/bin/env bash
# Issue 40's grouped GEMM comparison: amber's `bench kernel grouped` writes its routing
# (and then its times) to a folder, and bench/compare/grouped_torch.py runs
# torch._grouped_mm (bf16) and torch._scaled_grouped_mm (FP8 rowwise) on that very
# routing, one after the other in this one script; prints both tables, then the two
# arms side by side with amber / PyTorch (hardware and date first).
# Usage: bench/compare/grouped_compare.sh [AMBER_BINARY [SHAPE [TOKENS]]]   (on a GPU machine)
#   SHAPE: mm1, kohaku768, kohaku896, kohaku768-down, kohaku896-down, kohaku or all (default);
#   TOKENS: a comma-separated list (default: each shape's own: 128 to 32768 for mm1, 16384
#   for Kohaku's).
#   REPEATS (default 20) sets both arms' timings per product.
set -euo pipefail
amber=${1:-build/amber}
shape=${2:-all}
tokens=${3:-}
repeats=${REPEATS:-20}
here=$(cd "$(dirname "$0")" && pwd)
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader), $(date -u +%F)"
inputs=$(mktemp -d)
trap 'rm -rf "$inputs"' EXIT
echo "amber:"
"$amber" bench kernel grouped --shape "$shape" ${tokens:+--tokens "$tokens"} --repeats "$repeats" \
  --inputs-dir "$inputs"
echo "PyTorch (on amber's routing):"
python3 "$here/grouped_torch.py" --inputs-dir "$inputs" --repeats "$repeats"
