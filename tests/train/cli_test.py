#!/usr/bin/env python3
"""End-to-end checks of `amber train` and `amber sample` through the binary, as the README
demo uses them but small enough for every test run: a tokenizer and shards, a short CPU
run with evaluations, sample previews and checkpoints, its resumption, samples from the
run folder, its TensorBoard events read back by TensorBoard's own reader, a run stopped
by SIGTERM, a second run refused from a folder in use (and let
in once its holder is killed), `amber plot` of two runs, `amber info` and `amber bench
step` on the run's config, and the messages of bad arguments. The model's vocabulary is padded far past
the tokenizer's (vocabularies are often rounded up past a tokenizer's size), so previews
and samples must keep to the ids the tokenizer can decode."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, RUN_TABLES  # noqa: E402


CONFIG = """
[model]
vocab_size = 1024
dim = 32
depth = 1
heads = 2
kv_heads = 1
mlp_hidden = 64
max_position = 256

[train]
steps = {steps}
micro_batch_tokens = 512
eval_every = 2
eval_batches = 1
sample_every = 2
sample_prompts = ["The"]
sample_tokens = 6
checkpoint_every = 2
out_dir = "{run}"
device = "cpu"
""" + RUN_TABLES


def wait_for_first_step(run_dir):
    """Waits (a minute at most) until a run in `run_dir` has logged a step."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        time.sleep(0.01)


