#!/usr/bin/env python3
"""Hugging Face `tokenizers` encoding throughput on the same corpus and tokenizer.json
as bench/tokenizer_bench.cpp: MB/s on one thread (RAYON_NUM_THREADS=1) and all threads."""
import os
import sys
import time

if len(sys.argv) < 2:
    sys.exit("usage: tokenizer_hf.py TOKENIZER.json [THREADS]")
if len(sys.argv) > 2:
    os.environ["RAYON_NUM_THREADS"] = sys.argv[2]
from tokenizers import Tokenizer  # noqa: E402  (after RAYON_NUM_THREADS is set)

root = "/usr/share/games/fortunes"
docs = []
for name in sorted(os.listdir(root)):
    path = os.path.join(root, name)
    if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
        continue
    docs += [d.strip("\n") for d in open(path, encoding="utf-8").read().split("\n%\n") if d.strip("\n")]
nbytes = sum(len(d.encode()) for d in docs)
tok = Tokenizer.from_file(sys.argv[1])
best = 0.0
for _ in range(4):
    start = time.perf_counter()
    tok.encode_batch(docs, add_special_tokens=False)
    best = max(best, nbytes / 1e6 / (time.perf_counter() - start))
print(f"tokenizers threads {os.environ.get('RAYON_NUM_THREADS', 'all')}: {best:.2f} MB/s over {nbytes / 1e6:.2f} MB")
