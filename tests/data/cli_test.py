#!/usr/bin/env python3
"""End-to-end checks of the data subcommands through the `amber` binary: train a
tokenizer, round-trip text through encode/decode, tokenize into shards, restart
(every shard kept), and the exit codes and messages of bad arguments."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks  # noqa: E402

FORTUNE = "/usr/share/games/fortunes/science"


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect

    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "tok.json")
        r = run(["tokenizer", "train", "--input", FORTUNE, "--vocab-size", "700", "--special", "<|a|>,<|b|>",
                 "--out", tok])
        expect(r.returncode == 0, f"train failed: {r.stderr}")
        vocab = json.load(open(tok, encoding="utf-8"))
        expect([t["content"] for t in vocab["added_tokens"]] == ["<|bos|>", "<|eos|>", "<|pad|>", "<|a|>", "<|b|>"],
               "special tokens and their order")
        expect([t["id"] for t in vocab["added_tokens"]] == [695, 696, 697, 698, 699], "special token ids at the end")

        text = "Ünïcode <|a|> and 数字 123\n\ttabs"
        ids = json.loads(run(["tokenizer", "encode", "--tokenizer", tok], text).stdout)
        expect(698 in ids, "a user special token is one id")
        expect(run(["tokenizer", "decode", "--tokenizer", tok], json.dumps(ids)).stdout == text,
               "decode(encode(x)) == x through the CLI")

        out = os.path.join(tmp, "shards")
        args = ["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", out, "--shard-mb", "0.05"]
        first = run(args)
        expect(first.returncode == 0, f"tokenize failed: {first.stderr}")
        m = re.search(r"(\d+) shards written, (\d+) kept", first.stderr)
        written = int(m.group(1)) if m else 0
        expect(written >= 3 and m.group(2) == "0", f"first run writes shards: {first.stderr[-300:]}")
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        expect(len(manifest["train"]) + len(manifest["val"]) == written, "manifest lists every shard")
        again = run(args)
        m = re.search(r"(\d+) shards written, (\d+) kept", again.stderr)
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
            expect(r.returncode != 0 and fragment in r.stderr,
                   f"{' '.join(bad[:2])}: exit {r.returncode}, stderr {r.stderr[-200:]!r} lacks {fragment!r}")
        r = run(["tokenizer", "decode", "--tokenizer", tok], "[1, 99999]")
        expect(r.returncode == 1 and "99999" in r.stderr, "out-of-range id is an error naming it")

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
