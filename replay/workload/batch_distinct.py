"""Each table's distinct rows in one batch of a workload, counted without generating the
batch (`batch_table_counts`).

Why. A table held whole by one GPU or data-parallel routes from its lookups and its
distinct rows in the batch alone (`replay.engine.cluster_routed`, `WholeTables`); at
production scale (meta-2021: 887 M lookups a batch) generating the batch for them costs
~17 ns a lookup (rank, permutation, the row written), where the distinct rows need only
the ranks.

The model. Every lookup's row is `perm(p)` for its position p in [0, rows) (the rank less
one, rotated by the drift of the batch its draw comes from: `replay.workload.draws`), and
`perm` is a bijection of [0, rows) (the keyed Feistel permutation with cycle walking,
`sampler.permute_index`, or the identity of the contiguous mapping). So a table's
distinct rows in a batch are its distinct positions: this module replays the generator's
draws of the batch table by table (the same streams: the reuse chain `sampler.source_of`,
the tail's guide where the table has one, which gives the same ranks, the drift shift)
and marks each position in a bitmap over [0, rows), counting the bits it sets; the
bitmap is cleared up to the highest word marked after each table (the skewed ranks keep
that short for most tables). Nothing is permuted, gathered or written per lookup. The
counts are exactly what generating the batch and counting its distinct rows gives
(tested against `replay.engine.cluster_routed.source_table_counts` on the presets and on
random specs).

The update rows. With a step every batch (`update.accumulate_batches` 1) a batch's update
rows are its distinct rows, a frozen table's none (`replay.trace.updates.update_sets`);
with accumulation they span several batches, and `batch_table_counts` refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.workload.draws import BLOCK, drawn_position
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
    I_DRIFT_PERIOD,
    I_GUIDE_OFF,
    I_HEAD,
    I_POOLING,
    I_REUSE_WINDOW,
    I_ROWS,
    PURPOSE_FRESH,
    draw_rank_scalar,
    mix64,
    stream_key,
    uniform,
    unit,
)

if TYPE_CHECKING:
    from replay.workload.generator import CompiledWorkload


@kernel(inline="always")
def _mark(seen: np.ndarray, p: np.int64) -> np.int64:
    """Set position p's bit; 1 where it was clear (no branch: the draws are random)."""
    w = ix(p >> 6)
    old = seen[w]
    new = old | (np.uint64(1) << np.uint64(p & 63))
    seen[w] = new
    return np.int64(new != old)


