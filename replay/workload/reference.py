"""Slow, obviously correct twins of the sampling kernels, for tests.

Everything here is plain Python on Python integers (masked to 64 bits) and `math`, one
lookup at a time, written for reading rather than speed. Tests check that the numba
kernels in `sampler` produce exactly the same rows, and that the rank draws follow the
exact pmf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from replay.workload import sampler as s

GAMMA = int(s.GAMMA)
MIX1 = int(s.MIX1)
MASK = s.MASK64


def mix64(z: int) -> int:
    return s._mix64_py(z)


def stream_key(root: int, batch: int, table: int, purpose: int) -> int:
    return s._stream_key_py(root, batch, table, purpose)


def uniform(key: int, counter: int) -> float:
    return (mix64((key + (counter + 1) * GAMMA) & MASK) >> 11) * s.INV_2_53


def h_integral(x: float, alpha: float) -> float:
    """H(x) = integral of t^-alpha: (x^(1-alpha) - 1) / (1 - alpha), or log x at alpha 1."""
    log_x = math.log(x)
    y = (1.0 - alpha) * log_x
    return (
        math.expm1(y) / y if abs(y) > 1e-8 else 1.0 + y * 0.5 * (1.0 + y / 3.0 * (1.0 + 0.25 * y))
    ) * log_x


def h_integral_inverse(x: float, alpha: float) -> float:
    t = max(x * (1.0 - alpha), -1.0)
    helper = math.log1p(t) / t if abs(t) > 1e-8 else 1.0 - t * (0.5 - t * (1.0 / 3.0 - 0.25 * t))
    return math.exp(helper * x)


def draw_rank(key: int, t: int, tables: s.SamplerTables) -> int:
    ip, fp = tables.iparams[t], tables.fparams[t]
    rows, head = int(ip[s.I_ROWS]), int(ip[s.I_HEAD])
    first = (key >> 11) * s.INV_2_53  # the key's own bits are the first uniform
    if head == 0:
        return int(first * rows) + 1
    if head == rows or first < fp[s.F_P_HEAD]:
        v = (first if head == rows else uniform(key, 1)) * head
        slot = int(v)
        off = int(ip[s.I_ALIAS_OFF])
        if v - slot < tables.alias_prob[off + slot]:
            return slot + 1
        return int(tables.alias_index[off + slot]) + 1
    alpha, lo, hi, sq, q = (
        float(fp[i]) for i in (s.F_ALPHA, s.F_TAIL_LO, s.F_TAIL_HI, s.F_TAIL_S, s.F_OFFSET)
    )
    attempt = 2
    while True:
        w = hi + uniform(key, attempt) * (lo - hi)
        x = h_integral_inverse(w, alpha) - q
        k = min(max(int(x + 0.5), head + 1), rows)
        if k - x <= sq or w >= h_integral(k + 0.5 + q, alpha) - math.exp(-alpha * math.log(k + q)):
            return k
        attempt += 1


def feistel(x: int, bits: int, keys: np.ndarray) -> int:
    wa = bits // 2
    wb = bits - wa
    a, b = x >> wb, x & ((1 << wb) - 1)
    for r in range(s.FEISTEL_ROUNDS):
        f = (((b + int(keys[r])) & MASK) * MIX1 & MASK) >> (64 - wa)
        a, b = b, a ^ f
        wa, wb = wb, wa
    return (a << wb) | b


def permute(p: int, rows: int, bits: int, keys: np.ndarray) -> int:
    x = feistel(p, bits, keys)
    while x >= rows:
        x = feistel(x, bits, keys)
    return x


def lookup_row(
    root: int, batch: int, t: int, j: int, batch_size: int, tables: s.SamplerTables
) -> int:
    """The row of lookup j of table t in batch `batch`, one step at a time."""
    ip, fp = tables.iparams[t], tables.fparams[t]
    rows, n_t = int(ip[s.I_ROWS]), batch_size * int(ip[s.I_POOLING])
    reuse, window = float(fp[s.F_REUSE]), int(ip[s.I_REUSE_WINDOW])
    b = batch
    while reuse > 0 and b > 0:  # follow repeats back to a fresh draw
        draw = mix64((stream_key(root, b, t, s.PURPOSE_REUSE) + (j + 1) * GAMMA) & MASK)
        if uniform(draw, 0) >= reuse:
            break
        back = 1 + int(uniform(draw, 1) * min(window, b))
        j = int(uniform(draw, 2) * n_t)
        b -= back
    key = mix64((stream_key(root, b, t, s.PURPOSE_FRESH) + (j + 1) * GAMMA) & MASK)
    rank = draw_rank(key, t, tables)
    drift, period = float(fp[s.F_DRIFT]), int(ip[s.I_DRIFT_PERIOD])
    shift = math.floor(drift * rows * ((b // period) * period)) % rows if drift else 0
    p = (rank - 1 - shift) % rows
    if ip[s.I_CONTIGUOUS]:
        return p
    return permute(p, rows, int(ip[s.I_BITS]), tables.round_keys[t])


def batch_lookups(
    root: int, batch: int, batch_size: int, tables: s.SamplerTables
) -> list[tuple[int, int]]:
    """(table, row) of every lookup of one batch, in trace order."""
    out: list[tuple[int, int]] = []
    for t in range(tables.iparams.shape[0]):
        n_t = batch_size * int(tables.iparams[t, s.I_POOLING])
        out.extend((t, lookup_row(root, batch, t, j, batch_size, tables)) for j in range(n_t))
    return out


def exact_pmf(
    rows: int, alpha: float, hot_shares: Sequence[float] = (), q: float = 0.0
) -> np.ndarray:
    """p(k) for k = 1..rows of the bounded power law with hot values: s_k for the hot
    ranks k <= j, (1 - sum s) (k + q)^-alpha / sum_(i > j) (i + q)^-alpha above (for
    distribution tests)."""
    k = np.arange(1, rows + 1, dtype=np.float64) + q
    w = k**-alpha
    if not len(hot_shares):
        return w / w.sum()
    j = len(hot_shares)
    pmf = np.empty(rows)
    pmf[:j] = hot_shares
    pmf[j:] = (1.0 - math.fsum(hot_shares)) * (w[j:] / w[j:].sum())
    return pmf
