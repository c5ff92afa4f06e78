"""PyTorch's side of issue 6's attention comparison, on the shapes of
`amber bench kernel attention` (A-F, the same document lengths).

Two arms per shape: torch.nn.attention.varlen.varlen_attn on the packed layout, and
scaled_dot_product_attention on documents padded to the longest one with the cuDNN
backend. FLOPs are counted as amber counts them (4 per visible causal pair per
head_dim forward, 2.5x that backward; padding is not counted), so TFLOP/s compare like
with like. Errors: the first document and first KV-head group against a float64
reference, as amber measures its own; with --inputs-dir (written by `amber bench
kernel attention --inputs-dir`) on amber's very inputs, else on fresh samples of the
same distributions.
Without enable_gqa in varlen_attn, K/V are repeated per query head outside the timing.
"""

import argparse
import inspect
import json
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.varlen import varlen_attn

from cuda_timing import best_ms
from doc_lengths import spread_lengths

SHAPES = {
    "A": (20, 4, 64, 0, "8x2048"),
    "B": (16, 4, 128, 0, "8x2048"),
    "C": (20, 4, 64, 0, "50-600"),
    "D": (16, 16, 128, 0, "4x8192"),
    "E": (16, 16, 128, 1024, "4x8192"),
    "F": (20, 4, 64, 0, "20-100"),
}
VARLEN_PARAMS = inspect.signature(varlen_attn).parameters


def lengths_of(spec):
    if "-" in spec:
        lo, hi = spec.split("-")
        return spread_lengths(16384, int(lo), int(hi))
    count, n = spec.split("x")
    return [int(n)] * int(count)


def forward_flops(lengths, heads, dim, window):
    pairs = sum(sum(min(i + 1, window) if window else i + 1 for i in range(n)) for n in lengths)
    return 4.0 * pairs * heads * dim


def varlen(q, k, v, cu, max_len, window):
    kwargs = {}
    if "enable_gqa" in VARLEN_PARAMS:
        kwargs["enable_gqa"] = True
    if "window_size" in VARLEN_PARAMS:
        kwargs["window_size"] = (window - 1 if window else -1, 0)
    else:
        assert not window, "this varlen_attn has no window_size"
        kwargs["is_causal"] = True
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kwargs)


def reference(q, k, v, dout, window):
    """float64 attention of one document, [n, H, D] with K/V already per query head."""
    q, k, v = (x.double().transpose(0, 1).requires_grad_() for x in (q, k, v))
    n = q.shape[1]
    i = torch.arange(n, device=q.device)
    visible = i[None, :] <= i[:, None]
    if window:
        visible &= i[None, :] > i[:, None] - window
    s = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    out = torch.softmax(s.masked_fill(~visible, -math.inf), dim=-1) @ v
    out.backward(dout.double().transpose(0, 1))
    return [x.transpose(0, 1) for x in (out.detach(), q.grad, k.grad, v.grad)]


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def load_bf16(path, shape):
    """A raw little-endian bf16 file as a CUDA tensor (int16 carries the bits)."""
    with open(path, "rb") as f:
        bits = torch.frombuffer(bytearray(f.read()), dtype=torch.int16)
    return bits.view(torch.bfloat16).reshape(shape).cuda()


def inputs(name, inputs_dir):
    """amber's inputs for this shape when inputs_dir holds them, else fresh samples."""
    heads, kv_heads, dim, window, spec = SHAPES[name]
    base = os.path.join(inputs_dir, name) if inputs_dir else None
    if base and os.path.exists(base + ".json"):
        geometry = json.load(open(base + ".json"))
        assert (geometry["heads"], geometry["kv_heads"], geometry["head_dim"], geometry["window"]) == \
            (heads, kv_heads, dim, window), f"{base}.json does not describe shape {name}"
        lengths = geometry["lengths"]
        t = sum(lengths)
        shapes = {"q": (t, heads, dim), "k": (t, kv_heads, dim), "v": (t, kv_heads, dim), "dout": (t, heads, dim)}
        return lengths, "amber's inputs", [load_bf16(f"{base}.{n}.bf16", s) for n, s in shapes.items()]
    lengths = lengths_of(spec)
    t = sum(lengths)
    torch.manual_seed(0)
    shapes = [(t, heads, dim), (t, kv_heads, dim), (t, kv_heads, dim), (t, heads, dim)]
    return lengths, "fresh samples", [torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in shapes]