@kernel
def distinct_positions(
    root: np.uint64, b: np.int64, batch_size: np.int64, ip: np.ndarray, fp: np.ndarray,
    alias_prob: np.ndarray, alias_index: np.ndarray, guide: np.ndarray, t0: np.int64,
    t1: np.int64, out: np.ndarray,
) -> None:  # fmt: skip
    """out[t]: table t's distinct positions among its lookups of batch b, t in [t0, t1)
    (`generate_lookups`' draws, not permuted: the module's docstring)."""
    most = np.int64(1)
    for t in range(t0, t1):
        most = max(most, ip[t, I_ROWS])
    seen = np.zeros((most + 63) >> 6, dtype=np.uint64)
    keys_of = np.empty(BLOCK, dtype=np.uint64)
    heads = np.empty(BLOCK, dtype=np.int64)
    tails = np.empty(BLOCK, dtype=np.int64)
    slot_v = np.empty(BLOCK, dtype=np.float64)
    for t in range(t0, t1):
        rows = ip[t, I_ROWS]
        n_t = batch_size * ip[t, I_POOLING]
        head = ip[t, I_HEAD]
        alias_off = ip[t, I_ALIAS_OFF]
        window = ip[t, I_REUSE_WINDOW]
        goff = ip[t, I_GUIDE_OFF]
        period = ip[t, I_DRIFT_PERIOD]
        alpha = fp[t, F_ALPHA]
        p_head = fp[t, F_P_HEAD]
        lo = fp[t, F_TAIL_LO]
        hi = fp[t, F_TAIL_HI]
        sq = fp[t, F_TAIL_S]
        reuse = fp[t, F_REUSE]
        drift = fp[t, F_DRIFT]
        q = fp[t, F_OFFSET]
        fresh_key = stream_key(root, b, t, PURPOSE_FRESH)
        top = np.int64(0)  # the highest position marked
        n = np.int64(0)
        if goff >= 0 and reuse == 0.0 and drift == 0.0:
            # `draws._fill_blocks`' draws, each part computed only where its coin takes
            # it: the heads (alias) until every head rank is marked, when a head draw can
            # add nothing; the tails (guide, or the full draw where it cannot tell)
            head_marked = np.int64(0)
            for start in range(0, n_t, BLOCK):
                m = BLOCK if n_t - start > BLOCK else n_t - start
                nh = 0
                nt = 0
                for j in range(m):  # the coins, and the positions split by them
                    key = mix64(fresh_key + np.uint64(start + j + 1) * GAMMA)
                    keys_of[j] = key
                    is_head = unit(key) < p_head
                    heads[nh] = j
                    tails[nt] = j
                    nh += is_head
                    nt += not is_head
                if head_marked < head:
                    for i in range(nh):
                        v = uniform(keys_of[heads[i]], 1) * head
                        slot = np.int64(v)
                        other = np.int64(alias_index[ix(alias_off + slot)])
                        p = slot if v - slot < alias_prob[ix(alias_off + slot)] else other
                        head_marked += _mark(seen, p)
                for i in range(nt):
                    key = keys_of[tails[i]]
                    f = uniform(key, 2) * GUIDE_BUCKETS
                    g_i = np.int64(f)
                    w = f - g_i
                    g = ix(goff + g_i)
                    x = guide[g, 0] + w * (guide[g, 1] + w * guide[g, 2])
                    e = guide[g, 3]
                    k = np.int64(x + 0.5)
                    sure = (head < k) & (k <= rows) & (x + e < k + 0.5) & (x - e >= k - 0.5)
                    sure &= x - e >= k - sq
                    if sure:
                        p = k - 1
                    else:  # the draw the guide did not answer, as the generator makes it
                        p = draw_rank_scalar(
                            key, rows, head, p_head, alias_off, alpha, lo, hi, sq,
                            alias_prob, alias_index, q, guide, goff,
                        ) - 1  # fmt: skip
                    top = max(top, p)
                    n += _mark(seen, p)
            n += head_marked
            if head_marked:
                top = max(top, head - 1)
        elif head == rows and reuse == 0.0 and drift == 0.0:
            # all head (a small table): `draw_rank_scalar`'s alias draw, its uniforms in
            # one pass (SIMD lanes), then the slots
            for start in range(0, n_t, BLOCK):
                m = BLOCK if n_t - start > BLOCK else n_t - start
                for j in range(m):
                    key = mix64(fresh_key + np.uint64(start + j + 1) * GAMMA)
                    slot_v[j] = unit(key) * head
                for j in range(m):
                    v = slot_v[j]
                    slot = np.int64(v)
                    other = np.int64(alias_index[ix(alias_off + slot)])
                    p = slot if v - slot < alias_prob[ix(alias_off + slot)] else other
                    n += _mark(seen, p)
            top = head - 1
        else:
            for j in range(n_t):  # `draws._fill_table`'s draw, no permutation
                p = drawn_position(
                    root, b, t, j, n_t, fresh_key, rows, head, alias_off, window, alpha,
                    p_head, lo, hi, sq, reuse, drift, q, period, alias_prob, alias_index,
                    guide, goff,
                )  # fmt: skip
                top = max(top, p)
                n += _mark(seen, p)
        out[t] = n
        seen[: (top >> 6) + 1] = 0


def batch_table_counts(compiled: CompiledWorkload, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(lookups, update rows) per table of `batch` (int64, 1 x tables), as
    `replay.engine.cluster_routed.source_table_counts` counts them in a source holding
    that batch alone, from the draws (the module's docstring); `compiled`: the spec's
    `replay.workload.generator.CompiledWorkload`. ValueError where the update rows are
    not the batch's own (accumulation over batches)."""
    spec = compiled.spec
    if spec.update.accumulate_batches != 1:
        raise ValueError("batch_table_counts: the update rows span several batches")
    st = compiled.tables
    tables = len(spec.tables)
    distinct = np.zeros(tables, dtype=np.int64)
    distinct_positions(
        compiled.root, batch, spec.batch_size, st.iparams, st.fparams,
        st.alias_prob, st.alias_index, st.guide, 0, tables, distinct,
    )  # fmt: skip
    looks = np.array([[spec.batch_size * t.pooling for t in spec.tables]], dtype=np.int64)
    frozen = np.array([t.frozen for t in spec.tables], dtype=np.bool_)
    return looks, np.where(frozen, 0, distinct)[None, :]


__all__ = ["batch_table_counts", "distinct_positions"]
