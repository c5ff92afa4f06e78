"""Block-scaled FP8 products of a dense model's projections in PyTorch (cuBLASLt's
block-scaled e4m3 on sm_90, reached through torch._scaled_mm) beside the bf16 products
of the same shapes: the reference arm of issue 44's fp8_block recipe and a measure of
what cuBLASLt's block scaling delivers on this card.

Per projection of the preset (tokens x in -> out, as amber's Linear runs it), three
products, each timed in bf16 (torch.mm) and in FP8 (DeepSeek-V3's recipe):
  forward   y  = x w^T    x: 1x128 blocks along in, w: 128x128 tiles
  input     dx = dy w     dy: 1x128 along out, w^T: 128x128 tiles
  weight    dw = dy^T x   dy^T and x^T: 1x128 along the tokens
Quantisation is outside the timing (amber's quantisers are timed by amber). Each FP8
product's error is its relative Frobenius distance from the f32 product of the
dequantised operands (the format's rounding leaves the product itself exact up to
accumulation order), and the bf16 product's from the f32 product of the bf16 operands.

Usage: python3 fp8_linear_torch.py --dim 1536 --hidden 4096 --heads 24 --kv-heads 4
       --head-dim 64 [--tokens 16384] [--repeats 20]
"""

import argparse

import torch

from cuda_timing import best_ms

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max
BLOCK = 128


def quantize_rows(t):
    """t [R, C] -> e4m3 [R, C] and fp32 scales [R, C/128], one per 1x128 block of a row,
    the scales stored column-major (stride (1, R)) as cuBLASLt's 1x128 mode reads them."""
    r, c = t.shape
    blocks = t.float().view(r, c // BLOCK, BLOCK)
    scale = (blocks.abs().amax(dim=-1) / E4M3_MAX).clamp(min=1e-30)
    q = (blocks / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(r, c)
    return q, scale.t().contiguous().t()


def quantize_tiles(t):
    """t [R, C] -> e4m3 [R, C] and fp32 scales [R/128, C/128], one per 128x128 tile,
    row-major: the layout PyTorch 2.11 accepts. cuBLASLt reads rows padded to a multiple
    of 4 scales, so where C/128 is not one the FP8 error column shows wrong products
    (docs/perf/fp8.md); PyTorch refuses the padded layout."""
    r, c = t.shape
    tiles = t.float().view(r // BLOCK, BLOCK, c // BLOCK, BLOCK)
    scale = (tiles.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=1e-30)
    q = (tiles / scale[:, None, :, None]).to(torch.float8_e4m3fn).view(r, c)
    return q, scale.contiguous()


def dequantize_rows(q, scale):
    r, c = q.shape
    return (q.float().view(r, c // BLOCK, BLOCK) * scale.unsqueeze(-1)).view(r, c)


def dequantize_tiles(q, scale):
    r, c = q.shape
    return (q.float().view(r // BLOCK, BLOCK, c // BLOCK, BLOCK) * scale[:, None, :, None]).view(r, c)


def scaled_mm(a, b, scale_a, scale_b):
    """a [M, K] row-major e4m3 by b [K, N] column-major e4m3, bf16 out."""
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)


def rel_error(got, want):
    return ((got.float() - want).norm() / want.norm().clamp(min=1e-30)).item()


def projections(args):
    q_out = args.heads * args.head_dim
    kv_out = args.kv_heads * args.head_dim
    return [
        ("qkv", args.dim, q_out + 2 * kv_out),
        ("o", q_out, args.dim),
        ("gate_up", args.dim, 2 * args.hidden),
        ("down", args.hidden, args.dim),
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    torch.manual_seed(0)
    m = args.tokens
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {m} tokens")
    print(f"{'projection':<9} {'product':<8} {'shape (MxNxK)':<20} {'bf16 ms':>8} {'TFLOP/s':>8} "
          f"{'fp8 ms':>8} {'TFLOP/s':>8} {'fp8/bf16':>8} {'bf16 err':>9} {'fp8 err':>9}")
    totals = [0.0, 0.0]
    for name, k_in, n_out in projections(args):
        x = torch.randn(m, k_in, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n_out, k_in, device="cuda") / k_in**0.5).to(torch.bfloat16)
        dy = torch.randn(m, n_out, device="cuda", dtype=torch.bfloat16)
        xq, xs = quantize_rows(x)
        wq, ws = quantize_tiles(w)
        wtq, wts = quantize_tiles(w.t().contiguous())
        dyq, dys = quantize_rows(dy)
        dytq, dyts = quantize_rows(dy.t().contiguous())
        xtq, xts = quantize_rows(x.t().contiguous())
        cases = [
            # (product, bf16 call, fp8 call, fp8 reference, bf16 reference, M, N, K)
            ("forward", lambda: x @ w.t(), lambda: scaled_mm(xq, wq.t(), xs, ws.t()),
             lambda: dequantize_rows(xq, xs) @ dequantize_tiles(wq, ws).t(), lambda: x.float() @ w.float().t(),
             m, n_out, k_in),
            ("input", lambda: dy @ w, lambda: scaled_mm(dyq, wtq.t(), dys, wts.t()),
             lambda: dequantize_rows(dyq, dys) @ dequantize_tiles(wtq, wts).t(), lambda: dy.float() @ w.float(),
             m, k_in, n_out),
            ("weight", lambda: dy.t() @ x, lambda: scaled_mm(dytq, xtq.t(), dyts, xts.t()),
             lambda: dequantize_rows(dytq, dyts) @ dequantize_rows(xtq, xts).t(), lambda: dy.float().t() @ x.float(),
             n_out, k_in, m),
        ]
        for product, bf16, fp8, fp8_ref, bf16_ref, mm, nn, kk in cases:
            flops = 2.0 * mm * nn * kk
            bf16_ms = best_ms(bf16, args.repeats)
            bf16_err = rel_error(bf16(), bf16_ref())
            try:
                fp8_ms = best_ms(fp8, args.repeats)
                fp8_err = rel_error(fp8(), fp8_ref())
                fp8_cols = f"{fp8_ms:8.3f} {flops / fp8_ms / 1e9:8.1f} {bf16_ms / fp8_ms:7.2f}x"
                totals[1] += fp8_ms
            except RuntimeError as e:
                fp8_err = float("nan")
                fp8_cols = f"{'refused: ' + str(e).splitlines()[0][:60]}"
            totals[0] += bf16_ms
            print(f"{name:<9} {product:<8} {f'{mm}x{nn}x{kk}':<20} {bf16_ms:8.3f} {flops / bf16_ms / 1e9:8.1f} "
                  f"{fp8_cols} {bf16_err:9.2e} {fp8_err:9.2e}")
    print(f"all products of one block: bf16 {totals[0]:.3f} ms, fp8 {totals[1]:.3f} ms")


if __name__ == "__main__":
    main()
