"""Kernel timing for the PyTorch reference scripts, as amber's benchmarks time theirs."""
import math

import torch


def best_ms(fn, repeats, calls=5):
    """Best of `repeats` timings of `calls` back-to-back calls, by CUDA events, after a warm-up."""
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / calls)
    return best
