"""PyTorch reference of amber's dense model for the whole-step comparison.

Same shapes as `amber bench step`: pre-norm blocks with RMSNorm, q/k/v/o projections,
QK-norm, rotate-half RoPE with per-document positions, packed varlen causal
attention (torch.nn.attention.varlen), SwiGLU with one fused gate/up projection, an
untied head with cross-entropy; fp32 master weights under bf16 autocast, the global
gradient norm clipped where asked (`--grad-clip`, as amber's `train.grad_clip`), fused
AdamW, torch.compile on. FLOPs are counted exactly as amber counts them
(docs/flops.md), so the MFU columns compare like with like.

With --moe-experts the blocks after the first --moe-first-dense are DeepSeekMoE layers
as amber builds them (model.moe_*): an fp32 sigmoid router whose top-k is chosen with
the auxiliary-loss-free balance bias (updated after each step from the step's load),
normalised gate weights, a stable sort of the token copies by expert, both expert
products through torch._grouped_mm (bf16, one call per product for all experts), the
weighted copies summed back with index_add_, plus the shared experts as one SwiGLU.
MFU counts active parameters (router, top-k and shared experts), as amber does; the
last step's routing is printed as `amber bench step` prints it, so the two arms' expert
loads (which the weight gradients' times depend on) can be compared.
"""

import argparse
import inspect
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.varlen import varlen_attn

from card_state import CardSampler
from doc_lengths import parse_range, spread_lengths

VARLEN_PARAMS = inspect.signature(varlen_attn).parameters


