"""PyTorch CPU reference of amber's dense model for the CPU step comparison.

The model of step_torch.py (pre-norm RMSNorm blocks, QK-norm, rotate-half RoPE with
per-document positions, grouped-query attention, SwiGLU with one fused gate/up
projection, an untied head with a summed cross-entropy over the batch's targets) in
float32 on the CPU, written as a PyTorch user would: attention is
F.scaled_dot_product_attention, causal within each document (one batched call when
every document has the same length, else one call per document), AdamW with
PyTorch's default CPU implementation, the gradient norm clipped at --grad-clip as
`amber bench step` does by default. Eager, or torch.compile with --compile. The
thread count is --threads for both PyTorch's intra-op pool and its inter-op pool.
"""

import argparse
import time

import torch
import torch.nn.functional as F

from step_torch import Batch, Model, add_model_arguments


def sdpa_by_document(q, k, v, cu, max_len):
    """Causal attention inside each document of packed [tokens, heads, head_dim] rows."""
    bounds = cu.tolist()
    lengths = {b - a for a, b in zip(bounds, bounds[1:])}
    if len(lengths) == 1:
        n = lengths.pop()
        batch = lambda x: x.view(-1, n, x.shape[1], x.shape[2]).transpose(1, 2)
        o = F.scaled_dot_product_attention(batch(q), batch(k), batch(v), is_causal=True, enable_gqa=True)
        return o.transpose(1, 2).reshape(q.shape)
    outs = []
    for a, b in zip(bounds, bounds[1:]):
        doc = lambda x: x[a:b].transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(doc(q), doc(k), doc(v), is_causal=True,
                                                   enable_gqa=True).transpose(0, 1))
    return torch.cat(outs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(p, vocab=4096, tokens=4096, doc_len="512")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    p.add_argument("--grad-clip", type=float, default=1.0)
    a = p.parse_args()
    a.moe_experts = 0  # step_torch.Model's dense blocks

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(a.threads)
    b = Batch(a, "cpu")
    tokens, targets, cos, sin, cu, max_len, n_targets, lengths = (
        b.tokens, b.targets, b.cos, b.sin, b.cu, b.max_len, b.n_targets, b.lengths)

    model = Model(a, attention=sdpa_by_document)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    fwd = torch.compile(model) if a.compile else model

    def step():
        loss = fwd(tokens, targets, cos, sin, cu, max_len, n_targets)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    seconds = (time.perf_counter() - t0) / a.steps
    params = sum(x.numel() for x in model.parameters())
    print(f"torch {torch.__version__} {'compiled' if a.compile else 'eager'} | {a.threads} threads | "
          f"{params / 1e6:.2f}M parameters | {a.tokens} tokens in {len(lengths)} documents ({a.doc_len}) | "
          f"step {seconds * 1e3:.2f} ms | {a.tokens / seconds:.0f} tokens/s | loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
