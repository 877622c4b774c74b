"""The numba kernels of the trace statistics (`replay.analysis.stats`) and the layout of
the state they share with its `Inspector`: per-table and global counters, the state byte
per row, the per-batch lists and the count wraps. The module docstring of
`replay.analysis.stats` defines the statistics; the comments here say how the state
holds them.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel
from replay.trace.keys import RUN_BATCH, RUN_START, RUN_TABLE

# int64 per-table state, shape (tables, _TI_WIDTH)
_T_LOOK_CUR = 0  # lookups of the table in the current batch
_T_DIST_CUR = 1  # distinct rows of the table in the current batch
_T_REUSE_CUR = 2  # of those, rows also seen in the batch before
_T_LOOKUPS = 3  # lookups so far
_T_DISTINCT = 4  # distinct rows so far
_T_DPB_N = 5  # batches averaged in distinct_per_batch
_T_REUSE_N = 6  # batches averaged in consecutive_reuse
_TI_WIDTH = 7
# float64 per-table state, shape (tables, 2)
_T_DPB_SUM = 0
_T_REUSE_SUM = 1
# int64 global state
_G_CUR = 0  # batch being accumulated, -1 before the first lookup
_G_TOUCHED = 1  # distinct pairs so far
_G_CURVE_POS = 2  # next curve point to fill
_G_WRAPS = 3  # count wraps recorded by the last kernel call
_G_DPB_N = 4
_G_REUSE_N = 5
_G_SIDE = 6  # which row of the 3 lists holds the current batch's rows
_G_N_CUR = 7  # rows in the current batch's list
_G_N_PREV = 8  # rows in the previous batch's list (0 when that batch had no lookups)
_G_D_SWEPT = 9  # the batch at which the small tables' tags were last swept
_G_D_PERIOD = 10  # batches before a small table's tag repeats; 0: `_D_PERIOD`
_G_N_PEND = 11  # rows in the list of the batch before the previous one, still to clear
_G_PEND_AT = 12  # of them, the first not cleared yet
_GI_WIDTH = 13
# float64 global state
_G_DPB_SUM = 0
_G_REUSE_SUM = 1


# kernel return codes
_OK = 0
_BAD_TABLE = 1
_BAD_ROW = 2
_UNSORTED = 3
_BAD_BATCH = 4
_WRAP_OVERFLOW = 5

# One uint8 state word per row: the tag of the last batch that looked it up in the top 2
# bits, its lookup count in the low 6; 0 means never looked up, so fresh zeroed memory is
# the initial state. One byte per row (two until issue 29: an 8-bit tag and an 8-bit
# count): criteo-terabyte's 187.8 M rows take 188 MB instead of 376 MB, and on the 2-core
# VM faulting fresh memory in costs about 3.5 ms per MB (1.3 s for the 376 MB), more than
# the feed itself.
# - count: 1..63 once looked up; the 64th lookup records a wrap (worth 63 lookups) and
#   restarts it at 1, so the true count is count + 63 * wraps, and 0 still means never.
# - tag: batch b is tagged b % 3 + 1 (1..3); 0 = not looked up since. A tag repeats every
#   3 batches, so a row's tag must not outlive the batch after the next: the rows that
#   batch b - 2 looked up first (its list) lose their tag during batch b unless a later
#   batch retagged them (while b runs, tag(b - 2) is neither b's nor b - 1's, so a row
#   still holding it counts as neither), at the latest when b ends; across an empty batch
#   every list is cleared at once. When batch b starts, tags b - 1 and b - 2 are left.
_TAG_SHIFT = 6
_COUNT_MASK = 0x3F
_COUNT_WRAP = 63  # lookups one wrap stands for
_TAG_PERIOD = 3
_NO_TAG = _TAG_PERIOD + 1  # fits no 2-bit tag: "no batch before"
# How many lookups ahead `_inspect_runs` prefetches a row's state byte. Its loop takes
# ~7 ns a lookup, so the policies' 16 (`PREFETCH_AHEAD`) covers ~110 ns, less than a
# random read of its 188 MB in 4 KiB pages (Criteo Terabyte) takes; 32 measured 6-11%
# less CPU for the feed (CPU time of one thread, alternating builds, 2-core VM at load 5-6:
# 7.23 and 6.10 against 7.73 and 6.88 ns a lookup), and its outputs are the same; 64
# another 5-6% (the feed alone over the bench traces, 5 passes alternating, medians:
# criteo-terabyte 0.438 -> 0.410 and 0.432 -> 0.409 s, criteo-kaggle 0.283 -> 0.266 s;
# 128: 0.457 -> 0.435 s at Terabyte), the statistics equal.
_FEED_AHEAD = 64
# Small tables (`_inspect_runs`' `dense`): one int64 word per row holds its lookup count
# in the low 40 bits and, above them, the tag of the last batch that looked it up (batch
# b is tagged b % period + 1; 0 = never looked up), so that a lookup of a small table
# reads and writes one word, not the state byte too, and its row needs no list entry nor
# a clear (criteo-terabyte: 18 of its 26 tables, 69% of its lookups). A tag repeats
# every `_D_PERIOD` batches: before it can, a sweep of `dense` drops every tag but the
# previous batch's. A count reaches the field's top only after 2^40 lookups: the caller
# moves counts out of the word before (`Inspector._fold_dense`).
_D_SHIFT = 40
_D_COUNT = (1 << _D_SHIFT) - 1
_D_PERIOD = (1 << 23) - 1  # tags in bits 40-62
_D_TAG = _D_PERIOD << _D_SHIFT
# a constant to the kernels: np.iinfo in a kernel makes numba import numba.np.arraymath
# (0.07 s) when it loads that kernel from its cache
_INT64_MAX = int(np.iinfo(np.int64).max)


@kernel
def _flush_batch(b: int, ti: np.ndarray, tf: np.ndarray, gi: np.ndarray, gf: np.ndarray) -> None:
    """Fold the counters of batch b into the running sums, in table order."""
    look = 0
    dist = 0
    reuse = 0
    for t in range(ti.shape[0]):
        lt = ti[t, _T_LOOK_CUR]
        if lt == 0:
            continue
        dt = ti[t, _T_DIST_CUR]
        rt = ti[t, _T_REUSE_CUR]
        tf[t, _T_DPB_SUM] += dt / lt
        ti[t, _T_DPB_N] += 1
        if b >= 1:
            tf[t, _T_REUSE_SUM] += rt / dt
            ti[t, _T_REUSE_N] += 1
        ti[t, _T_LOOKUPS] += lt
        look += lt
        dist += dt
        reuse += rt
        ti[t, _T_LOOK_CUR] = 0
        ti[t, _T_DIST_CUR] = 0
        ti[t, _T_REUSE_CUR] = 0
    if look > 0:
        gf[_G_DPB_SUM] += dist / look
        gi[_G_DPB_N] += 1
        if b >= 1:
            gf[_G_REUSE_SUM] += reuse / dist
            gi[_G_REUSE_N] += 1


@kernel
def _fill_curve(upto: int, gi: np.ndarray, curve_x: np.ndarray, curve_val: np.ndarray) -> None:
    """Record the touched count for every curve point x <= upto (batches 0..x-1 done)."""
    pos = gi[_G_CURVE_POS]
    while pos < len(curve_x) and curve_x[pos] <= upto:
        curve_val[pos] = gi[_G_TOUCHED]
        pos += 1
    gi[_G_CURVE_POS] = pos


@kernel
def _tag(b: int) -> int:
    """The state word's tag of batch b (1.._TAG_PERIOD)."""
    return b % _TAG_PERIOD + 1


