"""PyTorch's side of issue 40's grouped GEMM comparison, on the very routing of
`amber bench kernel grouped --inputs-dir DIR` (DIR/grouped_cases.json holds each case's
per-expert counts and offsets, and amber's times once its run has finished).

Arms per case, bf16 operands drawn as amber draws them (x and dy normal, w normal with
std 1/sqrt(k)), rows sorted by expert: torch._grouped_mm for the four products amber
times (forward: x [M, K] by w [E, N, K] seen as [E, K, N]; SwiGLU forward: that product,
then silu(gate) * up as a second pass; backward input: dy [M, N] by w; backward weight:
dy^T [N, M] by x [M, K], k-grouped, written in bf16 where amber writes f32), and
torch._scaled_grouped_mm for the forward (e4m3 operands, one fp32 scale per row of x and
per row of each w_e, bf16 out; quantisation outside the timing). offs are the groups'
end rows (amber's offsets[1:]) as int32 on the GPU.

Columns as amber prints them: TFLOP/s counts 2 x rows x n x k; bytes are what each
product must move (activations in and out, the weights of experts with rows, every
expert's weight gradient), each at its dtype's size; the roofs (a device copy, a dense
bf16 torch.mm of 8192^3) are measured in this run. Errors: the first case of each shape
(its smallest token count) against float64 products, expert by expert. When amber's times are
in the file, a last table sets the two arms side by side.
"""

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

from cuda_timing import best_ms