def check_tensorboard(expect, run_dir, records):
    """The run's event files (one per process) hold every step's loss and every
    evaluation's as TensorBoard reads them, and the previews as text."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        expect(False, "the tensorboard package is missing (scripts/setup installs it from PyPI)")
        return
    events = EventAccumulator(os.path.join(run_dir, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    want = {rec["step"]: rec["loss"] for rec in records if rec["type"] == "train"}
    got = {e.step: e.value for e in events.Scalars("train/loss")} if "train/loss" in tags["scalars"] else {}
    expect(sorted(got) == sorted(want) and all(abs(got[s] - want[s]) <= 1e-6 * abs(want[s]) for s in want),
           f"TensorBoard's train/loss equals metrics.jsonl's: {got} against {want}")
    evals = sorted(rec["step"] for rec in records if rec["type"] == "eval")
    got_evals = sorted(e.step for e in events.Scalars("eval/val_loss")) if "eval/val_loss" in tags["scalars"] else []
    expect(got_evals == evals, f"TensorBoard has every evaluation: {got_evals} against {evals}")
    expect("samples/0" in tags["tensors"], f"the previews are text summaries: {tags['tensors']}")


def main():
    checks = Checks()
    amber, run, expect = checks.amber, checks.run, checks.expect

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        tok, shards = checks.corpus(tmp, 500)

        def config(steps):
            path = os.path.join(tmp, f"run{steps}.toml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(CONFIG.format(steps=steps, run=run_dir, shards=shards, tok=tok))
            return path

        r = run(["train", config(4)])
        expect(r.returncode == 0, f"train: {r.stderr[-400:]}")
        for fragment in ["eval @ step 2: val loss", "samples @ step 2:\n  [The]", "samples @ step 4:\n  [The]",
                         "checkpoint: " + os.path.join(run_dir, "checkpoints", "step-00000004")]:
            expect(fragment in r.stdout, f"train prints {fragment!r}: {r.stdout[-600:]!r}")
        records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")]
        steps = [rec["step"] for rec in records if rec["type"] == "train"]
        expect(steps == [1, 2, 3, 4], f"metrics.jsonl has steps 1-4: {steps}")

        r = run(["train", config(6), "--resume"])
        expect(r.returncode == 0 and "samples @ step 6:" in r.stdout, f"resume to step 6: {r.stderr[-400:]}")
        records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")]
        steps = [rec["step"] for rec in records if rec["type"] == "train"]
        expect(steps == [1, 2, 3, 4, 5, 6], f"the resumed run appends steps 5-6: {steps}")
        expect(all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rec["time"]) and rec["elapsed_s"] >= 0
                   for rec in records), "every record has its time and elapsed_s")
        with open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace") as f:
            log = f.read()
        expect("eval @ step 6: val loss" in log and "resumed from " in log,
               f"train.log holds both processes' console: {log[-400:]!r}")
        check_tensorboard(expect, run_dir, records)
        r = run(["train", config(6)])
        expect(r.returncode != 0 and "--resume" in r.stderr, f"a fresh run into a used folder: {r.stderr[-300:]}")

        args = ["sample", "--checkpoint", run_dir, "--prompt", "The", "--prompt", "", "--max-tokens", "12",
                "--temperature", "1.0", "--seed", "3"]
        first, again = run(args), run(args)
        expect(first.returncode == 0, f"sample: {first.stderr[-300:]}")
        expect(re.search(r"checkpoint .*step-00000006 \(step 6\)", first.stdout) is not None,
               f"sample names the latest checkpoint: {first.stdout[:200]!r}")
        expect("--- sample 1\nThe" in first.stdout and "--- sample 2\n" in first.stdout,
               f"one sample per prompt: {first.stdout!r}")
        expect(first.stdout == again.stdout, "a seed reproduces the samples")
        # A checkpoint carries its tokenizer: a copy of the run folder samples the same
        # text from another working directory with the run's tokenizer file gone.
        moved = os.path.join(tmp, "elsewhere", "run")
        shutil.copytree(run_dir, moved)
        elsewhere = os.path.dirname(moved)
        moved_args = [os.path.abspath(amber), "sample", "--checkpoint", "run"] + args[3:]
        os.rename(tok, tok + ".away")
        try:
            far = subprocess.run(moved_args, capture_output=True, encoding="utf-8", errors="replace", cwd=elsewhere)
        finally:
            os.rename(tok + ".away", tok)
        expect(far.returncode == 0 and far.stdout.split("--- sample 1", 1)[-1] == first.stdout.split("--- sample 1", 1)[-1],
               f"sample from a copied run folder elsewhere: {far.stderr[-300:]} {far.stdout[-200:]!r}")
        # A temperature whose logits overflow samples as greedy (temperature 0) does.
        greedy = run(args[:-4] + ["--temperature", "0"])
        tiny = run(args[:-4] + ["--temperature", "1e-320"])
        expect(greedy.returncode == 0 and tiny.stdout == greedy.stdout,
               f"temperature 1e-320 acts as greedy: {tiny.stdout[-200:]!r} vs {greedy.stdout[-200:]!r}")

        # One prompt streams as it decodes and ends the same as printed whole; a stop
        # string cuts the text before it; the timings go to stderr.
        one = ["sample", "--checkpoint", run_dir, "--prompt", "The", "--max-tokens", "24", "--temperature", "0"]
        streamed = run(one)
        text = streamed.stdout.split("--- sample 1\n", 1)[-1]
        expect(streamed.returncode == 0 and re.search(r"\d+ decode steps in [0-9.]+ ms", streamed.stderr) is not None,
               f"sample streams one prompt, timings on stderr: {streamed.stdout[-200:]!r} {streamed.stderr[-300:]!r}")
        both = run(one + ["--prompt", "The"])
        expect(both.returncode == 0 and both.stdout.split("--- sample 2\n", 1)[-1] == text,
               f"the streamed text equals the text printed whole: {text!r} vs {both.stdout[-200:]!r}")
        body = text[len("The"):].rstrip("\n")
        # Two printable ASCII characters past the start (the text of a barely trained
        # byte-level model also holds bytes that print as U+FFFD here).
        at = [i for i in range(1, len(body) - 1) if body[i:i + 2].isascii() and body[i:i + 2].isprintable()]
        expect(len(at) > 0, f"the greedy text has two printable ASCII characters in a row: {body!r}")
        if at:
            stop = body[at[0]:at[0] + 2]
            cut = run(one + ["--stop", stop, "--repetition-penalty", "1.0"])
            want = "The" + body[:body.find(stop)] + "\n"
            expect(cut.returncode == 0 and cut.stdout.split("--- sample 1\n", 1)[-1] == want,
                   f"--stop {stop!r} cuts before it: {cut.stdout[-200:]!r}, want {want!r}")
        bad = run(one + ["--repetition-penalty", "0"])
        expect(bad.returncode != 0 and "repetition penalty" in bad.stderr, f"penalty 0 refused: {bad.stderr[-200:]!r}")

        # SIGTERM mid-run (a scheduler taking the machine back): a checkpoint, then exit 128 + 15.
        stop_dir = os.path.join(tmp, "stopped")
        long_run = [amber, "train", config(6), "--set", "train.steps=100000", "--set", f"train.out_dir={stop_dir}",
                    "--set", "train.sample_every=0", "--set", "train.eval_every=0", "--quiet"]
        proc = subprocess.Popen(long_run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                                errors="replace")
        wait_for_first_step(stop_dir)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        expect(proc.returncode == 128 + signal.SIGTERM and "stopped by signal 15 after step" in out,
               f"SIGTERM: exit {proc.returncode}, {out[-300:]!r} {err[-300:]!r}")
        expect(os.path.exists(os.path.join(stop_dir, "checkpoints", "latest")), "SIGTERM leaves a checkpoint")

        # Both runs in one figure: a well-formed SVG with five panels, a line per run and
        # metric, the baseline dashed, and each run named in the legend; against hours too.
        svg_path = os.path.join(tmp, "runs.svg")
        for axis in ["steps", "hours"]:
            r = run(["plot", run_dir, os.path.join(stop_dir, "metrics.jsonl"), "--out", svg_path, "--x", axis])
            expect(r.returncode == 0, f"plot --x {axis}: exit {r.returncode}, {r.stderr[-300:]!r}")
            try:
                root = ElementTree.parse(svg_path).getroot()
            except ElementTree.ParseError as e:
                expect(False, f"plot --x {axis} writes well-formed XML: {e}")
                continue
            ns = "{http://www.w3.org/2000/svg}"
            expect(root.tag == ns + "svg", f"the root is an svg element: {root.tag}")
            panels = [g for g in root.iter(ns + "g") if g.get("class") == "panel"]
            expect(len(panels) == 5, f"five panels: {len(panels)}")
            lines = list(root.iter(ns + "polyline"))
            # train loss, lr and tokens/s for both runs; val loss and its baseline for the first.
            expect(len(lines) >= 8 and any(p.get("stroke-dasharray") for p in lines),
                   f"{len(lines)} lines, one dashed baseline")
            texts = [t.text or "" for t in root.iter(ns + "text")]
            expect("run" in texts and "stopped" in texts, f"the legend names both runs: {texts[-4:]}")
            expect(any(t.endswith(" hours of training (elapsed_s)") or t == "hours of training (elapsed_s)"
                       for t in texts) == (axis == "hours"), f"--x {axis} labels the axis")
        r = run(["plot", os.path.join(tmp, "nowhere"), "--out", svg_path])
        expect(r.returncode == 1 and "metrics.jsonl" in r.stderr, f"plot of no run: {r.stderr[-300:]!r}")

        # One run owns its out_dir: a second `amber train` into it is refused, naming the
        # folder and the holder's pid; after the holder is killed (kill -9) the folder is free.
        owned_dir = os.path.join(tmp, "owned")
        owned_run = [arg.replace(stop_dir, owned_dir) for arg in long_run]
        holder = subprocess.Popen(owned_run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                                  errors="replace")
        wait_for_first_step(owned_dir)
        r = run(["train", config(6), "--set", f"train.out_dir={owned_dir}", "--resume"])
        expect(r.returncode == 1 and "amber: error:" in r.stderr and owned_dir in r.stderr
               and f"pid {holder.pid}" in r.stderr, f"a second run into a folder in use: exit {r.returncode}, "
               f"{r.stderr[-300:]!r}")
        holder.kill()
        holder.communicate(timeout=60)
        r = run(["train", config(6), "--set", f"train.out_dir={owned_dir}", "--set", "train.steps=1", "--resume"])
        expect(r.returncode == 0, f"a killed run's lock does not block: exit {r.returncode}, {r.stderr[-300:]!r}")

        # An out_dir that is a file: an error naming it, not an abort.
        a_file = os.path.join(tmp, "a_file")
        with open(a_file, "w", encoding="utf-8") as f:
            f.write("x")
        r = run(["train", config(6), "--set", f"train.out_dir={a_file}"])
        expect(r.returncode == 1 and "amber: error:" in r.stderr and a_file in r.stderr,
               f"a file as out_dir: exit {r.returncode}, {r.stderr[-300:]!r}")

        r = run(["info", "--config", config(6), "--doc-len", "128", "--tokens", "512"])
        expect(r.returncode == 0 and "vocab 1024" in r.stdout and re.search(r"model [0-9.]+ MFLOP", r.stdout),
               f"info shows the model, a small one in MFLOP: {r.stdout!r} {r.stderr[-200:]!r}")
        r = run(["bench", "step", "--config", config(6), "--device", "cpu", "--dtype", "f32", "--tokens", "512",
                 "--doc-len", "20-100", "--steps", "2", "--warmup", "1", "--warmup-seconds", "0"])
        expect(r.returncode == 0 and re.search(r"step [0-9.]+ ms \| [0-9]+ tokens/s", r.stdout),
               f"bench step on the CPU: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")

        with open(tok, encoding="utf-8") as f:
            other = json.load(f)
        for added in other["added_tokens"]:
            if added["content"] == "<|bos|>":
                added["content"] = "<|start|>"
        other_tok = os.path.join(tmp, "other.json")
        with open(other_tok, "w", encoding="utf-8") as f:
            json.dump(other, f)
        for bad, fragment in [
            (["sample", "--checkpoint", os.path.join(tmp, "nowhere")], "neither a checkpoint nor a run folder"),
            (["sample", "--checkpoint", run_dir, "--tokenizer", other_tok], "has no token '<|bos|>'"),
            (["sample", "--checkpoint", run_dir, "--top-p", "0"], "top-p"),
            (["sample", "--checkpoint", run_dir, "--prompt", "The cat sat. " * 100], "model.max_position"),
            (["train", os.path.join(tmp, "missing.toml")], "missing.toml"),
        ]:
            r = run(bad)
            expect(r.returncode != 0 and fragment in r.stderr,
                   f"{' '.join(bad[:3])}: exit {r.returncode}, stderr {r.stderr[-200:]!r} lacks {fragment!r}")

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
