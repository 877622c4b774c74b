"""The slow, obviously correct trace statistics (sets and dicts) that the tests compare
`replay.analysis.stats.inspect_arrays` and `inspect_trace` with; the definitions of
every figure are `replay.analysis.stats`'s module docstring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from replay.trace.curve_points import DEFAULT_CURVE_POINTS
from replay.trace.keys import curve_batches


def inspect_reference(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    table_rows: Sequence[int] | np.ndarray,
    *,
    num_batches: int | None = None,
    names: Sequence[str] | None = None,
    curve_points: int = DEFAULT_CURVE_POINTS,
) -> dict[str, Any]:
    """Slow, obviously correct `inspect_arrays` with sets and dicts (for tests)."""
    rows = [int(r) for r in table_rows]
    num_tables = len(rows)
    total_rows = sum(rows)
    lookups_of: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for b, t, r in zip(batch.tolist(), table.tolist(), row.tolist(), strict=True):
        lookups_of[b].append((t, r))
    if num_batches is None:
        num_batches = max(lookups_of) + 1 if lookups_of else 0

    counts: dict[tuple[int, int], int] = defaultdict(int)
    seen: set[tuple[int, int]] = set()
    touched_after: list[int] = []
    dpb = [0.0, 0]
    reuse = [0.0, 0]
    dpb_t = [[0.0, 0] for _ in rows]
    reuse_t = [[0.0, 0] for _ in rows]
    previous: set[tuple[int, int]] = set()
    for b in range(num_batches):
        pairs = lookups_of.get(b, [])
        for p in pairs:
            counts[p] += 1
        current = set(pairs)
        if pairs:
            dpb[0] += len(current) / len(pairs)
            dpb[1] += 1
        if b >= 1 and current:
            reuse[0] += len(current & previous) / len(current)
            reuse[1] += 1
        for t in range(num_tables):
            looked = [p for p in pairs if p[0] == t]
            cur_t = {p for p in current if p[0] == t}
            prev_t = {p for p in previous if p[0] == t}
            if looked:
                dpb_t[t][0] += len(cur_t) / len(looked)
                dpb_t[t][1] += 1
            if b >= 1 and cur_t:
                reuse_t[t][0] += len(cur_t & prev_t) / len(cur_t)
                reuse_t[t][1] += 1
        seen |= current
        touched_after.append(len(seen))
        previous = current

    def top(values: list[int], k: int) -> int:
        return sum(sorted(values, reverse=True)[:k])  # rows never looked up add 0

    tables = []
    for t, n in enumerate(rows):
        mine = [c for (tt, _), c in counts.items() if tt == t]
        lookups = sum(mine)
        distinct = len(mine)
        tables.append(
            {
                "name": names[t] if names is not None else f"t{t}",
                "rows": n,
                "lookups": lookups,
                "distinct_rows": distinct,
                "touched_fraction": distinct / n,
                "top1pct_rows": -(-n // 100),
                "top1pct_share": top(mine, -(-n // 100)) / lookups if lookups else 0.0,
                "distinct_per_batch_mean": dpb_t[t][0] / dpb_t[t][1] if dpb_t[t][1] else 0.0,
                "consecutive_reuse_mean": (reuse_t[t][0] / reuse_t[t][1] if reuse_t[t][1] else 0.0),
            }
        )
    lookups = sum(counts.values())
    return {
        "batches": num_batches,
        "lookups": lookups,
        "rows": total_rows,
        "distinct_rows": len(seen),
        "touched_fraction": len(seen) / total_rows,
        "top1pct_rows": -(-total_rows // 100),
        "top1pct_share": (
            top(list(counts.values()), -(-total_rows // 100)) / lookups if lookups else 0.0
        ),
        "distinct_per_batch_mean": dpb[0] / dpb[1] if dpb[1] else 0.0,
        "consecutive_reuse_mean": reuse[0] / reuse[1] if reuse[1] else 0.0,
        "tables": tables,
        "touched_curve": [
            [int(x), touched_after[x - 1] / total_rows]
            for x in curve_batches(num_batches, curve_points).tolist()
        ],
    }


__all__ = ["inspect_reference"]
