"""The lookups of a range of batches: the access model of `replay.workload.sampler` drawn
for every table and position, in trace order (`generate_lookups`).

A table whose tail has a guide (`sampler.build_tail_guide`) and whose lookups are all
fresh draws (no reuse, no drift) is drawn in blocks of BLOCK positions, in four passes
over the block instead of one lookup after another: (1) each position's three uniforms
(the head-or-tail coin, the alias slot's, the tail's), pure arithmetic that the compiler
runs in SIMD lanes; (2) both the head's rank (alias table) and the tail's (guide), chosen
by the coin with a select, not a branch (the coin is unpredictable: at meta-2021's
tables it takes the tail 36-86% of the time); (3) one pass of the permutation's Feistel
network on every position (SIMD again); (4) the row: the precomputed permutation of a
head position or the Feistel output, finished one lookup at a time where the guide gave
no rank (0.1-2% of tail draws: near a rank's boundary or past the squeeze) or the
permutation walks its cycle. Each pass computes what the one-at-a-time loop computes, in
the same floating-point operations, so every row is the same (tests compare the two
loops); measured on meta-2021's three laws with a tail, 16-27% less time a lookup.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.workload.sampler import (
    F_ALPHA,
    F_DRIFT,
    F_OFFSET,
    F_P_HEAD,
    F_REUSE,
    F_TAIL_HI,
    F_TAIL_LO,
    F_TAIL_S,
    GAMMA,
    GUIDE_BUCKETS,
    I_ALIAS_OFF,
    I_BITS,
    I_CONTIGUOUS,
    I_DRIFT_PERIOD,
    I_GUIDE_OFF,
    I_HEAD,
    I_PERM_LEN,
    I_PERM_OFF,
    I_POOLING,
    I_REUSE_WINDOW,
    I_ROWS,
    PURPOSE_FRESH,
    draw_rank_scalar,
    drift_shift,
    feistel_permute,
    mix64,
    permute_index,
    source_of,
    stream_key,
    uniform,
    unit,
)

BLOCK = 1024  # positions a pass covers: its six arrays (40 KB) stay in the L1/L2 cache


@kernel(inline="always")
def drawn_position(
    root: np.uint64, b: np.int64, t: np.int64, j: np.int64, n_t: np.int64,
    fresh_key: np.uint64, rows: np.int64, head: np.int64, alias_off: np.int64,
    window: np.int64, alpha: float, p_head: float, lo: float, hi: float, sq: float,
    reuse: float, drift: float, q: float, period: np.int64, alias_prob: np.ndarray,
    alias_index: np.ndarray, guide: np.ndarray, goff: np.int64,
) -> np.int64:  # fmt: skip
    """Lookup j of table t's n_t in batch b as a position of its pmf (rank - 1, drift
    applied), before the row permutation: a reused lookup repeats its source's draw.
    `fresh_key`: `stream_key(root, b, t, PURPOSE_FRESH)`."""
    src_b = b
    src_j = j
    key = fresh_key
    if reuse > 0.0:
        src_b, src_j = source_of(root, b, t, j, n_t, reuse, window)
        if src_b != b:
            key = stream_key(root, src_b, t, PURPOSE_FRESH)
    draw_key = mix64(key + np.uint64(src_j + 1) * GAMMA)
    p = draw_rank_scalar(
        draw_key, rows, head, p_head, alias_off, alpha, lo, hi, sq,
        alias_prob, alias_index, q, guide, goff,
    ) - 1  # fmt: skip
    if drift != 0.0:  # an integer modulo costs more than the rest
        p = (p - drift_shift(src_b, rows, drift, period)) % rows
    return p


@kernel(inline="always")
def _fill_table(
    root: np.uint64, b: np.int64, t: np.int64, n_t: np.int64, rows: np.int64,
    head: np.int64, alias_off: np.int64, window: np.int64, contiguous: bool, bits: np.int64,
    perm_off: np.int64, perm_len: np.int64, alpha: float, p_head: float, lo: float,
    hi: float, sq: float, reuse: float, drift: float, q: float, period: np.int64,
    keys: np.ndarray, alias_prob: np.ndarray, alias_index: np.ndarray, perm: np.ndarray,
    guide: np.ndarray, goff: np.int64, out_row: np.ndarray, out: np.int64,
) -> None:  # fmt: skip
    """Table t's n_t lookups of batch b into out_row[out:]."""
    fresh_key = stream_key(root, b, t, PURPOSE_FRESH)
    for j in range(n_t):
        p = drawn_position(
            root, b, t, j, n_t, fresh_key, rows, head, alias_off, window, alpha, p_head,
            lo, hi, sq, reuse, drift, q, period, alias_prob, alias_index, guide, goff,
        )  # fmt: skip
        if not contiguous:
            if p < perm_len:
                p = np.int64(perm[ix(perm_off + p)])
            else:
                p = permute_index(p, rows, bits, keys)
        out_row[ix(out + j)] = p


