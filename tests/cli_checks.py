"""What the end-to-end CLI tests (tests/*/cli_test.py) share: the amber binary named by
--amber, running it, and a tally of named checks that sets the exit status."""
import argparse
import os
import subprocess

# The corpus the CLI tests train on (Debian's `fortunes` package).
FORTUNE = "/usr/share/games/fortunes/science"

# The [data] table of a run on the corpus Checks.corpus makes; format with shards= and tok=.
DATA_TABLE = """
[data]
dir = "{shards}"
tokenizer = "{tok}"
max_seq_len = 128
bos = "<|bos|>"
eos = "<|eos|>"
"""

# The [optimizer] and [data] tables of a CPU run on that corpus.
RUN_TABLES = """
[optimizer]
name = "adamw"
lr = 3e-3
""" + DATA_TABLE

# The smallest [model] table the binary accepts, for checks that only need a valid config.
TINY_MODEL = """
[model]
vocab_size = 256
dim = 32
depth = 1
heads = 2
kv_heads = 1
mlp_hidden = 64
"""


class Checks:
    def __init__(self):
        parser = argparse.ArgumentParser()
        parser.add_argument("--amber", required=True)
        self.amber = parser.parse_args().amber
        self.count = 0
        self.failures = []

    def run(self, args, stdin=""):
        """Runs amber with args; its output as text (bytes that are not UTF-8, such as an
        untrained model's samples, become U+FFFD)."""
        return subprocess.run([self.amber] + args, input=stdin, capture_output=True, encoding="utf-8",
                              errors="replace")

    def expect(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("FAILED:", what)

    def expect_failure(self, args, status, *fragments):
        """amber with args exits with `status` and an `amber: error: ` message holding
        every fragment."""
        r = self.run(args)
        what = " ".join(repr(a) for a in args)
        self.expect(r.returncode == status, f"{what}: exit {r.returncode} (want {status}); stderr: {r.stderr[-300:]!r}")
        self.expect(r.stderr.startswith("amber: error: "), f"{what}: stderr {r.stderr[-300:]!r}")
        for f in fragments:
            self.expect(f in r.stderr, f"{what}: {f!r} not in {r.stderr[-300:]!r}")

    def corpus(self, folder, vocab_size):
        """Trains a byte-level BPE tokenizer of vocab_size on FORTUNE and tokenizes FORTUNE
        with a tenth held out, into folder; returns the tokenizer's and the shards' paths."""
        tok, shards = os.path.join(folder, "tok.json"), os.path.join(folder, "shards")
        r = self.run(["tokenizer", "train", "--input", FORTUNE, "--vocab-size", str(vocab_size), "--out", tok])
        self.expect(r.returncode == 0, f"tokenizer train: {r.stderr[-300:]}")
        r = self.run(["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", shards, "--val-fraction", "0.1"])
        self.expect(r.returncode == 0, f"tokenize: {r.stderr[-300:]}")
        return tok, shards

    def finish(self):
        """Prints the tally; the exit status for sys.exit."""
        print(f"{self.count - len(self.failures)} passed, {len(self.failures)} failed")
        return 1 if self.failures else 0
