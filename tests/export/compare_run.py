#!/usr/bin/env python3
"""Greedy text of one amber run three ways: `amber sample --temperature 0`, stock
transformers on `amber export hf`'s folder and llama.cpp (llama-cpp-python) on `amber
export gguf`'s file, 20 new tokens after each prompt; also the held-out loss of amber and
of transformers on amber's evaluation batches. Prints every text and exits 1 on any
difference. For a trained run such as the README demo's (docs/interop.md records the
result); the ctest checks use short runs of their own.

  python3 tests/export/compare_run.py --amber build/amber --run runs/demo"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import llama_cpp
import torch
import transformers

PROMPTS = ["Q: What", "It is", "A scientist"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amber", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()

    def amber(*a):
        r = subprocess.run([args.amber, *a], capture_output=True, encoding="utf-8", errors="replace")
        if r.returncode != 0:
            sys.exit(f"amber {' '.join(a)}: {r.stderr}")
        return r.stdout

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        hf, gguf, batches = (os.path.join(tmp, n) for n in ("hf", "model.gguf", "batches.json"))
        amber("export", "hf", "--checkpoint", args.run, "--out", hf)
        amber("export", "gguf", "--checkpoint", args.run, "--out", gguf)
        ours_loss = float(re.search(r"val_loss (\S+)", amber("eval", "--checkpoint", args.run,
                                                              "--batches-out", batches)).group(1))
        model = transformers.AutoModelForCausalLM.from_pretrained(hf, attn_implementation="eager").eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
        total, count = 0.0, 0
        with torch.no_grad(), open(batches, encoding="utf-8") as f:
            for b in json.load(f):
                cu = b["cu_seqlens"]
                for s, e in zip(cu[:-1], cu[1:]):
                    logits = model(input_ids=torch.tensor([b["tokens"][s:e]]),
                                   position_ids=torch.tensor([b["positions"][s:e]])).logits[0].double()
                    targets = torch.tensor(b["targets"][s:e])
                    total += torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100,
                                                               reduction="sum").item()
                    count += int((targets != -100).sum())
        theirs_loss = total / count
        print(f"held-out loss over {count} tokens: amber {ours_loss:.9f}, transformers {theirs_loss:.9f}")
        failures += abs(ours_loss - theirs_loss) > 1e-5
        llm = llama_cpp.Llama(model_path=gguf, n_ctx=512, verbose=False)
        extra = list(range(len(tokenizer), model.config.vocab_size)) or None
        for prompt in PROMPTS:
            sample = amber("sample", "--checkpoint", args.run, "--prompt", prompt, "--max-tokens", str(args.tokens),
                           "--temperature", "0")
            ours = sample.split("--- sample 1\n", 1)[-1][:-1]
            ids = tokenizer(prompt)["input_ids"]
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=args.tokens, suppress_tokens=extra)[0, len(ids):]
            new = out.tolist()
            if new and new[-1] == tokenizer.eos_token_id:
                new.pop()
            hf_text = prompt + tokenizer.decode(new)
            cpp = llm.create_completion(prompt, max_tokens=args.tokens, temperature=0.0, top_k=1)
            cpp_text = prompt + cpp["choices"][0]["text"]
            same = ours == hf_text == cpp_text
            failures += not same
            print(f"{'same' if same else 'DIFFERENT'}: {prompt!r}\n  amber        {ours!r}\n"
                  f"  transformers {hf_text!r}\n  llama.cpp    {cpp_text!r}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
