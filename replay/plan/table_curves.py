"""Each table's LRU curve over the whole run, at every size from one row: what the
budget's split and the per-table baselines read.

A trace folder or a workload at R = 1: the exact per-table curves
(`replay.analysis.horizon.per_table_mrc`, one stack-distance pass per table).

A spatially sampled workload (R < 1, `replay.workload.sampled`): the sample resolves
only sizes from about 16 / R rows up (65,520 rows at R = 2^-12), and below that a table's
curve needs another source. Reading it as 0 there (what the plan did before issue 40) made
every table smaller than 16 / R / load factor count as all misses: the quickstart's
uniform-load-factor baseline read 20.7% where per-table LRU replays give 66.7%. So below
the resolution, per table:

1. the exact head of the full stream (`replay.analysis.head`) where it is usable (tables
   whose head blocks fill their stack: in practice tables of a few hundred rows or less);
2. else Che's approximation over the run's lookups from an empty cache
   (`replay.analysis.che.che_miss_ratios` with the table's own lookups as the horizon,
   cold misses included). A sampled workload has neither reuse nor drift (the sampler
   refuses them), so its lookups are independent draws from each table's popularity,
   Che's assumption. Measured against exact per-table LRU replays of `criteo-terabyte`
   (2,000 batches of 2,048, caches of 8.9% of each table's rows): within 0.002 for every
   table above 100 rows, within 0.016 for tables of 3 to 14 rows (caches of one row);
   0.665 against 0.667 over the 26 tables' lookups;
3. at and above the resolution, the sample (SHARDS per table, its error as stated).

`extra_sizes[t]` are sizes the caller needs read exactly (not from the 5% grid): the
uniform load factor's cache of each table, so that baseline is read at its own size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.plan.cache import curve_sizes
from replay.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class TableCurves:
    """Per table: (sizes in rows, hit ratios) from one row up, the `per_table_mrc`
    results, and how each was computed."""

    curves: list[tuple[np.ndarray, np.ndarray]]
    results: list[Any]
    lookups: list[int]
    methods: list[str]


def per_table_sizes(
    source: Any, spec: WorkloadSpec | None, rate: float, resolution: int, table_rows: Sequence[int]
) -> list[int]:
    """The smallest size each table's sample curve is read at: 1 at R = 1 or where the full
    stream's head is usable, else the sample's resolution (every table of a sampled source
    without a workload spec, which has no head)."""
    if rate >= 1.0:
        return [1] * len(table_rows)
    if not isinstance(spec, WorkloadSpec):
        return [int(resolution)] * len(table_rows)
    from replay.analysis.horizon import _full_stream_heads

    heads = _full_stream_heads(source, resolution)
    return [
        1 if heads is not None and heads[1 + t].usable else int(resolution)
        for t in range(len(table_rows))
    ]


def table_curves(
    source: Any,
    spec: WorkloadSpec | None,
    rate: float,
    resolution: int,
    table_rows: Sequence[int],
    *,
    extra_sizes: Sequence[np.ndarray],
) -> TableCurves:
    """Every table's curve on `curve_sizes(rows, 1)` plus `extra_sizes[t]` (module
    docstring); one pass over the source."""
    from replay.analysis.horizon import per_table_mrc

    firsts = per_table_sizes(source, spec, rate, resolution, table_rows)
    # alike tables ask alike sizes (a production spec's 856 tables have 4 row counts):
    # each distinct (rows, extra sizes) made once, its array shared (read, never written)
    made: dict[tuple[int, bytes], np.ndarray] = {}
    wanted = []
    for r, x in zip(table_rows, extra_sizes, strict=True):
        extra = np.asarray(x, dtype=np.int64)[np.asarray(x) >= 1]
        key = (int(r), extra.tobytes())
        if key not in made:
            made[key] = np.union1d(curve_sizes(r, 1), extra)
        wanted.append(made[key])
    # at least one size a table's sample reads (a table smaller than the resolution has
    # every size below it: its curve is all Che's; the sample gives its lookups)
    results = per_table_mrc(
        source,
        [
            w[w >= first] if (w >= first).any() else np.array([first], dtype=np.int64)
            for w, first in zip(wanted, firsts, strict=True)
        ],
    )
    curves, lookups, methods = [], [], []
    exact = rate >= 1.0
    for t, (w, first, res) in enumerate(zip(wanted, firsts, results, strict=True)):
        at = np.asarray(res.sizes, dtype=np.int64)
        hits = np.empty(len(w))
        high = w >= first
        hits[high] = (
            1.0 - np.asarray(res.miss_ratios, dtype=np.float64)[np.searchsorted(at, w[high])]
        )
        low = ~high
        if low.any():
            assert spec is not None  # a sampled workload: `per_table_sizes`
            from replay.analysis.che import che_miss_ratios

            one = dataclasses.replace(spec, tables=(spec.tables[t],))
            hits[low] = 1.0 - che_miss_ratios(
                one, w[low].astype(np.float64), horizon_lookups=float(res.lookups)
            )
        curves.append((w.astype(np.float64), hits))
        lookups.append(int(res.lookups))
        if exact:
            methods.append("exact")
        elif first == 1:
            methods.append("the full stream's exact head below the sample's resolution")
        else:
            methods.append(f"Che's approximation below the sample's resolution ({first:,} rows)")
    return TableCurves(curves, results, lookups, methods)


__all__ = ["TableCurves", "per_table_sizes", "table_curves"]
