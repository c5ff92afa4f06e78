#!/usr/bin/env python3
"""The command line's conventions through the `amber` binary: usage errors (an unknown
command or option, a missing argument, a value outside its choices) exit with status 2
and say what was wrong; a mistyped command name, at the top or one level down, or a
mistyped option gets the nearest valid name; --help and --version exit 0; `amber info --config` prints the whole
resolved run config, every table; `amber bench step` names the step its loss is from."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import TINY_MODEL, Checks  # noqa: E402

MODEL = TINY_MODEL + """
[train]
steps = 77
"""


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect

    def expect_usage_error(args, *fragments):
        checks.expect_failure(args, 2, *fragments)

    expect_usage_error(["trian", "run.toml"], "'trian' is not a command of amber", "did you mean 'train'?")
    expect_usage_error(["tokenizer", "tarin"], "'tarin' is not a command of amber tokenizer", "did you mean 'train'?")
    expect_usage_error(["bench", "stpe"], "did you mean 'step'?")
    expect_usage_error(["frobnicate"], "'frobnicate' is not a command of amber", "commands: info, ")
    expect_usage_error([], "subcommand is required")
    expect_usage_error(["train"], "config is required")
    expect_usage_error(["info", "--no-such-option"], "'--no-such-option' is not an option of amber info")
    expect_usage_error(["train", "run.toml", "--resme"], "'--resme' is not an option of amber train",
                       "did you mean '--resume'?")
    expect_usage_error(["bench", "step", "--stpes=3"], "did you mean '--steps'?")
    expect_usage_error(["sample", "--checkpoint"], "--checkpoint")
    expect_usage_error(["plot", "somewhere", "--out", "x.svg", "--x", "days"], "--x", "days")
    for args in (["--help"], ["train", "--help"], ["--version"]):
        r = run(args)
        expect(r.returncode == 0 and r.stdout, f"{args}: exit {r.returncode}, stdout {r.stdout[-200:]!r}")

    with tempfile.TemporaryDirectory(prefix=f"amber_cli_{os.getpid()}_") as tmp:
        config = os.path.join(tmp, "run.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(MODEL)
        # An error of the work (here a config value), not of the usage: status 1.
        r = run(["info", "--config", config, "--set", "model.dim=-1"])
        expect(r.returncode == 1 and r.stderr.startswith("amber: error: "), f"a bad value: exit {r.returncode}")
        r = run(["info", "--config", config, "--set", "optimizer.name=\"muon\""])
        expect(r.returncode == 0, f"info: exit {r.returncode}, {r.stderr[-300:]!r}")
        for fragment in ["[model]", "dim = 32", "[train]", "steps = 77", "[optimizer]", "name = 'muon'",
                         "[schedule]", "[data]", "max_seq_len = "]:
            expect(fragment in r.stdout, f"info prints the resolved run config's {fragment!r}: {r.stdout[-900:]!r}")
        # bench step trains one batch for every step it runs: its loss names the step it
        # is from (here 2 warm-up steps, no timed warm-up, then 1 timed step).
        r = run(["bench", "step", "--config", config, "--device", "cpu", "--tokens", "64", "--steps", "1",
                 "--warmup", "2", "--warmup-seconds", "0"])
        expect(r.returncode == 0 and " at step 3" in r.stdout, f"bench step: exit {r.returncode}, {r.stdout[-400:]!r}")

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
