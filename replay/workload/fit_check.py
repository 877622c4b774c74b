"""`replay fit --check`: the sample's statistics side by side with those of a synthetic
trace of the fitted spec.

The check generates `CHECK_TRACES` synthetic traces of the sample's shape from the fitted
spec: the spec's own seed first (the fit's simulations draw from other seeds, so this is
a trace the fit never saw), whose statistics it shows, then others whose spread is the
noise a perfect fit still shows (relative to the sample: a perfect fit's relative
difference is about sqrt(2) times it, both sides being one trace). Per table and overall
it compares the statistics `CHECKED` (distinct rows per batch, consecutive reuse, the
share of lookups on the top 1% of rows, rows touched) and the rows-touched curve, all
measured by the fit's own kernel (`replay.workload.fit_stats`) on row ids made dense per
table, so that the sample and the synthetic trace are measured the same way whatever
their row spaces. The sample is the batches the fit used, or other batches of the trace
(e.g. the half the fit did not see).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from replay.trace.reader import Trace
from replay.workload.fit import FitResult
from replay.workload.fit_sample import read_sample, split_by_table
from replay.workload.fit_stats import _table_stats
from replay.workload.generator import CompiledWorkload

CHECKED = ("distinct_per_batch", "consecutive_reuse", "top1pct_share", "touched_rows")
# synthetic traces the check generates: the spec's seed, whose statistics it shows, and
# others whose spread is the noise a perfect fit still shows (relative to the sample)
CHECK_TRACES = 4
_CHECK_CURVE_POINTS = 24


def _check_stats(
    per_table: Sequence[tuple[np.ndarray, np.ndarray]], rows: Sequence[int], num_batches: int
) -> list[dict[str, Any]]:
    """Per table, then overall (last): the four checked statistics and the touched curve
    (rows touched by batches 0..x-1). Row ids are made dense per table first, so the
    sample and the synthetic trace are measured the same way whatever their row spaces."""
    from replay.trace.keys import curve_batches

    curve_x = curve_batches(num_batches, _CHECK_CURVE_POINTS)
    lags = np.zeros(0, dtype=np.int64)
    out = []
    all_batches, all_keys, all_counts = [], [], []
    offset = 0
    for (batch, row), rows_t in zip(per_table, rows, strict=True):
        uniq, ids, counts = np.unique(row, return_inverse=True, return_counts=True)
        batch = np.ascontiguousarray(batch, dtype=np.int64)
        ids = ids.astype(np.int64)
        _, reuse, dpb, curve, _ = _table_stats(
            batch, ids, len(uniq), num_batches, curve_x, num_batches, lags
        )
        out.append(_checked(dpb, reuse, counts, -(-int(rows_t) // 100), curve_x, curve))
        all_batches.append(batch)
        all_keys.append(ids + offset)
        all_counts.append(counts)
        offset += len(uniq)
    batch = np.concatenate(all_batches)
    order = np.argsort(batch, kind="stable")  # back to trace order
    _, reuse, dpb, curve, _ = _table_stats(
        batch[order], np.concatenate(all_keys)[order], offset, num_batches, curve_x,
        num_batches, lags,
    )  # fmt: skip
    top_k = -(-int(sum(int(r) for r in rows)) // 100)
    out.append(_checked(dpb, reuse, np.concatenate(all_counts), top_k, curve_x, curve))
    return out


def _checked(
    dpb: float, reuse: float, counts: np.ndarray, top_k: int, curve_x: np.ndarray,
    curve: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    total = int(counts.sum())
    top = int(np.sort(counts)[::-1][:top_k].sum())
    return {
        "distinct_per_batch": float(dpb),
        "consecutive_reuse": float(reuse),
        "top1pct_share": top / total if total else 0.0,
        "touched_rows": int(curve[-1]) if len(curve) else 0,
        "curve": [[int(x), int(v)] for x, v in zip(curve_x.tolist(), curve.tolist(), strict=True)],
    }


def _rel(synthetic: float, sample: float) -> float | None:
    return (synthetic - sample) / sample if sample else None


def _noise(values: Sequence[float], sample: float) -> float | None:
    """The spread (sd) of a statistic over synthetic traces, relative to the sample's:
    a perfect fit's relative difference is about sqrt(2) times this (both sides are
    one trace)."""
    return float(np.std(values, ddof=1)) / abs(sample) if sample else None


def check_fit(
    trace: Trace, result: FitResult, *, against: tuple[int, int] | None = None
) -> dict[str, Any]:
    """Statistics of the sample side by side with those of a synthetic trace generated
    from the fitted spec with the sample's shape (its own seed, not the fit's).

    The sample is the batches the fit used, or `against` = (first, stop): other batches
    of the trace, e.g. the half the fit did not see."""
    first, stop = against or (result.first_batch, result.first_batch + result.batches)
    sample = read_sample(trace, max(result.max_lookups, trace.num_lookups), (first, stop))
    spec = replace(result.spec, batches=sample.num_batches)
    rows = [t.rows for t in spec.tables]
    observed = _check_stats(sample.per_table, rows, sample.num_batches)
    runs = []  # the spec's seed first, then others for the noise
    for i in range(CHECK_TRACES):
        compiled = CompiledWorkload.from_spec(replace(spec, seed=spec.seed + i))
        batch, table, row = compiled.lookups(0, sample.num_batches)
        synthetic = split_by_table(batch, table, row, len(spec.tables))
        runs.append(_check_stats(synthetic, rows, sample.num_batches))
    generated = runs[0]
    entries = []
    for e, (name, obs, gen) in enumerate(
        zip([*sample.names, "overall"], observed, generated, strict=True)
    ):
        stats = {
            key: {
                "sample": obs[key],
                "synthetic": gen[key],
                "rel_diff": _rel(gen[key], obs[key]),
                "noise": _noise([run[e][key] for run in runs], obs[key]),
            }
            for key in CHECKED
        }
        diffs = [_rel(g, o) for (_, o), (_, g) in zip(obs["curve"], gen["curve"], strict=True)]
        known = [abs(d) for d in diffs if d is not None]
        entries.append(
            {
                "name": name,
                "stats": stats,
                "curve": {
                    "batches": [x for x, _ in obs["curve"]],
                    "sample": [v for _, v in obs["curve"]],
                    "synthetic": [v for _, v in gen["curve"]],
                    "max_abs_rel_diff": max(known) if known else None,
                },
            }
        )
    return {
        "sample": {"first_batch": first, "batches": sample.num_batches},
        "synthetic": {"seed": spec.seed, "batches": spec.batches, "lookups": spec.lookups},
        "tables": entries[:-1],
        "overall": entries[-1],
    }
