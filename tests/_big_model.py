"""A 400-table, 2-billion-row workload spec for the sharder's acceptance (issue 53): table
sizes log-spaced from 2 rows to tens of millions (a production model's spread: about a
third of the tables under 1,000 rows), poolings 1 to 8, power laws of alpha 0.9 to 1.2,
dim 128 (954 GiB of fp32 weights). Deterministic: a function of its arguments only."""

from __future__ import annotations

from replay.workload.spec import TableSpec, WorkloadSpec


def big_model_spec(
    tables: int = 400, total_rows: int = 2_000_000_000, *, batch_size: int = 8192, dim: int = 128
) -> WorkloadSpec:
    """`tables` tables whose rows are log-spaced from 2 and add up to `total_rows`
    (the largest scaled so the sum is exact)."""
    # the ratio r of a geometric 2, 2r, ... whose sum is total_rows, by bisection
    lo, hi = 1.0 + 1e-9, 2.0
    for _ in range(200):
        r = (lo + hi) / 2
        if 2.0 * (r**tables - 1) / (r - 1) > total_rows:
            hi = r
        else:
            lo = r
    rows = [max(2, round(2.0 * lo**i)) for i in range(tables)]
    rows[-1] += total_rows - sum(rows)
    specs = tuple(
        TableSpec(
            name=f"t{i:03d}",
            rows=n,
            alpha=0.9 + 0.3 * ((i * 37) % 11) / 10,
            pooling=1 + (i * 13) % 8,
        )
        for i, n in enumerate(rows)
    )
    return WorkloadSpec(
        name=f"big-{tables}",
        tables=specs,
        batch_size=batch_size,
        batches=10,
        seed=53,
        embedding_dim=dim,
        source="a made-up production-shaped model: sizes log-spaced from 2 rows",
    )


def tiny_tables(spec: WorkloadSpec, below: int = 1000) -> list[str]:
    return [t.name for t in spec.tables if t.rows < below]


__all__ = ["big_model_spec", "tiny_tables"]
