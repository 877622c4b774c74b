"""The locality fit's round trip (issue 58): a batch generated from a known spec, its
statistics written in Meta's format (3 decimals, as `test_fit_locality.record_text`
prints them) and parsed back, fitted, and a batch of the fitted spec generated and
compared with the record. Used by `tests/test_fit_locality_roundtrip.py` (a fixed few
in the normal suite, random specs under `-m bench`) and by hand."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from test_fit_locality import record_text

from replay.analysis.batch_reuse import spec_batch_reuse
from replay.workload.fit_locality import LocalityFit, fit_locality
from replay.workload.locality_stats import parse_locality_stats
from replay.workload.spec import TableSpec, WorkloadSpec

SHARE_BOUND = 0.01  # every bin of both histograms
DISTINCT_BOUND = 0.03  # distinct rows per batch, relative
LOOKUPS_BOUND = 0.01  # lookups per batch, relative
MIN_LOOKUPS = 8_000_000  # lookups per generated batch (sampling noise, memory and time)
MAX_LOOKUPS = 16_000_000


@dataclass(frozen=True)
class RoundTrip:
    spec: WorkloadSpec
    fit: LocalityFit
    rows_gap: float  # largest |generated - record| over the rows-share bins
    lookups_gap: float  # the same over the lookups-share bins
    distinct_gap: float  # generated / record - 1
    lookups_ratio_gap: float
    fit_seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.rows_gap <= SHARE_BOUND
            and self.lookups_gap <= SHARE_BOUND
            and abs(self.distinct_gap) <= DISTINCT_BOUND
            and abs(self.lookups_ratio_gap) <= LOOKUPS_BOUND
        )

    def summary(self) -> str:
        return (
            f"{self.spec.name}: {len(self.spec.tables)} tables, batch {self.spec.batch_size}; "
            f"fit {len(self.fit.groups)} groups in {self.fit_seconds:.0f} s; generated: rows "
            f"{self.rows_gap:.4f}, lookups {self.lookups_gap:.4f}, distinct "
            f"{100 * self.distinct_gap:+.2f}%, lookups {100 * self.lookups_ratio_gap:+.3f}%"
        )


def random_spec(
    seed: int, *, max_groups: int = 3, min_rows: float = 1e4, max_rows: float = 5e6
) -> WorkloadSpec:
    """1 to `max_groups` groups of alike tables, each with its own table count (1 to 20),
    pooling (1 to 60, log-uniform), rows (log-uniform), exponent (0 to 1.6) and rank
    offset (none 2 times in 5, else 1 to 3,000 log-uniform), a batch of 256 to 8,192:
    specs of the fit's family, so that the truth is one of the specs it can write.
    Poolings are scaled to MIN_LOOKUPS to MAX_LOOKUPS lookups per batch (log-uniform)."""
    rng = np.random.default_rng(seed)
    batch = int(rng.choice([256, 512, 1024, 2048, 4096, 8192]))
    tables: list[tuple[int, float, float, int]] = []
    for _ in range(int(rng.integers(1, max_groups + 1))):
        count = int(rng.choice([1, 1, 2, 3, 5, 8, 13, 20]))
        pooling = max(1, round(math.exp(rng.uniform(0.0, math.log(60.0)))))
        rows = int(math.exp(rng.uniform(math.log(min_rows), math.log(max_rows))))
        alpha = round(float(rng.uniform(0.0, 1.6)), 3)
        offset = 0.0 if rng.random() < 0.4 else math.exp(rng.uniform(0.0, math.log(3000.0)))
        tables += [(rows, alpha, round(offset, 2), pooling)] * count
    # 8 M to 16 M lookups per batch: a row whose count is near a bin edge lands on
    # either side from batch to batch, moving a lookups share by its own share; below
    # 3.3 M lookups a row of 32,768 or fewer lookups may hold over 1% of them (measured:
    # one table of 1.8 M lookups, whose truth itself misses its own batch by 0.018)
    lookups = math.exp(rng.uniform(math.log(MIN_LOOKUPS), math.log(MAX_LOOKUPS)))
    scale = lookups / (batch * sum(t[3] for t in tables))
    return WorkloadSpec(
        name=f"random-{seed}",
        tables=tuple(
            TableSpec(
                name=f"T{i}", rows=r, alpha=a, rank_offset=q, pooling=max(1, round(p * scale))
            )
            for i, (r, a, q, p) in enumerate(tables)
        ),
        batch_size=batch,
        batches=1,
        seed=seed,
    )


def round_trip(spec: WorkloadSpec, **fit_options: object) -> RoundTrip:
    """Generate, write, parse, fit, generate again, compare (module docstring)."""
    tables, batch = len(spec.tables), spec.batch_size
    measured = spec_batch_reuse(spec, 0)
    (record,) = parse_locality_stats(
        record_text(measured, f"{spec.name}_t{tables}_bs{batch}.pt", batch=batch)
    )
    started = time.perf_counter()
    fit = fit_locality(
        record.stats,
        tables=tables,
        batch_size=batch,
        allow_miss=True,
        **fit_options,  # type: ignore[arg-type]
    )
    seconds = time.perf_counter() - started
    again = spec_batch_reuse(fit.spec, 0)
    target = record.stats
    return RoundTrip(
        spec=spec,
        fit=fit,
        rows_gap=float(np.abs(again.rows_share - target.rows_share).max()),
        lookups_gap=float(np.abs(again.lookups_share - target.lookups_share).max()),
        distinct_gap=again.distinct / target.distinct - 1.0,
        lookups_ratio_gap=again.lookups / target.lookups - 1.0,
        fit_seconds=seconds,
    )
