#!/usr/bin/env python3
"""`amber export hf|weights`, `amber eval` and `amber train --init-from` through the binary,
without torch: the exported folder's files and their contents, export from a copied run
folder in another directory with the run's tokenizer gone, the evaluation equal to the
run's logged val_loss, and the messages of what is refused (an existing --out, a bad
--dtype, a model no stock class computes, a folder whose config.json or tensors do not
fit the run's model, --init-from on a resumed run); a weights-only release evaluates within
bf16's rounding of the run, samples from another directory, and refuses a resume."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, RUN_TABLES  # noqa: E402


RUN = """
[model]
vocab_size = 320
dim = 32
depth = 1
heads = 2
kv_heads = 1
max_position = 256
{extra}

[train]
steps = 2
micro_batch_tokens = 512
eval_every = 2
eval_batches = 1
checkpoint_every = 2
out_dir = "{run}"
device = "cpu"
""" + RUN_TABLES


def main():
    checks = Checks()
    amber, run, expect, expect_failure = checks.amber, checks.run, checks.expect, checks.expect_failure
    with tempfile.TemporaryDirectory() as tmp:
        tok, shards = checks.corpus(tmp, 300)

        def train(name, extra="mlp_hidden = 64", args=()):
            config = os.path.join(tmp, name + ".toml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(RUN.format(extra=extra, run=os.path.join(tmp, name), shards=shards, tok=tok))
            r = run(["train", config, "--quiet"] + list(args))
            return config, r

        config, r = train("run")
        expect(r.returncode == 0, f"train: {r.stderr[-300:]}")
        if r.returncode != 0:
            sys.exit(checks.finish())
        run_dir, hf = os.path.join(tmp, "run"), os.path.join(tmp, "hf")

        # Evaluation: the run's own number again.
        r = run(["eval", "--checkpoint", run_dir])
        logged = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")]
        logged = [rec["val_loss"] for rec in logged if rec["type"] == "eval"][-1]
        m = re.search(r"val_loss (\S+) over (\d+) tokens", r.stdout)
        expect(r.returncode == 0 and m is not None and abs(float(m.group(1)) - logged) <= 1e-6,
               f"eval prints the run's val_loss {logged}: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")

        # Export from a copy of the run folder, elsewhere, with the run's tokenizer away.
        moved = os.path.join(tmp, "elsewhere", "run")
        shutil.copytree(run_dir, moved)
        os.rename(tok, tok + ".away")
        try:
            far = subprocess.run([os.path.abspath(amber), "export", "hf", "--checkpoint", "run", "--out", hf],
                                 capture_output=True, encoding="utf-8", errors="replace", cwd=os.path.dirname(moved))
        finally:
            os.rename(tok + ".away", tok)
        expect(far.returncode == 0 and "as qwen3 (f32)" in far.stdout,
               f"export from a copied run folder elsewhere: {far.stderr[-300:]} {far.stdout[-200:]!r}")
        files = sorted(os.listdir(hf)) if os.path.isdir(hf) else []
        expect(files == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                         "tokenizer_config.json"], f"the folder's files: {files}")
        if files:
            config_json = json.load(open(os.path.join(hf, "config.json"), encoding="utf-8"))
            expect(config_json["architectures"] == ["Qwen3ForCausalLM"] and config_json["hidden_size"] == 32
                   and config_json["num_key_value_heads"] == 1 and config_json["intermediate_size"] == 64,
                   f"config.json: {config_json}")
            tokens = json.load(open(os.path.join(hf, "tokenizer_config.json"), encoding="utf-8"))
            expect(tokens["bos_token"] == "<|bos|>" and tokens["eos_token"] == "<|eos|>", f"roles: {tokens}")
            with open(tok, encoding="utf-8") as a, open(os.path.join(hf, "tokenizer.json"), encoding="utf-8") as b:
                ours, theirs = json.load(a), json.load(b)
            post = theirs.pop("post_processor", None)
            ours.pop("post_processor", None)
            expect(ours == theirs, "tokenizer.json is the run's, but for its post-processor")
            bos = config_json["bos_token_id"]
            expect(post is not None and post["type"] == "TemplateProcessing"
                   and post["single"][0] == {"SpecialToken": {"id": "<|bos|>", "type_id": 0}}
                   and post["special_tokens"]["<|bos|>"]["ids"] == [bos],
                   f"the post-processor puts bos (id {bos}) first: {post}")
            generation = json.load(open(os.path.join(hf, "generation_config.json"), encoding="utf-8"))
            expect(generation.get("eos_token_id") == config_json["eos_token_id"] is not None,
                   f"generation_config's eos: {generation}")

        # A weights-only release: half the training checkpoint's weights file, the run's
        # evaluation within bf16's rounding, sampling from another directory, no resume.
        release = os.path.join(tmp, "release")
        r = run(["export", "weights", "--checkpoint", run_dir, "--out", release])
        expect(r.returncode == 0 and sorted(os.listdir(release)) == ["model.safetensors", "tokenizer.json",
                                                                      "trainer_state.json"],
               f"export weights: {r.stderr[-300:]} {os.listdir(release) if os.path.isdir(release) else None}")
        latest = os.path.join(run_dir, "checkpoints", open(os.path.join(run_dir, "checkpoints", "latest")).read().strip())
        full, half = (os.path.getsize(os.path.join(d, "model.safetensors")) for d in (latest, release))
        expect(half < 0.6 * full, f"bf16 weights take about half the f32 file: {half} of {full} bytes")
        r = run(["eval", "--checkpoint", release])
        m = re.search(r"val_loss (\S+) over", r.stdout)
        expect(r.returncode == 0 and m is not None and abs(float(m.group(1)) - logged) <= 2e-2 * logged,
               f"the release evaluates near the run's {logged}: {r.stdout[-200:]!r} {r.stderr[-300:]!r}")
        far = subprocess.run([os.path.abspath(amber), "sample", "--checkpoint", release, "--prompt", "a",
                              "--max-tokens", "5"], capture_output=True, encoding="utf-8", errors="replace",
                             cwd=os.path.join(tmp, "elsewhere"))
        expect(far.returncode == 0, f"sample a release from another directory: {far.stderr[-300:]}")
        resumed = os.path.join(tmp, "resumed")
        os.makedirs(os.path.join(resumed, "checkpoints"))
        shutil.copytree(release, os.path.join(resumed, "checkpoints", "step-00000002"))
        with open(os.path.join(resumed, "checkpoints", "latest"), "w", encoding="utf-8") as f:
            f.write("step-00000002")
        _, r = train("resumed", args=["--resume"])
        expect(r.returncode == 1 and "weights-only checkpoint" in r.stderr, f"resume from a release: {r.stderr[-300:]}")

        expect_failure(["export", "hf", "--checkpoint", run_dir, "--out", hf], 1, "already exists",
                       "choose another --out")
        expect_failure(["export", "hf", "--checkpoint", run_dir, "--out", hf + "2", "--dtype", "f16"], 2, "--dtype")
        expect_failure(["export", "--checkpoint", run_dir], 2)
        expect_failure(["export", "hf", "--checkpoint", os.path.join(tmp, "nowhere"), "--out", hf + "2"], 1,
                       "neither a checkpoint nor a run folder")
        _, r = train("sinks", "mlp_hidden = 64\nattn_sink = true")
        expect(r.returncode == 0, f"train with sinks: {r.stderr[-300:]}")
        expect_failure(["export", "hf", "--checkpoint", os.path.join(tmp, "sinks"), "--out", hf + "2"], 1,
                       "model.attn_sink = true", "docs/interop.md")
        expect(not os.path.exists(hf + "2"), "a refused export writes nothing")

        # Import: the exported folder starts a run of the same model; another model is
        # refused naming the field, and so are a folder without weights and a resume.
        # The folder's tokenizer (with its post-processor) reads the run's shards too.
        _, r = train("again", args=["--init-from", hf, "--set", "data.tokenizer=" + os.path.join(hf, "tokenizer.json")])
        expect(r.returncode == 0 and "weights from " + hf in r.stdout, f"--init-from: {r.stderr[-300:]}")
        _, r = train("wider", "mlp_hidden = 96", ["--init-from", hf])
        expect(r.returncode == 1 and "intermediate_size is 64" in r.stderr and "model.mlp_hidden" in r.stderr,
               f"--init-from into another model: {r.stderr[-300:]}")
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        shutil.copy(os.path.join(hf, "config.json"), empty)
        _, r = train("noweights", args=["--init-from", empty])
        expect(r.returncode == 1 and "neither model.safetensors nor model.safetensors.index.json" in r.stderr,
               f"--init-from a folder without weights: {r.stderr[-300:]}")
        _, r = train("again", args=["--init-from", hf, "--resume"])
        expect(r.returncode == 1 and "--init-from starts a fresh run" in r.stderr, f"--init-from --resume: {r.stderr[-300:]}")
    sys.exit(checks.finish())


if __name__ == "__main__":
    main()