def run_shape(name, repeats, inputs_dir):
    heads, kv_heads, dim, window, spec = SHAPES[name]
    lengths, source, (q, k, v, dout) = inputs(name, inputs_dir)
    t, group, max_len = sum(lengths), heads // kv_heads, max(lengths)
    if "enable_gqa" not in VARLEN_PARAMS and group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), device="cuda", dtype=torch.int32)
    flops = forward_flops(lengths, heads, dim, window)
    rows = []

    # varlen_attn, with errors on document 0 and the first KV group.
    out = varlen(q, k, v, cu, max_len, window)
    out.backward(dout)
    n = lengths[0]
    kr = k[:n, :1].repeat_interleave(group, dim=1) if k.shape[1] != heads else k[:n, :group]
    vr = v[:n, :1].repeat_interleave(group, dim=1) if v.shape[1] != heads else v[:n, :group]
    ref = reference(q[:n, :group].detach(), kr.detach(), vr.detach(), dout[:n, :group], window)
    kv_grad_rows = (k.grad[:n, :1] if k.shape[1] != heads else k.grad[:n, :group].sum(1, keepdim=True))
    vv_grad_rows = (v.grad[:n, :1] if v.shape[1] != heads else v.grad[:n, :group].sum(1, keepdim=True))
    errors = [rel(out[:n, :group], ref[0]), rel(q.grad[:n, :group], ref[1]),
              rel(kv_grad_rows, ref[2].sum(1, keepdim=True)), rel(vv_grad_rows, ref[3].sum(1, keepdim=True))]
    fwd = best_ms(lambda: varlen(q, k, v, cu, max_len, window), repeats)
    total = best_ms(lambda: varlen(q, k, v, cu, max_len, window).backward(dout), repeats)
    rows.append((f"varlen_attn ({source})", errors, fwd, total))

    # Padded SDPA on the cuDNN backend: [B, H, S, D], causal, no window support here.
    if not window:
        b = len(lengths)
        def padded(x):
            y = x.new_zeros(b, max_len, x.shape[1], dim)
            for d, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
                y[d, : e - s] = x[s:e]
            return y.transpose(1, 2).contiguous().detach().requires_grad_()
        pq, pk, pv, pdo = padded(q), padded(k), padded(v), padded(dout).detach()
        gqa = pk.shape[1] != heads
        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(pq, pk, pv, is_causal=True, enable_gqa=gqa)
        try:
            fwd = best_ms(sdpa, repeats)
            total = best_ms(lambda: sdpa().backward(pdo), repeats)
            rows.append(("sdpa cudnn padded", None, fwd, total))
        except RuntimeError as e:
            rows.append((f"sdpa cudnn padded: {str(e).splitlines()[0][:60]}", None, None, None))
    for arm, errors, fwd, total in rows:
        err = " / ".join(f"{x:.1e}" for x in errors) if errors else "-"
        if fwd is None:
            print(f"| {name} | {arm} | - | - | - | - | - |")
            continue
        print(f"| {name} | {arm} | {err} | {fwd:.3f} | {flops / fwd / 1e9:.1f} | {total:.3f} | "
              f"{3.5 * flops / total / 1e9:.1f} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="all", help="A, B, C, D, E, F or all")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--inputs-dir", default="", help="amber's inputs (amber bench kernel attention --inputs-dir)")
    a = p.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| shape | arm | error out / dq / dk / dv vs f64 | forward ms | forward TFLOP/s | fwd+bwd ms | "
          "fwd+bwd TFLOP/s |\n|---|---|---|---|---|---|---|")
    for name in SHAPES if a.shape == "all" else [a.shape]:
        run_shape(name, a.repeats, a.inputs_dir)


if __name__ == "__main__":
    main()
