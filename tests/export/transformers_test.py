#!/usr/bin/env python3
"""Exported models as stock transformers sees them: short runs of the demo's tiny model
(Qwen3 layout), of a Llama-style model with biases and tied embeddings, of a
Gemma3-style one, and of two that exercise what export rewrites (residual scale,
gainless QK-norm, GeGLU, YaRN, NTK), each exported with `amber export hf` and loaded by
AutoModelForCausalLM and AutoTokenizer (no remote code), must give amber's held-out
loss on the same evaluation batches within 1e-5 and the same greedy text; `amber train
--init-from` the exported folder (Llama and Qwen3) must start from the identical
weights. Exits 77 (skipped) without torch and transformers, which scripts/setup
installs from PyPI."""
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, DATA_TABLE  # noqa: E402

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e.name} is not installed (scripts/setup installs torch and transformers from PyPI)")
    sys.exit(77)

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = ["The", "Q: What is", "A scientist"]

RUN = """
{model}

[train]
steps = 6
micro_batch_tokens = 1024
eval_every = 6
eval_batches = 2
sample_every = 0
checkpoint_every = 6
out_dir = "{run}"
device = "cpu"

[optimizer]
name = "adamw"
lr = 1e-2
""" + DATA_TABLE

# The demo's model (configs/tiny.toml: QK-norm, so Qwen3), and a Llama-style one.
MODELS = {
    "tiny": f'extends = "{SOURCE}/configs/tiny.toml"',
    "llama": """[model]
vocab_size = 640
dim = 64
depth = 2
heads = 4
kv_heads = 2
mlp_hidden = 96
max_position = 256
qk_norm = false
attn_bias = true
tie_embeddings = true
rope_theta = 50000.0""",
    # What export folds or rewrites: the depth residual scale, QK-norm without gains
    # (ones), GeGLU, YaRN, and a head width apart from dim / heads. A wide init makes
    # attention sharp enough that a wrong RoPE moves the loss past the tolerance.
    "qwen3-yarn": """[model]
vocab_size = 512
dim = 64
depth = 2
heads = 4
kv_heads = 1
head_dim = 32
mlp = "geglu"
mlp_hidden = 128
max_position = 64
qk_norm_affine = false
scale_residual_by_depth = true
rope_scaling = "yarn"
rope_factor = 4.0
init_std = 0.2""",
    # NTK scaling, exported as the larger base it amounts to, and an untied head.
    "llama-ntk": """[model]
vocab_size = 512
dim = 32
depth = 2
heads = 2
kv_heads = 2
mlp_hidden = 64
max_position = 256
qk_norm = false
rope_scaling = "ntk"
rope_factor = 2.0
init_std = 0.2""",
    # Gemma3-style: norms after both branches (with the residual scale folded into
    # them), scaled embeddings, GeGLU, sliding windows below a global layer every second.
    "gemma3": """[model]
vocab_size = 512
dim = 64
depth = 3
heads = 4
kv_heads = 2
mlp = "geglu"
mlp_hidden = 128
max_position = 256
post_norm = true
embedding_scale = true
sliding_window = 16
global_layer_every = 2
scale_residual_by_depth = true
tie_embeddings = true
init_std = 0.2""",
    # Mixture of Experts, exported as Qwen3-MoE: a dense first layer, then softmax top-2
    # of 4 experts with the chosen weights renormalised.
    "qwen3-moe": """[model]
vocab_size = 512
dim = 64
depth = 3
heads = 4
kv_heads = 2
mlp_hidden = 128
max_position = 256
moe_experts = 4
moe_top_k = 2
moe_hidden = 32
moe_first_dense = 1
init_std = 0.2""",
    # Sigmoid routing with a shared expert, a routed scale and the balance bias (DeepSeek-V3's
    # MoE), exported as GLM-4.5's Glm4Moe.
    "glm4-moe": """[model]
vocab_size = 512
dim = 64
depth = 3
heads = 4
kv_heads = 2
mlp_hidden = 128
max_position = 256
moe_experts = 4
moe_top_k = 2
moe_hidden = 32
moe_shared_experts = 1
moe_first_dense = 1
moe_router = "sigmoid"
moe_routed_scaling = 2.5
moe_bias_update_rate = 0.01
init_std = 0.2""",
}
CLASSES = {"tiny": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM", "qwen3-yarn": "Qwen3ForCausalLM",
           "llama-ntk": "LlamaForCausalLM", "gemma3": "Gemma3ForCausalLM", "qwen3-moe": "Qwen3MoeForCausalLM",
           "glm4-moe": "Glm4MoeForCausalLM"}


