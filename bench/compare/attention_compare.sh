#!/usr/bin/env bash
# Issue 6's attention comparison: amber's `bench kernel attention` and PyTorch's
# varlen_attn / padded cuDNN SDPA (bench/compare/attention_torch.py) on shapes A-F,
# one after the other in this one script, PyTorch on amber's very inputs; amber runs
# twice (fastest kernels, then the portable ones); prints the tables, hardware first.
# Usage: bench/compare/attention_compare.sh [AMBER_BINARY]   (on a GPU machine)
set -euo pipefail
amber=${1:-build/amber}
here=$(cd "$(dirname "$0")" && pwd)
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader), $(date -u +%F)"
echo "amber:"
inputs=$(mktemp -d)
trap 'rm -rf "$inputs"' EXIT
"$amber" bench kernel attention --shape all --repeats 10 --inputs-dir "$inputs"
echo "amber, portable kernels:"
"$amber" bench kernel attention --shape all --repeats 10 --portable
echo "PyTorch (errors on amber's inputs):"
python3 "$here/attention_torch.py" --shape all --repeats 10 --inputs-dir "$inputs"
