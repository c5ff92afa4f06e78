#!/usr/bin/env python3
"""Bad input through the `amber` binary: each failure is one `amber: error: ...` line
naming the file, key or value, with exit status 1 — never an abort (a negative status,
a signal) from an exception that escaped."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import TINY_MODEL as MODEL, Checks  # noqa: E402


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect

    def expect_error(args, *fragments):
        checks.expect_failure(args, 1, *fragments)

    with tempfile.TemporaryDirectory(prefix=f"amber_io_cli_{os.getpid()}_") as tmp:
        config = os.path.join(tmp, "model.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(MODEL)
        r = run(["info", "--config", config])
        expect(r.returncode == 0, f"info on a good config: {r.stderr[-300:]}")
        # The sparse preset: its experts and its total and active parameters.
        moe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "presets",
                           "kohaku-moe-1b.toml")
        r = run(["info", "--config", moe])
        expect(r.returncode == 0 and "experts: 15 of 16 layers sparse" in r.stdout
               and "990.78M total, 247.61M active per token" in r.stdout, f"info on kohaku-moe-1b: {r.stdout[-500:]!r}")

        # --set values with quotes and line breaks.
        expect_error(["info", "--config", config, "--set", 'model.norm="rmsnorm'], "--set model.norm", "not valid TOML")
        expect_error(["info", "--config", config, "--set", "model.norm='rms"], "--set model.norm")
        expect_error(["info", "--config", config, "--set", "model.depth=4\nmodel.dim = 8"], "--set model.depth",
                     "line break")
        expect_error(["info", "--config", config, "--set", 'model.norm="a\nb"'], "--set model.norm", "line break")

        # A directory where a file belongs: an error and exit 1 whichever reader meets it.
        def expect_error_stdin(args, stdin, *fragments):
            r = run(args, stdin)
            expect(r.returncode == 1 and r.stderr.startswith("amber: error: "),
                   f"{args}: exit {r.returncode}, stderr {r.stderr[-300:]!r}")
            for f in fragments:
                expect(f in r.stderr, f"{args}: {f!r} not in {r.stderr[-300:]!r}")

        expect_error_stdin(["tokenizer", "encode", "--tokenizer", tmp], "hi", tmp, "is a directory")
        state_dir = os.path.join(tmp, "ck", "step-00000001", "trainer_state.json")
        os.makedirs(state_dir)
        expect_error(["sample", "--checkpoint", os.path.dirname(state_dir)], state_dir, "is a directory")

        # An exception from a library amber calls (here the JSON parser, on a damaged
        # trainer_state.json) still reaches the user as an error, not an abort.
        checkpoint = os.path.join(tmp, "step-00000001")
        os.makedirs(checkpoint)
        with open(os.path.join(checkpoint, "trainer_state.json"), "w", encoding="utf-8") as f:
            f.write('{"config": ')
        expect_error(["sample", "--checkpoint", checkpoint])
        with open(os.path.join(checkpoint, "trainer_state.json"), "w", encoding="utf-8") as f:
            json.dump({"config": 7}, f)
        expect_error(["sample", "--checkpoint", checkpoint])

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