@kernel
def _sweep_dense(dense: np.ndarray, keep: int) -> None:
    """Drop every small table's tag but `keep` (a tag shifted into place, or 0 for none)
    from `dense`; the counts stay."""
    for i in range(len(dense)):
        w = dense[i]
        if (w & _D_TAG) != keep:
            dense[i] = w & _D_COUNT


@kernel
def _clear_tags(state: np.ndarray, rows: np.ndarray, n: int, tag: int) -> None:
    """Drop `tag` from the first n `rows` that still hold it (their counts stay); when
    the list overflowed (n > len(rows): a batch looked up more rows than it holds),
    from every row of the state, in one sequential sweep."""
    if n > len(rows):
        for f in range(len(state)):
            v = state[f]
            if (v >> _TAG_SHIFT) == tag:
                state[f] = v & _COUNT_MASK
        return
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(state, rows[ix(i + PREFETCH_AHEAD)])
        f = rows[ix(i)]
        v = state[ix(f)]
        state[ix(f)] = v & _COUNT_MASK if (v >> _TAG_SHIFT) == tag else v


@kernel(inline="always")
def _dense_step(
    dense: np.ndarray, g: int, dstamp: int, dprevious: int
) -> tuple[np.int64, np.int64, np.int64]:
    """One lookup of a small table's word dense[g] (`_D_SHIFT`): (first in this batch,
    looked up by the batch before, first ever)."""
    w = dense[ix(g)]
    dt = w & _D_TAG
    c = w & _D_COUNT
    dense[ix(g)] = dstamp | (c + 1)
    return np.int64(dt != dstamp), np.int64(dt == dprevious), np.int64(c == 0)