def causal_varlen(q, k, v, cu, max_len):
    kwargs = {}
    if "enable_gqa" in VARLEN_PARAMS:
        kwargs["enable_gqa"] = True
    elif k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    if "is_causal" in VARLEN_PARAMS:
        kwargs["is_causal"] = True
    else:
        kwargs["window_size"] = (-1, 0)
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kwargs)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class SwiGlu(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_up_proj = nn.Linear(dim, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class MoeMlp(nn.Module):
    def __init__(self, dim, a):
        super().__init__()
        self.experts, self.top_k, self.bias_rate = a.moe_experts, a.moe_top_k, a.moe_bias_update_rate
        self.router = nn.Linear(dim, a.moe_experts, bias=False)
        self.gate_up_proj = nn.Parameter(torch.randn(a.moe_experts, 2 * a.moe_hidden, dim) * dim ** -0.5)
        self.down_proj = nn.Parameter(torch.randn(a.moe_experts, dim, a.moe_hidden) * a.moe_hidden ** -0.5)
        self.shared = SwiGlu(dim, a.moe_shared * a.moe_hidden) if a.moe_shared > 0 else None
        self.register_buffer("balance_bias", torch.zeros(a.moe_experts))
        self.register_buffer("load", torch.zeros(a.moe_experts))
        self.register_buffer("last_load", torch.zeros(a.moe_experts))  # the last step's, for the report

    def forward(self, x):
        t = x.shape[0]
        with torch.autocast("cuda", enabled=False):
            scores = torch.sigmoid(F.linear(x.float(), self.router.weight))
        chosen = torch.topk(scores.detach() + self.balance_bias, self.top_k, dim=-1).indices
        weights = scores.gather(1, chosen)
        weights = weights / weights.sum(-1, keepdim=True)
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(self.experts, dtype=torch.int32, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat, dtype=torch.int32))
        self.load.add_(counts.float())
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        token_of_row = order // self.top_k
        xs = x.to(torch.bfloat16).index_select(0, token_of_row)
        gate, up = torch._grouped_mm(xs, self.gate_up_proj.to(torch.bfloat16).transpose(-2, -1),
                                     offs=offsets).chunk(2, dim=-1)
        ys = torch._grouped_mm(F.silu(gate) * up, self.down_proj.to(torch.bfloat16).transpose(-2, -1), offs=offsets)
        ys = ys * weights.reshape(-1)[order, None].to(ys.dtype)
        out = torch.zeros(t, x.shape[1], dtype=ys.dtype, device=x.device).index_add_(0, token_of_row, ys)
        return out + self.shared(x) if self.shared is not None else out

    @torch.no_grad()
    def update_bias(self):
        self.balance_bias.add_(self.bias_rate * torch.sign(self.load.mean() - self.load))
        self.last_load.copy_(self.load)
        self.load.zero_()


def routing_report(loads):
    """The line amber's `bench step` prints for its last step's routing, from each MoE
    layer's rows per expert (the busiest expert over the mean, worst layer and averaged;
    experts that got no row)."""
    ratios = [max(load) / (sum(load) / len(load)) for load in loads]
    worst = max(range(len(ratios)), key=lambda i: ratios[i])
    dead = sum(sum(1 for rows in load if rows == 0) for load in loads)
    return (f"routing of the last step: busiest expert {ratios[worst]:.2f}x the mean rows (MoE layer {worst}), "
            f"{sum(ratios) / len(ratios):.2f}x averaged over the {len(ratios)} MoE layers | dead experts {dead}")


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, head_dim, hidden, moe=None, attention=causal_varlen):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.attention = attention
        self.attn_norm = nn.RMSNorm(dim, eps=1e-6)
        self.q_proj = nn.Linear(dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.mlp_norm = nn.RMSNorm(dim, eps=1e-6)
        self.mlp = MoeMlp(dim, moe) if moe is not None else SwiGlu(dim, hidden)

    def forward(self, x, cos, sin, cu, max_len):
        t = x.shape[0]
        h = self.attn_norm(x)
        q = self.q_norm(self.q_proj(h).view(t, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(h).view(t, self.kv_heads, self.head_dim))
        v = self.v_proj(h).view(t, self.kv_heads, self.head_dim)
        q, k = rope(q, cos, sin).to(v.dtype), rope(k, cos, sin).to(v.dtype)
        o = self.attention(q, k, v, cu, max_len)
        x = x + self.o_proj(o.reshape(t, -1))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    # attention(q, k, v, cu, max_len): causal attention within each document of the
    # packed [tokens, heads, head_dim] rows, documents starting at cu[i].
    def __init__(self, a, attention=causal_varlen):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(
            Block(a.dim, a.heads, a.kv_heads, a.head_dim, a.mlp_hidden, a if sparse(a, i) else None, attention)
            for i in range(a.depth))
        self.norm = nn.RMSNorm(a.dim, eps=1e-6)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, tokens, targets, cos, sin, cu, max_len, n_targets):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, cu, max_len)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float(), targets, ignore_index=-100, reduction="sum") / n_targets


def sparse(a, layer):
    """Whether block `layer` is an MoE block (amber's ModelConfig::layer_is_sparse)."""
    return a.moe_experts > 0 and layer >= a.moe_first_dense and (layer - a.moe_first_dense) % a.moe_every == 0


def add_model_arguments(p, vocab, tokens, doc_len):
    """The model's shape, the batch and the seed, as both PyTorch references take them."""
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--depth", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--mlp-hidden", type=int, required=True)
    p.add_argument("--vocab", type=int, default=vocab)
    p.add_argument("--tokens", type=int, default=tokens)
    p.add_argument("--doc-len", default=doc_len, help="length or MIN-MAX (the fixed spread amber uses too)")
    p.add_argument("--seed", type=int, default=1)


