"""Document lengths both arms of a comparison use: the fixed sequence amber's
spread_lengths produces (bench/attention_bench.cpp), so amber and PyTorch
train and time on identical document boundaries."""


def spread_lengths(tokens, lo, hi):
    lengths, left, i = [], tokens, 0
    while left > 0:
        n = min(left, lo + (i * 7919 + 13) % (hi - lo + 1))
        lengths.append(n)
        left -= n
        i += 1
    return lengths


def parse_range(spec):
    """'2048' or 'MIN-MAX' as (lo, hi)."""
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)
