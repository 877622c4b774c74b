"""FBGEMM's LRU cache under the prefetch pipeline (`replay.engine.step_emo.locked_set`,
`locked_cache`, `set_sizes`) against a transcription of the kernels, run on uniform
batches: `lru_cache_find_uncached` (a hit takes the time step and a lock),
`lru_cache_insert_kernel` (ways in LRU order, the l-th miss to the l-th way for
l < min(misses, 32), `continue` on a locked way, `break` on one of this time step) and the
backward's `lxu_cache_locking_counter_decrement` of the previous batch, which runs after
the next batch's prefetch."""

from __future__ import annotations

import numpy as np
import pytest

from replay.engine import step_emo
from replay.policies.tbe import reference_cache_set

WAYS = 32


def _transcribed(
    sets: int, rows_per_set: int, batches: int, seed: int, murmur: bool = False
) -> tuple[np.ndarray, float, float]:
    """Per batch: (unique rows, hits, inserts, conflict misses); and the expected inserts
    and conflict misses from `locked_set` over this cache's own set sizes. The rows' sets
    are FBGEMM's `cache_slot` with `murmur`, else drawn at random (a hash's stand-in)."""
    rng = np.random.default_rng(seed)
    rows = sets * rows_per_set
    lookups = round(rows * step_emo.large_lookups() / (step_emo.LARGE_ROWS / step_emo.WORLD))
    set_of = step_emo.cache_set_of(rows, sets) if murmur else rng.integers(0, sets, rows)
    holds = np.full((sets, WAYS), -1, np.int64)
    time = np.zeros((sets, WAYS), np.int64)
    lock = np.zeros((sets, WAYS), np.int64)
    where = np.full(rows, -1, np.int64)  # a cached row's way, flat
    previous: np.ndarray | None = None
    out = []
    for t in range(2, batches + 2):
        unique = np.unique(rng.integers(0, rows, lookups))
        found = where[unique]
        hit = found >= 0
        time.flat[found[hit]] = t
        lock.flat[found[hit]] += 1
        miss = unique[~hit]
        miss = miss[np.argsort(set_of[miss], kind="stable")]
        inserted = 0
        groups = np.unique(set_of[miss], return_index=True, return_counts=True)
        for s, first, count in zip(*groups, strict=True):
            order = np.argsort(time[s], kind="stable")
            n = 0
            for way in order[: min(count, WAYS)]:
                if lock[s, way] > 0:
                    continue
                if time[s, way] == t:
                    break
                if holds[s, way] >= 0:
                    where[holds[s, way]] = -1
                row = miss[first + n]
                holds[s, way], where[row], time[s, way] = row, s * WAYS + way, t
                lock[s, way] += 1
                n += 1
            inserted += n
        if previous is not None:  # the previous batch's backward releases its rows
            np.subtract.at(lock.ravel(), previous[previous >= 0], 1)
        previous = where[unique]
        out.append((len(unique), int(hit.sum()), inserted, len(miss) - inserted))
    p = 1.0 - (1.0 - 1.0 / rows) ** lookups
    chain = [step_emo.locked_set(int(n), p) for n in np.bincount(set_of, minlength=sets)]
    inserts = sum(c[0] for c in chain)
    return np.array(out, dtype=float), inserts, sum(c[1] for c in chain) - inserts


@pytest.mark.parametrize(("rows_per_set", "conflict_rel"), [(160, 0.03), (80, 0.15)])
def test_locked_set_matches_the_transcribed_kernels(rows_per_set: int, conflict_rel: float) -> None:
    """Load factor 0.2 (160 rows a set) and 0.4 (80): the steady state's inserts and
    conflict misses (at 0.4 about 70 a batch here: a wider margin for their noise)."""
    counts, inserts, conflicts = _transcribed(300, rows_per_set, 36, seed=rows_per_set)
    steady = counts[6:].mean(axis=0)
    assert steady[2] == pytest.approx(inserts, rel=0.02)
    assert steady[3] == pytest.approx(conflicts, rel=conflict_rel)


def test_locked_cache_of_the_emo_benchmark() -> None:
    """large_table's 5 M rows a rank: at load factor 0.2 about 38% of a batch's unique
    rows are conflict misses, at 0.4 under 2%; hits are the load factor's share."""
    for factor, low, high in ((0.2, 0.36, 0.40), (0.4, 0.0, 0.02)):
        hits, inserted, misses = step_emo.locked_cache(factor)
        unique = step_emo.unique_rows(step_emo.large_lookups(), step_emo.LARGE_ROWS / 2)
        assert hits / unique == pytest.approx(factor, rel=1e-3)
        assert hits + misses == pytest.approx(unique, rel=1e-9)
        assert low < (misses - inserted) / unique < high


def test_set_sizes_is_fbgemms_cache_slot() -> None:
    sizes = step_emo.set_sizes(5_000, 37)
    direct = np.bincount([reference_cache_set(i, 37) for i in range(5_000)], minlength=37)
    assert np.array_equal(sizes, np.bincount(direct))
    assert int(sizes @ np.arange(len(sizes))) == 5_000


@pytest.mark.bench
def test_locked_cache_at_the_benchmarks_scale() -> None:
    """large_table's 5 M rows a rank in FBGEMM's 31,250 sets at load factor 0.2, 0.97 M
    lookups a batch, through the transcribed kernels (about three minutes). From an empty
    cache the inserts swing between batches (0.86, 0.14, 0.56, 0.22 M, ...), a two-batch
    cycle that damps by about an eighth a batch: the last 8 of 24 batches hold the steady
    state."""
    counts, inserts, conflicts = _transcribed(31_250, 160, 24, seed=1, murmur=True)
    assert counts[1, 2] < 0.2 * counts[0, 2] and counts[2, 2] > 3 * counts[1, 2]
    steady = counts[16:].mean(axis=0)
    _, cache_inserts, cache_misses = step_emo.locked_cache(0.2)
    assert inserts == pytest.approx(cache_inserts, rel=1e-6)
    assert steady[2] == pytest.approx(inserts, rel=0.01)
    assert steady[3] == pytest.approx(conflicts, rel=0.01)
    assert steady[3] == pytest.approx(cache_misses - cache_inserts, rel=0.01)