@kernel(inline="always")
def _fill_blocks(
    root: np.uint64, b: np.int64, t: np.int64, n_t: np.int64, rows: np.int64,
    head: np.int64, alias_off: np.int64, bits: np.int64, perm_off: np.int64,
    perm_len: np.int64, alpha: float, p_head: float, lo: float, hi: float, sq: float,
    q: float, keys: np.ndarray, alias_prob: np.ndarray, alias_index: np.ndarray,
    perm: np.ndarray, guide: np.ndarray, goff: np.int64, out_row: np.ndarray, out: np.int64,
    coin: np.ndarray, slot_u: np.ndarray, tail_u: np.ndarray, pos: np.ndarray,
    fei: np.ndarray, miss: np.ndarray,
) -> None:  # fmt: skip
    """`_fill_table` of a permuted table with a guide and fresh draws only, in blocks of
    passes (the module's docstring); the same rows."""
    fresh_key = stream_key(root, b, t, PURPOSE_FRESH)
    last = perm_len - 1
    for start in range(0, n_t, BLOCK):
        m = BLOCK if n_t - start > BLOCK else n_t - start
        for j in range(m):  # (1) the uniforms, as draw_rank_scalar takes them
            key = mix64(fresh_key + np.uint64(start + j + 1) * GAMMA)
            coin[j] = unit(key)
            slot_u[j] = uniform(key, 1) * head
            tail_u[j] = uniform(key, 2)
        for j in range(m):  # (2) the head's rank and the guide's, one chosen
            v = slot_u[j]
            slot = np.int64(v)
            other = np.int64(alias_index[ix(alias_off + slot)])
            head_rank = slot if v - slot < alias_prob[ix(alias_off + slot)] else other
            f = tail_u[j] * GUIDE_BUCKETS
            i = np.int64(f)
            w = f - i
            g = ix(goff + i)
            x = guide[g, 0] + w * (guide[g, 1] + w * guide[g, 2])
            e = guide[g, 3]
            k = np.int64(x + 0.5)
            # guided_rank's test, as a value (& for and: no branch)
            sure = (head < k) & (k <= rows) & (x + e < k + 0.5) & (x - e >= k - 0.5)
            sure &= x - e >= k - sq
            is_head = coin[j] < p_head
            pos[j] = head_rank if is_head else k - 1
            miss[j] = not (is_head or sure)
        for j in range(m):  # (3) the Feistel network's first pass
            fei[j] = np.int64(feistel_permute(np.uint64(pos[j]), bits, keys))
        for j in range(m):  # (4) the row
            p = pos[j]
            row = np.int64(perm[ix(perm_off + min(max(p, 0), last))])
            if p >= perm_len:
                row = fei[j]
            if miss[j] or row >= rows:
                if miss[j]:  # the draw the guide did not answer, as _fill_table makes it
                    key = mix64(fresh_key + np.uint64(start + j + 1) * GAMMA)
                    p = draw_rank_scalar(
                        key, rows, head, p_head, alias_off, alpha, lo, hi, sq,
                        alias_prob, alias_index, q, guide, goff,
                    ) - 1  # fmt: skip
                    if p < perm_len:
                        row = np.int64(perm[ix(perm_off + p)])
                    else:
                        row = permute_index(p, rows, bits, keys)
                else:  # permute_index's cycle walking, after its first pass
                    x = np.uint64(row)
                    while x >= np.uint64(rows):
                        x = feistel_permute(x, bits, keys)
                    row = np.int64(x)
            out_row[ix(out + start + j)] = row