@kernel
def _checked_keys(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    num_batches: int,
    table_rows: np.ndarray,
    offsets: np.ndarray,
    last_batch: int,
    keys: np.ndarray,
) -> tuple[int, int]:
    """Check a chunk of lookups (trace order) and flatten it for `_inspect_runs`:
    keys[i] = offsets[table[i]] + row[i]. Returns (code, index of the first bad lookup);
    `last_batch` is the batch of the lookup before the chunk (-1 for none)."""
    num_tables = len(table_rows)
    cur_b = np.int64(last_batch)
    for i in range(len(row)):
        b = np.int64(batch[i])
        if b != cur_b:
            if b < cur_b:
                return _UNSORTED, i
            if b >= num_batches:
                return _BAD_BATCH, i
            cur_b = b
        t = np.int64(table[i])
        if t >= num_tables:
            return _BAD_TABLE, i
        r = np.uint64(row[i])
        if r >= table_rows[t]:
            return _BAD_ROW, i
        keys[i] = offsets[t] + np.int64(r)
    return _OK, -1


@kernel
def _inspect_runs(
    keys: np.ndarray,
    runs: np.ndarray,
    num_tables: int,
    state: np.ndarray,
    ti: np.ndarray,
    tf: np.ndarray,
    gi: np.ndarray,
    gf: np.ndarray,
    curve_x: np.ndarray,
    curve_val: np.ndarray,
    wraps: np.ndarray,
    batch_distinct: np.ndarray,
    first_batch: int,
    counters: np.ndarray,
    lists: np.ndarray,
    dense_at: np.ndarray,
    dense: np.ndarray,
    batch_sums: np.ndarray,
) -> int:
    """Fold a chunk of checked lookups into the state: `keys` are their flat rows and
    `runs` their (batch, table) runs in trace order (`_checked_keys`, `table_runs`).
    Returns the code (_OK, or _WRAP_OVERFLOW).

    `state` is the uint8 state word per flat row (`_TAG_SHIFT`); each count wrap's flat
    row goes to `wraps` (sized by the caller: a wrap takes 63 lookups of one row). When
    `batch_distinct` is not empty, the distinct pairs of batch b are added to
    batch_distinct[b - first_batch] (batches outside it are skipped). When `batch_sums`
    (int64, batches x 3) has rows, batch b's lookups, distinct pairs and pairs also looked
    up by batch b - 1 are added to its row b (the table-major pass sums them over groups
    of tables, `replay.analysis.table_major`).

    Small tables (dense_at[t, 0] = 1) count in `dense` (flat row f at
    dense[dense_at[t, 1] + f]: its count and its last batch's tag, `_D_SHIFT`) instead
    of the state word, whose 6 bits of count they would fill with wrap events (a table of
    a few rows takes hundreds of lookups per row per batch); their state words stay 0 and
    their rows go to no list. `gi[_G_D_PERIOD]` (0: `_D_PERIOD`) sets how often the
    small tables' tags repeat (a test makes them repeat sooner).

    Tags of the other tables: of the 3 `lists`, `lists[side]` collects the rows the
    current batch looks up first, `lists[(side + 2) % 3]` the previous batch's and
    `lists[(side + 1) % 3]` those of the batch before it whose tags are still to clear
    (`_G_N_CUR`, `_G_N_PREV`, `_G_N_PEND` rows, of the last the first `_G_PEND_AT`
    cleared already; the caller gives each room for its rows plus every lookup of the
    chunk, up to a cap: a count above the list's length says it overflowed, and its tags
    are then cleared by a sweep of the state, `_clear_tags`). When batch b follows batch
    b - 1, what is left of b - 3's list is cleared, b - 2's becomes the one to clear and
    the lists turn; the small tables' lookups of batch b clear it, one row a lookup
    (their words are in cache, so the clears' random reads of the state overlap work
    that waits on no memory, where alone they waited on nothing else; criteo-terabyte:
    3-5% less of the feed's CPU, criteo-kaggle's 34 MB state no change), and what they
    leave is cleared when b ends. After an empty batch every list loses its tags. So
    when batch b starts, tag(b - 1) is held by exactly the rows of b - 1, tag(b - 2)
    only by rows that neither b - 1 nor b will count as theirs, and tag(b) = tag(b - 3)
    by none.

    A run's keys go through a branch-free loop (but for the rare count wrap) that
    prefetches each row's state `_FEED_AHEAD` lookups ahead. Taking flat keys and
    precomputed runs rather than the (batch, table, row) columns spares the run scan and
    the row checks here: `replay run` gets both from its reader, which makes the keys
    anyway.
    The per-table counters of the current batch live in the rows of the caller's scratch
    `counters` (4 x num_tables int64; allocated by the caller, see `table_runs`) and go
    back to `ti` at each batch end and at the end of the chunk (a batch may span chunks).
    """
    look = counters[0]
    dist = counters[1]
    reuse = counters[2]
    new = counters[3]
    for t in range(num_tables):
        look[t] = ti[t, _T_LOOK_CUR]
        dist[t] = ti[t, _T_DIST_CUR]
        reuse[t] = ti[t, _T_REUSE_CUR]
        new[t] = 0
    cur = gi[_G_CUR]
    period = gi[_G_D_PERIOD] if gi[_G_D_PERIOD] > 0 else _D_PERIOD
    side = gi[_G_SIDE]
    n_cur = gi[_G_N_CUR]
    n_prev = gi[_G_N_PREV]
    n_pend = gi[_G_N_PEND]
    at_pend = gi[_G_PEND_AT]
    nwraps = 0
    code = _OK
    for q in range(len(runs) - 1):  # the last row only ends the last run
        b = runs[q, RUN_BATCH]
        if b != cur:
            if cur >= 0:
                for t in range(num_tables):
                    ti[t, _T_LOOK_CUR] = look[t]
                    ti[t, _T_DIST_CUR] = dist[t]
                    ti[t, _T_REUSE_CUR] = reuse[t]
                    look[t] = 0
                    dist[t] = 0
                    reuse[t] = 0
                _flush_batch(cur, ti, tf, gi, gf)
                # what is left of batch cur - 2's rows: tag(cur - 2) is tag(cur + 1)
                pend = lists[(side + 1) % 3]
                _clear_tags(state, pend[at_pend:], n_pend - at_pend, _tag(cur - 2))
                n_pend = 0
                at_pend = 0
                prev = lists[(side + 2) % 3]
                if b == cur + 1:
                    # the rows of batch cur - 1 not looked up again in cur lose their
                    # tag during b, beside the small tables' lookups (which wait on no
                    # memory), or at the latest when b ends; an overflowed list is swept
                    if n_prev > len(prev):
                        _clear_tags(state, prev, n_prev, _tag(cur - 1))
                    else:
                        n_pend = n_prev
                        for e in range(min(n_pend, _FEED_AHEAD)):
                            prefetch(state, prev[ix(e)])
                    side = (side + 1) % 3  # the cleared list takes b's rows
                    n_prev = n_cur
                else:  # empty batches between: batch cur - 1's and cur's tags go now
                    _clear_tags(state, prev, n_prev, _tag(cur - 1))
                    _clear_tags(state, lists[side], n_cur, _tag(cur))
                    n_prev = 0
                n_cur = 0
            # the small tables' tags present are those of batches swept - 1 .. cur: one
            # would repeat at b or pass for b - 1's once b - swept + 1 reaches the period
            if len(dense) > 0 and b - gi[_G_D_SWEPT] + 1 >= period:
                keep = ((cur % period + 1) << _D_SHIFT) if cur >= 0 and b == cur + 1 else 0
                _sweep_dense(dense, keep)
                gi[_G_D_SWEPT] = b
            for t in range(num_tables):
                ti[t, _T_DISTINCT] += new[t]
                gi[_G_TOUCHED] += new[t]
                new[t] = 0
            _fill_curve(b, gi, curve_x, curve_val)
            cur = b
        t = runs[q, RUN_TABLE]
        i = runs[q, RUN_START]
        j = runs[q + 1, RUN_START]
        small = dense_at[t, 0] != 0
        at = dense_at[t, 1]
        tag = _tag(b)
        previous = _tag(b - 1) if n_prev > 0 else _NO_TAG  # no row holds _NO_TAG
        stamp = tag << _TAG_SHIFT
        mine = lists[side]
        last = len(mine) - 1
        d = 0
        rr = 0
        nw = 0
        for k in range(i, i if small else j):
            if k + _FEED_AHEAD < j:  # rows of a run are random: overlap the misses
                prefetch(state, keys[ix(k + _FEED_AHEAD)])
            f = keys[ix(k)]
            v = np.int64(state[ix(f)])
            s = v >> _TAG_SHIFT
            c: np.int64 | int = v & _COUNT_MASK  # 0 below: numba unifies the two
            fresh = s != tag  # first lookup of the row in this batch
            d += fresh
            nw += c == 0
            rr += s == previous
            # kept only when fresh: a store, not a branch (past the list's end the
            # count goes on and the last entry is overwritten: `_clear_tags` sweeps)
            mine[ix(min(n_cur, last))] = f
            n_cur += fresh
            if c == _COUNT_WRAP:  # rare: once per 63 lookups of a row
                if nwraps < len(wraps):
                    wraps[nwraps] = f
                nwraps += 1
                c = 0
            state[ix(f)] = np.uint8(stamp | (c + 1))
        dstamp = (b % period + 1) << _D_SHIFT
        dprevious = ((b - 1) % period + 1) << _D_SHIFT if b > 0 else -1  # -1: no tag
        # a small table: its words stay in cache, so the pending clears of the state
        # (random reads) overlap its lookups, one a lookup
        clearing = min(j - i, n_pend - at_pend) if small else 0
        pend = lists[(side + 1) % 3]
        gone = _tag(b - 2)
        for k in range(i, i + clearing):
            fd, fr, fn = _dense_step(dense, at + keys[ix(k)], dstamp, dprevious)
            d += fd
            rr += fr
            nw += fn
            if at_pend + _FEED_AHEAD < n_pend:
                prefetch(state, pend[ix(at_pend + _FEED_AHEAD)])
            f = pend[ix(at_pend)]
            v = state[ix(f)]
            state[ix(f)] = v & _COUNT_MASK if (v >> _TAG_SHIFT) == gone else v
            at_pend += 1
        for k in range(i + clearing, j if small else i):
            fd, fr, fn = _dense_step(dense, at + keys[ix(k)], dstamp, dprevious)
            d += fd
            rr += fr
            nw += fn
        if nwraps > len(wraps):  # pragma: no cover - the caller's bound prevents it
            code = _WRAP_OVERFLOW
            break
        look[t] += j - i
        dist[t] += d
        slot = b - first_batch
        if 0 <= slot < len(batch_distinct):
            batch_distinct[slot] += d
        if b < batch_sums.shape[0]:
            batch_sums[b, 0] += j - i
            batch_sums[b, 1] += d
            batch_sums[b, 2] += rr
        reuse[t] += rr
        new[t] += nw
    gi[_G_CUR] = cur
    gi[_G_SIDE] = side
    gi[_G_N_CUR] = n_cur
    gi[_G_N_PREV] = n_prev
    gi[_G_N_PEND] = n_pend
    gi[_G_PEND_AT] = at_pend
    gi[_G_WRAPS] = min(nwraps, len(wraps))
    for t in range(num_tables):
        ti[t, _T_LOOK_CUR] = look[t]
        ti[t, _T_DIST_CUR] = dist[t]
        ti[t, _T_REUSE_CUR] = reuse[t]
        ti[t, _T_DISTINCT] += new[t]
        gi[_G_TOUCHED] += new[t]
    return code