def hf_loss(model, batches):
    """Mean cross-entropy over the batches' targets, each document scored on its own
    with amber's positions."""
    total, count = 0.0, 0
    with torch.no_grad():
        for b in batches:
            cu = b["cu_seqlens"]
            for s, e in zip(cu[:-1], cu[1:]):
                ids = torch.tensor([b["tokens"][s:e]])
                pos = torch.tensor([b["positions"][s:e]])
                targets = torch.tensor(b["targets"][s:e])
                logits = model(input_ids=ids, position_ids=pos).logits[0].double()
                losses = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100, reduction="sum")
                total += losses.item()
                count += int((targets != -100).sum())
    return total / count


def hf_greedy(model, tokenizer, prompt, new_tokens):
    """The greedy continuation of the prompt as the tokenizer encodes it (bos first, from
    the exported post-processor), kept to the tokenizer's ids as amber keeps a padded
    vocabulary's extra ids out of samples."""
    ids = tokenizer(prompt)["input_ids"]
    extra = list(range(len(tokenizer), model.config.vocab_size))
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=new_tokens, suppress_tokens=extra or None)
    new = out[0, len(ids):].tolist()
    if new and new[-1] == tokenizer.eos_token_id:
        new.pop()
    return prompt + tokenizer.decode(new)


