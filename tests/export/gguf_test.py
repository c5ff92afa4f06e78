#!/usr/bin/env python3
"""`amber export gguf` read back by PyPI's `gguf` reader (llama.cpp's own Python
package): the architecture's metadata, the tokenizer's tokens (the padded vocabulary's
extra ids as unused [PADn] tokens), types, merges and special ids, and every tensor equal
to the Hugging Face export's under llama.cpp's name, with Llama's q and k rows in
llama.cpp's interleaved RoPE order and Qwen3's as they are. Where llama-cpp-python is
installed (a source build, which scripts/setup does not make), llama.cpp itself
continues three prompts greedily and must write amber's text. Exits 77 (skipped) without
`gguf`."""
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, DATA_TABLE  # noqa: E402

try:
    from gguf import GGUFReader
except ImportError:
    print("skipped: the gguf package is not installed (scripts/setup installs it from PyPI)")
    sys.exit(77)

PROMPTS = ["The", "Q: What is", "A scientist"]

RUN = """
[model]
vocab_size = 512
dim = 64
depth = 2
heads = 4
kv_heads = 2
mlp_hidden = 96
max_position = 256
{extra}

[train]
steps = 20
micro_batch_tokens = 1024
eval_every = 0
checkpoint_every = 20
out_dir = "{run}"
device = "cpu"

[optimizer]
name = "adamw"
lr = 1e-2
""" + DATA_TABLE

MODELS = {"qwen3": "qk_norm = true", "llama": "qk_norm = false\nattn_bias = true\ninit_std = 0.1"}

