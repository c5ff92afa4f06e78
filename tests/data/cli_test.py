#!/usr/bin/env python3
"""End-to-end checks of the data subcommands through the `amber` binary: train a
tokenizer, round-trip text through encode/decode, tokenize into shards, restart
(every shard kept), and the exit codes and messages of bad arguments."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FORTUNE = "/usr/share/games/fortunes/science"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amber", required=True)
    amber = ap.parse_args().amber
    failures = []
    checks = 0

    def run(args, stdin=""):
        return subprocess.run([amber] + args, input=stdin.encode(), capture_output=True)

    def expect(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)
            print("FAILED:", what)

    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "tok.json")
        r = run(["tokenizer", "train", "--input", FORTUNE, "--vocab-size", "700", "--special", "<|a|>,<|b|>",
                 "--out", tok])
        expect(r.returncode == 0, f"train failed: {r.stderr.decode()}")
        vocab = json.load(open(tok, encoding="utf-8"))
        expect([t["content"] for t in vocab["added_tokens"]] == ["<|bos|>", "<|eos|>", "<|pad|>", "<|a|>", "<|b|>"],
               "special tokens and their order")
        expect([t["id"] for t in vocab["added_tokens"]] == [695, 696, 697, 698, 699], "special token ids at the end")

        text = "Ünïcode <|a|> and 数字 123\n\ttabs"
        ids = json.loads(run(["tokenizer", "encode", "--tokenizer", tok], text).stdout)
        expect(698 in ids, "a user special token is one id")
        expect(run(["tokenizer", "decode", "--tokenizer", tok], json.dumps(ids)).stdout.decode() == text,
               "decode(encode(x)) == x through the CLI")

        out = os.path.join(tmp, "shards")
        args = ["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", out, "--shard-mb", "0.05"]
        first = run(args)
        expect(first.returncode == 0, f"tokenize failed: {first.stderr.decode()}")
        m = re.search(r"(\d+) shards written, (\d+) kept", first.stderr.decode())
        written = int(m.group(1)) if m else 0
        expect(written >= 3 and m.group(2) == "0", f"first run writes shards: {first.stderr.decode()[-300:]}")
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        expect(len(manifest["train"]) + len(manifest["val"]) == written, "manifest lists every shard")
        again = run(args)
        m = re.search(r"(\d+) shards written, (\d+) kept", again.stderr.decode())
        expect(m is not None and m.group(1) == "0" and int(m.group(2)) == written, "a re-run keeps every shard")

        for bad, fragment in [
            (["tokenizer", "encode", "--tokenizer", os.path.join(tmp, "nope.json")], "nope.json"),
            (["tokenizer", "train", "--input", os.path.join(tmp, "missing"), "--out", tok], "missing"),
            (["tokenizer", "train", "--vocab-size", "100", "--out", tok], "--vocab-size"),
            (["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", out, "--val-fraction", "0.5"],
             "different settings"),
            (["tokenize", "--tokenizer", tok], "--out is required"),
        ]:
            r = run(bad)
            expect(r.returncode != 0 and fragment in r.stderr.decode(),
                   f"{' '.join(bad[:2])}: exit {r.returncode}, stderr {r.stderr.decode()[-200:]!r} lacks {fragment!r}")
        r = run(["tokenizer", "decode", "--tokenizer", tok], "[1, 99999]")
        expect(r.returncode == 1 and "99999" in r.stderr.decode(), "out-of-range id is an error naming it")

    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