def amber_greedy(run, run_dir, prompt, new_tokens):
    r = run(["sample", "--checkpoint", run_dir, "--prompt", prompt, "--max-tokens", str(new_tokens),
             "--temperature", "0"])
    return r.returncode, r.stdout.split("--- sample 1\n", 1)[-1][:-1], r.stderr


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tok, shards = checks.corpus(tmp, 500)
        for name, model_table in MODELS.items():
            run_dir, hf_dir = os.path.join(tmp, name), os.path.join(tmp, name + "-hf")
            config = os.path.join(tmp, name + ".toml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(RUN.format(model=model_table, run=run_dir, shards=shards, tok=tok))
            r = run(["train", config, "--quiet"])
            expect(r.returncode == 0, f"{name}: train: {r.stderr[-400:]}")
            records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")]
            logged = [rec["val_loss"] for rec in records if rec["type"] == "eval"][-1]
            batches_path = os.path.join(tmp, name + "-batches.json")
            r = run(["eval", "--checkpoint", run_dir, "--batches-out", batches_path])
            m = re.search(r"val_loss (\S+) over (\d+) tokens", r.stdout)
            expect(r.returncode == 0 and m is not None, f"{name}: eval: {r.stdout[-300:]} {r.stderr[-300:]}")
            amber_loss = float(m.group(1))
            expect(abs(amber_loss - logged) <= 1e-6, f"{name}: amber eval {amber_loss} is the run's val_loss {logged}")

            r = run(["export", "hf", "--checkpoint", run_dir, "--out", hf_dir])
            expect(r.returncode == 0, f"{name}: export: {r.stderr[-400:]}")
            model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager")
            tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
            want_class = CLASSES[name]
            expect(type(model).__name__ == want_class, f"{name}: loaded as {type(model).__name__}")
            with open(batches_path, encoding="utf-8") as f:
                batches = json.load(f)
            theirs = hf_loss(model.eval(), batches)
            expect(math.isfinite(theirs) and abs(theirs - amber_loss) <= 1e-5,
                   f"{name}: transformers' held-out loss {theirs:.9f} against amber's {amber_loss:.9f}")
            print(f"{name}: held-out loss amber {amber_loss:.9f}, transformers {theirs:.9f}")
            if name == "tiny":
                # bf16 weights: transformers reads them as bf16, and the loss moves by
                # the rounding only.
                half = hf_dir + "-bf16"
                r = run(["export", "hf", "--checkpoint", run_dir, "--out", half, "--dtype", "bf16"])
                expect(r.returncode == 0, f"{name}: bf16 export: {r.stderr[-300:]}")
                rounded = transformers.AutoModelForCausalLM.from_pretrained(half, attn_implementation="eager")
                expect(rounded.model.embed_tokens.weight.dtype == torch.bfloat16,
                       f"{name}: the bf16 folder loads as bf16: {rounded.model.embed_tokens.weight.dtype}")
                rounded_loss = hf_loss(rounded.float().eval(), batches)
                expect(0 < abs(rounded_loss - theirs) < 0.05,
                       f"{name}: bf16 weights' loss {rounded_loss} near the f32 one {theirs}")
            if name == "tiny":  # about 9 MB of f32 weights: shards of 1 MiB and their index
                sharded = hf_dir + "-sharded"
                r = run(["export", "hf", "--checkpoint", run_dir, "--out", sharded, "--shard-mb", "1"])
                expect(r.returncode == 0 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")),
                       f"{name}: sharded export: {r.stderr[-300:]}")
                from_shards = transformers.AutoModelForCausalLM.from_pretrained(sharded, attn_implementation="eager")
                expect(hf_loss(from_shards.eval(), batches) == theirs,
                       f"{name}: transformers loads the sharded folder to the same loss")
            bos = tokenizer.convert_tokens_to_ids("<|bos|>")
            expect(tokenizer.bos_token == "<|bos|>" and tokenizer.eos_token == "<|eos|>",
                   f"{name}: tokenizer_config's roles: {tokenizer.bos_token!r} {tokenizer.eos_token!r}")
            encoded = tokenizer("The")["input_ids"]
            expect(encoded[0] == bos and encoded[1:] == tokenizer("The", add_special_tokens=False)["input_ids"],
                   f"{name}: the tokenizer puts bos first, as amber trains: {encoded}")
            for prompt in PROMPTS:
                status, ours, err = amber_greedy(run, run_dir, prompt, 20)
                theirs_text = hf_greedy(model, tokenizer, prompt, 20)
                expect(status == 0 and len(ours) > len(prompt) and ours == theirs_text,
                       f"{name}: greedy text for {prompt!r}: amber {ours!r}, transformers {theirs_text!r} {err[-200:]}")

            # Back into amber: a fresh run from the exported folder holds its weights after
            # one step at learning rate 1e-30, an update far below every weight's last bit
            # (a run needs a step and a positive rate to write a checkpoint); the balance
            # bias's own step is made as small.
            again = os.path.join(tmp, name + "-again")
            tiny_step = ["--set", "train.steps=1", "--set", "train.checkpoint_every=1", "--set", "optimizer.lr=1e-30",
                         "--set", "train.eval_every=0"]
            if "moe_bias_update_rate" in model_table:
                tiny_step += ["--set", "model.moe_bias_update_rate=1e-30"]
            r = run(["train", config, "--quiet", "--init-from", hf_dir, "--set", f"train.out_dir={again}"] + tiny_step)
            if name == "gemma3":
                expect(r.returncode == 1 and "imports Llama and Qwen3" in r.stderr,
                       f"{name}: --init-from refuses a Gemma3-style run: {r.stderr[-400:]}")
                continue
            expect(r.returncode == 0, f"{name}: train --init-from: {r.stderr[-400:]}")
            r = run(["export", "hf", "--checkpoint", again, "--out", hf_dir + "-again"])
            expect(r.returncode == 0, f"{name}: export of the imported run: {r.stderr[-400:]}")
            first = load_file(os.path.join(hf_dir, "model.safetensors"))
            second = load_file(os.path.join(hf_dir + "-again", "model.safetensors"))
            # A balance bias of exactly zero comes back as +-1e-30 after its own step.
            def same(k):
                if k.endswith("e_score_correction_bias"):
                    return torch.allclose(first[k], second[k], rtol=0, atol=1e-20)
                return torch.equal(first[k], second[k])
            expect(first.keys() == second.keys() and all(same(k) for k in first),
                   f"{name}: export, import and export again gives identical weights: "
                   f"{[k for k in first if k not in second or not same(k)][:4]}")

            # A checkpoint transformers itself saved (its own config.json, sharded) imports
            # to the same weights: equal to the last bits the 1e-30 step may move (biases
            # that start at zero) and the residual scale's divide and multiply may round.
            stock = transformers.AutoModelForCausalLM.from_config(model.config)
            stock_dir = os.path.join(tmp, name + "-stock")
            stock.save_pretrained(stock_dir, max_shard_size="100KB")
            expect(os.path.exists(os.path.join(stock_dir, "model.safetensors.index.json")),
                   f"{name}: transformers sharded its checkpoint: {os.listdir(stock_dir)}")
            from_stock = os.path.join(tmp, name + "-from-stock")
            r = run(["train", config, "--quiet", "--init-from", stock_dir, "--set", f"train.out_dir={from_stock}"]
                    + tiny_step)
            expect(r.returncode == 0, f"{name}: --init-from a transformers checkpoint: {r.stderr[-400:]}")
            r = run(["export", "hf", "--checkpoint", from_stock, "--out", from_stock + "-hf"])
            back = load_file(os.path.join(from_stock + "-hf", "model.safetensors")) if r.returncode == 0 else {}
            # The files, not stock.state_dict(): transformers 5 holds a Qwen3-MoE layer's
            # experts fused in memory and writes them one by one, as amber reads them.
            saved = {}
            for shard in sorted(f for f in os.listdir(stock_dir) if f.endswith(".safetensors")):
                saved.update(load_file(os.path.join(stock_dir, shard)))
            theirs_state = {k: v for k, v in saved.items() if k in back}
            expect(len(theirs_state) == len(back) and all(torch.allclose(back[k], v, rtol=1e-6, atol=1e-20)
                                                          for k, v in theirs_state.items()),
                   f"{name}: transformers' own checkpoint comes back tensor for tensor: {r.stderr[-300:]}")
    sys.exit(checks.finish())


if __name__ == "__main__":
    main()
