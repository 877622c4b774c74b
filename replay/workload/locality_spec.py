"""A workload spec from table groups: what `replay fit --locality-stats` fits and writes.

A group is a set of alike tables: a share of the tables, a share of the lookups per
sample, one exponent, one rank offset (p(k) ~ (k + q)^-alpha) and one table size.
Tables are independent, so the statistics of a batch are sums over tables and a group's
tables could be one table counted many times; a spec needs whole tables with whole
pooling factors, so a group of n tables and P lookups per sample gives each table
floor(P / n) or that plus 1 (largest remainders first, in table order), the totals exact.
Kept light (no numba). (The `meta-2021` preset is the written spec,
`replay/workload/meta-2021.toml`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replay.workload.spec import TableSpec


@dataclass(frozen=True)
class TableGroup:
    """Alike tables: how many, lookups per sample over all of them, exponent, rows."""

    tables: int
    pooling_total: int  # lookups per sample of the group's tables together
    alpha: float
    rows: int
    rank_offset: float = 0.0  # q of p(k) ~ (k + q)^-alpha


def apportion(total: int, weights: Sequence[float], minimum: int = 0) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders), each >= minimum."""
    n = len(weights)
    spare = total - minimum * n
    if spare < 0:
        raise ValueError(f"{total} cannot give {n} parts at least {minimum} each")
    s = float(sum(weights))
    exact = [spare * w / s for w in weights]
    parts = [int(e) for e in exact]
    order = sorted(range(n), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: spare - sum(parts)]:
        parts[i] += 1
    return [p + minimum for p in parts]


def group_tables(groups: Sequence[TableGroup], prefix: str = "T") -> tuple[TableSpec, ...]:
    """The tables of `groups`, named T0, T1, ... in group order."""
    tables: list[TableSpec] = []
    for group in groups:
        pooling = apportion(group.pooling_total, [1.0] * group.tables, minimum=0)
        for p in pooling:
            tables.append(
                TableSpec(
                    name=f"{prefix}{len(tables)}",
                    rows=group.rows,
                    alpha=group.alpha,
                    rank_offset=group.rank_offset,
                    pooling=max(p, 1),
                )
            )
    return tuple(tables)