HF_TO_GGUF = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def read_safetensors(path):
    """name -> float32 array, for an F32 file."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(entry["shape"])
    return out


def gguf_name(hf):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    _, _, layer, rest = hf.split(".", 3)
    module, part = rest.rsplit(".", 1)
    return f"blk.{layer}.{HF_TO_GGUF[module]}.{part}"


def interleaved(rows, head_dim):
    """llama.cpp's llama rotates pairs (2j, 2j + 1), Hugging Face's halves (j, j + d/2):
    each head's rows reordered from [first half; second half] to alternating."""
    shape = rows.shape
    heads = shape[0] // head_dim
    return rows.reshape(heads, 2, head_dim // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def field(reader, key):
    return reader.fields[key].contents()


def check_llama_cpp(expect, run, name, run_dir, path):
    try:
        import llama_cpp
    except ImportError:
        print(f"{name}: llama-cpp-python is not installed: llama.cpp's own greedy text not checked")
        return
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, verbose=False)
    for prompt in PROMPTS:
        theirs = llm.create_completion(prompt, max_tokens=20, temperature=0.0, top_k=1)["choices"][0]["text"]
        r = run(["sample", "--checkpoint", run_dir, "--prompt", prompt, "--max-tokens", "20", "--temperature", "0"])
        ours = r.stdout.split("--- sample 1\n", 1)[-1][:-1]
        print(f"{name}: {prompt!r}: amber {ours!r}, llama.cpp {prompt + theirs!r}")
        expect(r.returncode == 0 and ours == prompt + theirs,
               f"{name}: llama.cpp's greedy text for {prompt!r}: {prompt + theirs!r}, amber's {ours!r}")


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect
    with tempfile.TemporaryDirectory() as tmp:
        tok, shards = checks.corpus(tmp, 400)
        with open(tok, encoding="utf-8") as f:
            tokenizer = json.load(f)
        for name, extra in MODELS.items():
            run_dir, hf, path = (os.path.join(tmp, name + suffix) for suffix in ("", "-hf", ".gguf"))
            config = os.path.join(tmp, name + ".toml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(RUN.format(extra=extra, run=run_dir, shards=shards, tok=tok))
            r = run(["train", config, "--quiet"])
            expect(r.returncode == 0, f"{name}: train: {r.stderr[-300:]}")
            r = run(["export", "hf", "--checkpoint", run_dir, "--out", hf])
            expect(r.returncode == 0, f"{name}: export hf: {r.stderr[-300:]}")
            r = run(["export", "gguf", "--checkpoint", run_dir, "--out", path])
            expect(r.returncode == 0 and f"GGUF {name} (f32)" in r.stdout, f"{name}: export gguf: {r.stderr[-300:]}")
            if r.returncode != 0:
                continue
            reader = GGUFReader(path)
            expect(field(reader, "general.architecture") == name, f"{name}: architecture")
            for key, want in [("block_count", 2), ("embedding_length", 64), ("feed_forward_length", 96),
                              ("attention.head_count", 4), ("attention.head_count_kv", 2), ("context_length", 256),
                              ("rope.dimension_count", 16)]:
                got = field(reader, f"{name}.{key}")
                expect(got == want, f"{name}: {name}.{key} is {got}, want {want}")
            tokens = field(reader, "tokenizer.ggml.tokens")
            types = field(reader, "tokenizer.ggml.token_type")
            vocab = tokenizer["model"]["vocab"]
            added = {t["id"]: t["content"] for t in tokenizer["added_tokens"]}
            expect(len(tokens) == 512 and all(tokens[i] == t for t, i in vocab.items())
                   and all(tokens[i] == t for i, t in added.items()), f"{name}: the tokens by id")
            expect(tokens[450] == "[PAD450]" and types[450] == 5 and types[0] == 1,
                   f"{name}: padded ids are unused tokens: {tokens[450]!r} {types[450]}")
            expect(types[tokens.index("<|bos|>")] == 3, f"{name}: <|bos|> is a control token")
            expect(field(reader, "tokenizer.ggml.bos_token_id") == tokens.index("<|bos|>")
                   and field(reader, "tokenizer.ggml.eos_token_id") == tokens.index("<|eos|>")
                   and field(reader, "tokenizer.ggml.add_bos_token") is True, f"{name}: special tokens")
            expect(field(reader, "tokenizer.ggml.pre") == "llama-bpe", f"{name}: amber's llama3 style is llama-bpe")
            merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
            expect(field(reader, "tokenizer.ggml.merges") == merges, f"{name}: merges")

            weights = read_safetensors(os.path.join(hf, "model.safetensors"))
            stored = {t.name: t for t in reader.tensors}
            expect(sorted(stored) == sorted(gguf_name(n) for n in weights), f"{name}: tensor names {sorted(stored)}")
            for hf_name, value in weights.items():
                t = stored.get(gguf_name(hf_name))
                if t is None:
                    continue
                want = value
                if name == "llama" and (".q_proj." in hf_name or ".k_proj." in hf_name):
                    want = interleaved(value, 16)
                got = np.asarray(t.data).reshape(value.shape)
                expect(list(t.shape) == list(reversed(value.shape)) and np.array_equal(got, want),
                       f"{name}: {t.name} equals {hf_name}{' interleaved' if want is not value else ''}")
            check_llama_cpp(expect, run, name, run_dir, path)
            r = run(["export", "gguf", "--checkpoint", run_dir, "--out", path + ".bf16", "--dtype", "bf16"])
            types = {t.name: t.tensor_type.name for t in GGUFReader(path + ".bf16").tensors} if r.returncode == 0 else {}
            expect(types.get("blk.0.ffn_up.weight") == "BF16" and types.get("blk.0.attn_norm.weight") == "F32"
                   and field(GGUFReader(path + ".bf16"), "general.file_type") == 32,
                   f"{name}: --dtype bf16 stores matrices in bf16, vectors in f32: {r.stderr[-200:]} {types}")

        r = run(["export", "gguf", "--checkpoint", os.path.join(tmp, "llama"), "--out", os.path.join(tmp, "llama.gguf")])
        expect(r.returncode == 1 and "already exists" in r.stderr, f"an existing --out: {r.stderr[-300:]}")
    sys.exit(checks.finish())


if __name__ == "__main__":
    main()