class Batch:
    """The packed batch of both references, on device `dev`: random tokens in documents of
    amber's lengths, next-token targets within each document, RoPE's cos and sin at each
    token's position in its document. Seeds torch from a.seed."""

    def __init__(self, a, dev):
        torch.manual_seed(a.seed)
        g = torch.Generator().manual_seed(a.seed)
        self.lengths = spread_lengths(a.tokens, *parse_range(a.doc_len))
        self.cu = torch.tensor([0] + list(torch.tensor(self.lengths).cumsum(0)), dtype=torch.int32, device=dev)
        positions = torch.cat([torch.arange(n) for n in self.lengths]).to(dev)
        tokens = torch.randint(0, a.vocab, (a.tokens,), generator=g)
        targets = torch.full((a.tokens,), -100, dtype=torch.long)
        start = 0
        for n in self.lengths:
            targets[start:start + n - 1] = tokens[start + 1:start + n]
            start += n
        self.tokens, self.targets = tokens.to(dev), targets.to(dev)
        self.n_targets = int((targets != -100).sum())
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, a.head_dim, 2, device=dev).float() / a.head_dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        self.cos, self.sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        self.max_len = max(self.lengths)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(p, vocab=65536, tokens=16384, doc_len="2048")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--warmup-seconds", type=float, default=2.0,
                   help="after the --warmup steps (compilation among them), keep warming up for this long, "
                        "as amber bench step does (the card reaches its power cap's steady clocks within a "
                        "second or two)")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="clip the global gradient norm to this before the update "
                        "(torch.nn.utils.clip_grad_norm_); 0: no clipping")
    p.add_argument("--moe-experts", type=int, default=0, help="routed experts per MoE layer; 0: a dense model")
    p.add_argument("--moe-top-k", type=int, default=8)
    p.add_argument("--moe-hidden", type=int, default=384, help="width of one expert")
    p.add_argument("--moe-shared", type=int, default=1, help="shared experts (one SwiGLU of this many widths)")
    p.add_argument("--moe-first-dense", type=int, default=1, help="leading blocks with the dense MLP")
    p.add_argument("--moe-every", type=int, default=1, help="every this many blocks after those is sparse")
    p.add_argument("--moe-bias-update-rate", type=float, default=0.001)
    a = p.parse_args()

    dev = "cuda"
    b = Batch(a, dev)
    tokens, targets, cos, sin, cu, max_len, n_targets, lengths = (
        b.tokens, b.targets, b.cos, b.sin, b.cu, b.max_len, b.n_targets, b.lengths)

    model = Model(a).to(dev)
    moe_layers = [m for m in model.modules() if isinstance(m, MoeMlp)]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = model if a.no_compile else torch.compile(model)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(tokens, targets, cos, sin, cu, max_len, n_targets)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for m in moe_layers:
            m.update_bias()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    warm = time.perf_counter()
    while time.perf_counter() - warm < a.warmup_seconds:
        step()
        torch.cuda.synchronize()  # the clock measures work done, not work queued
    torch.cuda.reset_peak_memory_stats()
    with CardSampler(torch.cuda.get_device_properties(dev)) as card:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / a.steps

    q_dim = a.heads * a.head_dim
    kv_dim = a.kv_heads * a.head_dim
    moe_active = a.moe_experts * a.dim + (a.moe_top_k + a.moe_shared) * 3 * a.dim * a.moe_hidden
    block_params = sum(a.dim * q_dim + 2 * a.dim * kv_dim + q_dim * a.dim +
                       (moe_active if sparse(a, i) else 3 * a.dim * a.mlp_hidden) for i in range(a.depth))
    pairs = sum(n * (n + 1) / 2 for n in lengths)
    flops = 3 * (2 * block_params * a.tokens + a.depth * 4 * q_dim * pairs + 2 * a.dim * a.vocab * a.tokens)
    if moe_layers:  # before the result line, which step_compare.sh reads as the last
        print(routing_report([m.last_load.tolist() for m in moe_layers]))
    print(f"torch {torch.__version__} {'compiled' if not a.no_compile else 'eager'} | {a.tokens} tokens in "
          f"{len(lengths)} documents ({a.doc_len}) | step {seconds * 1e3:.2f} ms | {a.tokens / seconds:.0f} tokens/s | "
          f"MFU {100 * flops / seconds / (a.peak_tflops * 1e12):.1f}% of {a.peak_tflops:.0f} TFLOP/s | "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB | loss {float(loss):.4f}{card.report()}")


if __name__ == "__main__":
    main()