@kernel
def _fold_batch_sums(batch_sums: np.ndarray, gi: np.ndarray, gf: np.ndarray) -> None:
    """Fold per-batch (lookups, distinct, reused) sums into the global means' running
    sums, in batch order, with the very operations `_flush_batch` does on a batch's
    per-table counters summed (so the table-major pass gives bit-identical means)."""
    ti = np.zeros((1, _TI_WIDTH), dtype=np.int64)
    tf = np.zeros((1, 2), dtype=np.float64)
    for b in range(batch_sums.shape[0]):
        ti[0, _T_LOOK_CUR] = batch_sums[b, 0]
        ti[0, _T_DIST_CUR] = batch_sums[b, 1]
        ti[0, _T_REUSE_CUR] = batch_sums[b, 2]
        _flush_batch(b, ti, tf, gi, gf)


@kernel
def _finish_kernel(
    ti: np.ndarray,
    tf: np.ndarray,
    gi: np.ndarray,
    gf: np.ndarray,
    curve_x: np.ndarray,
    curve_val: np.ndarray,
) -> None:
    if gi[_G_CUR] >= 0:
        _flush_batch(gi[_G_CUR], ti, tf, gi, gf)
    _fill_curve(_INT64_MAX, gi, curve_x, curve_val)


# words of the state scanned at a time for the nonzero ones (`_count_histograms`)
_HIST_BLOCK = 4096