def measure_roofs(repeats, gemm_size=8192):
    """Copy bandwidth (bytes read + written, TB/s) and dense bf16 torch.mm TFLOP/s."""
    a = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    copy_ms = best_ms(lambda: b.copy_(a), repeats, 1)
    del a, b
    x = torch.randn(gemm_size, gemm_size, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(gemm_size, gemm_size, device="cuda", dtype=torch.bfloat16)
    gemm_ms = best_ms(lambda: x @ w.t(), repeats, 1)
    return 2 * 2.0 * (1 << 28) / copy_ms / 1e9, 2.0 * gemm_size**3 / gemm_ms / 1e9


def quantize_rows(t):
    """e4m3 copy of t with one fp32 scale per row (over the last dim): t ~ q * scale."""
    amax = t.abs().amax(dim=-1).float().clamp(min=1e-12)
    scale = amax / torch.finfo(torch.float8_e4m3fn).max
    q = (t.float() / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    return q, scale


def error(product, got, x, w, dy, offsets):
    """Relative (Frobenius) error of one product's result against float64 products, expert
    by expert (no float64 copy of the whole weights or weight gradient is ever held)."""
    num = den = 0.0
    half = w.shape[1] // 2
    for e in range(w.shape[0]):
        s, t = offsets[e], offsets[e + 1]
        if product == "backward weight":  # an expert without rows must read zeros
            ref, part = dy[s:t].double().t() @ x[s:t].double(), got[e]
        elif s == t:
            continue
        elif product == "backward input":
            ref, part = dy[s:t].double() @ w[e].double(), got[s:t]
        else:
            ref, part = x[s:t].double() @ w[e].double().t(), got[s:t]
            if product == "swiglu forward":
                ref = F.silu(ref[:, :half]) * ref[:, half:]
        num += (part.double() - ref).pow(2).sum().item()
        den += ref.pow(2).sum().item()
    return math.sqrt(num / den)


def run_case(case, repeats, fast_accum, with_errors):
    """[(product, arm, ms, flops, bytes, error or None)] for one case."""
    e, n, k, half = case["experts"], case["n"], case["k"], case["n"] // 2
    offsets, counts = case["offsets"], case["counts"]
    m = offsets[-1]
    active = sum(1 for c in counts if c > 0)
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(e, n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(offsets[1:], device="cuda", dtype=torch.int32)
    flops = 2.0 * m * n * k
    act_k, act_n, active_w = 2.0 * m * k, 2.0 * m * n, 2.0 * active * n * k

    def swiglu():
        gate_up = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        return gate_up, F.silu(gate_up[:, :half]) * gate_up[:, half:]

    arms = [
        ("forward", "torch._grouped_mm bf16", act_k + active_w + act_n,
         lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)),
        ("swiglu forward", "torch._grouped_mm bf16 + silu * up", act_k + active_w + 1.5 * act_n,
         lambda: swiglu()[1]),
        ("backward input", "torch._grouped_mm bf16", act_n + active_w + act_k,
         lambda: torch._grouped_mm(dy, w, offs=offs)),
        ("backward weight", "torch._grouped_mm bf16 (bf16 dw)", act_n + act_k + 2.0 * e * n * k,
         lambda: torch._grouped_mm(dy.t(), x, offs=offs)),
    ]
    if not case.get("gate_up", True):  # a down projection: no SwiGLU forward
        arms = [arm for arm in arms if arm[0] != "swiglu forward"]
    xq, x_scale = quantize_rows(x)
    wq, w_scale = quantize_rows(w)  # [E, N, K] row-major: [E, K, N] column-major, as the op wants
    fp8 = lambda: torch._scaled_grouped_mm(xq, wq.transpose(-2, -1), x_scale, w_scale, offs=offs,
                                           out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
    fp8_bytes = m * k + active * n * k + 4.0 * (m + e * n) + act_n
    # Beside amber's "forward fp8" (e4m3 with 1x128 and 128x128 block scales).
    arms.append(("forward fp8", f"torch._scaled_grouped_mm e4m3 rowwise{' fast accum' if fast_accum else ''}",
                 fp8_bytes, fp8))
    rows = []
    for product, arm, nbytes, fn in arms:
        try:
            err = error(product, fn(), x, w, dy, offsets) if with_errors else None
            rows.append((product, arm, best_ms(fn, repeats), flops, nbytes, err))
        except (RuntimeError, TypeError, ValueError, AttributeError) as why:  # an arm this PyTorch or card lacks
            rows.append((product, f"{arm}: {str(why).splitlines()[0][:80]}", None, flops, nbytes, None))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs-dir", required=True,
                   help="the folder `amber bench kernel grouped --inputs-dir` wrote grouped_cases.json into")
    p.add_argument("--repeats", type=int, default=20, help="timings per arm (best is kept)")
    p.add_argument("--fp8-fast-accum", action="store_true",
                   help="torch._scaled_grouped_mm with use_fast_accum (no fp32 promotion of partial sums)")
    a = p.parse_args()
    path = os.path.join(a.inputs_dir, "grouped_cases.json")
    if not os.path.exists(path):
        raise SystemExit(f"grouped_torch.py: {path} is missing; run `amber bench kernel grouped --inputs-dir "
                         f"{a.inputs_dir}` first")
    cases = json.load(open(path))["cases"]
    copy_tbs, gemm_tflops = measure_roofs(a.repeats)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"roofs: device copy {copy_tbs:.3f} TB/s (read + write); dense bf16 torch.mm 8192^3 {gemm_tflops:.1f} TFLOP/s")
    print("| shape | tokens | routing | product | arm | error vs f64 | ms | TFLOP/s | TB/s | memory limit ms | "
          "compute limit ms | nearer limit | of it |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    seen, results = set(), []
    for case in cases:
        first = case["shape"] not in seen
        seen.add(case["shape"])
        for product, arm, ms, flops, nbytes, error in run_case(case, a.repeats, a.fp8_fast_accum, first):
            head = f"| {case['shape']} | {case['tokens']} | {case['routing']} | {product} | {arm} |"
            if ms is None:
                print(head + " - | - | - | - | - | - | - | - |", flush=True)
                continue
            memory_ms, compute_ms = nbytes / copy_tbs / 1e9, flops / gemm_tflops / 1e9
            bound = "memory" if memory_ms > compute_ms else "compute"
            err = f"{error:.1e}" if error is not None else "-"
            print(f"{head} {err} | {ms:.4f} | {flops / ms / 1e9:.1f} | {nbytes / ms / 1e9:.3f} | {memory_ms:.4f} | "
                  f"{compute_ms:.4f} | {bound} | {100 * max(memory_ms, compute_ms) / ms:.1f}% |", flush=True)
            results.append((case, product, arm, ms, flops, error))
    side_by_side(results)


def side_by_side(results):
    """amber's TFLOP/s (and, on each shape's first case, its error) beside each PyTorch arm's."""
    if not any(case.get("amber") for case, *_ in results):
        print("(amber's times are not in the file: its run did not finish)")
        return
    print("\n| shape | tokens | routing | product | error vs f64 amber / PyTorch | amber ms | amber TFLOP/s | "
          "PyTorch arm | PyTorch ms | PyTorch TFLOP/s | amber / PyTorch |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for case, product, arm, ms, flops, error in results:
        # amber's MXFP4-weight products have no PyTorch kernel of their format on Hopper;
        # they stand beside the bf16 arm of the same product, which they replace.
        for amber_product in (product, product + " mxfp4"):
            mine = case.get("amber", {}).get(amber_product)
            if not mine:
                continue
            errors = "-"
            if error is not None and mine.get("error", -1) >= 0:
                errors = f"{mine['error']:.1e} / {error:.1e}"
            print(f"| {case['shape']} | {case['tokens']} | {case['routing']} | {amber_product} | {errors} | "
                  f"{mine['ms']:.4f} | {mine['tflops']:.1f} | {arm} | {ms:.4f} | {flops / ms / 1e9:.1f} | "
                  f"{ms / mine['ms']:.2f}x |")


if __name__ == "__main__":
    main()