@kernel
def generate_lookups(
    root: np.uint64,
    batch_start: np.int64,
    batch_stop: np.int64,
    batch_size: np.int64,
    ip: np.ndarray,
    fp: np.ndarray,
    round_keys: np.ndarray,
    alias_prob: np.ndarray,
    alias_index: np.ndarray,
    perm: np.ndarray,
    guide: np.ndarray,
    out_batch: np.ndarray,
    out_table: np.ndarray,
    out_row: np.ndarray,
    table_start: np.int64 | int = 0,
    table_stop: np.int64 | int = -1,
) -> None:
    """Fill the lookups of batches [batch_start, batch_stop), sorted by (batch, table),
    of tables [table_start, table_stop) (-1: to the last): a piece of a batch too large
    for one row group holds a range of its tables, drawn exactly as the whole batch
    draws them (every draw is a function of (batch, table, position) alone).

    Within a (batch, table) group lookups are in sample order: sample i's pooling
    lookups sit at positions i * pooling ... i * pooling + pooling - 1.
    """
    num_tables = ip.shape[0] if table_stop < 0 else table_stop
    coin = np.empty(BLOCK, dtype=np.float64)
    slot_u = np.empty(BLOCK, dtype=np.float64)
    tail_u = np.empty(BLOCK, dtype=np.float64)
    pos = np.empty(BLOCK, dtype=np.int64)
    fei = np.empty(BLOCK, dtype=np.int64)
    miss = np.empty(BLOCK, dtype=np.bool_)
    out = 0
    for b in range(batch_start, batch_stop):
        for t in range(table_start, num_tables):
            # table parameters as locals: the compiler cannot prove the output stores
            # leave them unchanged, so reading them per lookup would reload them
            rows = ip[t, I_ROWS]
            n_t = batch_size * ip[t, I_POOLING]
            head = ip[t, I_HEAD]
            alias_off = ip[t, I_ALIAS_OFF]
            window = ip[t, I_REUSE_WINDOW]
            contiguous = ip[t, I_CONTIGUOUS] != 0
            bits = ip[t, I_BITS]
            perm_off = ip[t, I_PERM_OFF]
            perm_len = ip[t, I_PERM_LEN]
            goff = ip[t, I_GUIDE_OFF]
            alpha = fp[t, F_ALPHA]
            p_head = fp[t, F_P_HEAD]
            lo = fp[t, F_TAIL_LO]
            hi = fp[t, F_TAIL_HI]
            sq = fp[t, F_TAIL_S]
            reuse = fp[t, F_REUSE]
            drift = fp[t, F_DRIFT]
            q = fp[t, F_OFFSET]
            period = ip[t, I_DRIFT_PERIOD]
            keys = round_keys[t]
            # the tables without a guide (all head, uniform) in a copy of the loop without
            # its code: with it, the compiler made their 5 ns draws 14
            if goff >= 0 and reuse == 0.0 and drift == 0.0 and not contiguous:
                _fill_blocks(
                    root, b, t, n_t, rows, head, alias_off, bits, perm_off, perm_len,
                    alpha, p_head, lo, hi, sq, q, keys, alias_prob, alias_index, perm,
                    guide, goff, out_row, out, coin, slot_u, tail_u, pos, fei, miss,
                )  # fmt: skip
            elif goff >= 0:
                _fill_table(
                    root, b, t, n_t, rows, head, alias_off, window, contiguous, bits,
                    perm_off, perm_len, alpha, p_head, lo, hi, sq, reuse, drift, q, period,
                    keys, alias_prob, alias_index, perm, guide, goff, out_row, out,
                )  # fmt: skip
            else:
                _fill_table(
                    root, b, t, n_t, rows, head, alias_off, window, contiguous, bits,
                    perm_off, perm_len, alpha, p_head, lo, hi, sq, reuse, drift, q, period,
                    keys, alias_prob, alias_index, perm, guide, -1, out_row, out,
                )  # fmt: skip
            out_batch[out : out + n_t] = b
            out_table[out : out + n_t] = t
            out += n_t