@kernel
def _count_histograms(
    state: np.ndarray,
    words: np.ndarray,
    bounds: np.ndarray,
    hist: np.ndarray,
    part: np.ndarray,
    nonzero: np.ndarray,
) -> None:
    """hist[t, c] += rows of table t (flat rows bounds[t]..bounds[t+1]) whose state word
    holds count c. `words` is `state` read 8 bytes at a time (its first len(state) // 8
    x 8 bytes): most rows were never looked up, so each block of words is first scanned
    without a branch for its nonzero words (a list of their indices), and only those are
    counted byte by byte; the zero words count 8 rows each at once. A branch per word
    mispredicted at every nonzero one (criteo-terabyte, 2.5% of its rows looked up: 18%
    of the words): 188 M rows took 0.14 s byte by byte, 64-66 ms with that branch,
    45-51 ms so (one thread, alternating, load 9). Four interleaved histograms (`part`,
    4 x 256 int64 scratch) for the bytes, which would otherwise chain their increments.
    `nonzero` (>= `_HIST_BLOCK` int64) is scratch too: an array made or sliced here would
    make the cached kernel refer to numba's array implementation, whose import (with its
    sorting, string and hashing modules, ~30 ms) every run would then pay on loading it."""
    for t in range(len(bounds) - 1):
        for a in range(4):
            for c in range(256):
                part[a, c] = 0
        lo = bounds[t]
        hi = bounds[t + 1]
        i = lo
        while i < hi and (i & 7) != 0:  # up to the first whole word
            part[i & 3, state[ix(i)] & _COUNT_MASK] += 1
            i += 1
        first = i >> 3
        end = max(first, hi >> 3)  # the whole words
        zeros = 0
        for w0 in range(first, end, _HIST_BLOCK):
            w1 = min(w0 + _HIST_BLOCK, end)
            n = 0
            for q in range(w0, w1):
                nonzero[n] = q
                n += words[ix(q)] != 0
            zeros += 8 * (w1 - w0 - n)
            for r in range(n):
                at = nonzero[r] * 8
                for j in range(8):
                    part[j & 3, state[ix(at + j)] & _COUNT_MASK] += 1
        i = max(i, end * 8)
        while i < hi:
            part[i & 3, state[ix(i)] & _COUNT_MASK] += 1
            i += 1
        part[0, 0] += zeros
        for c in range(256):
            hist[t, c] += part[0, c] + part[1, c] + part[2, c] + part[3, c]
