"""Helpers of the tests that cut batches into pieces of tables on small workloads
(`replay.trace.format.plan_pieces`): a spec of tables of cycled sizes and pooling, and
the tiny row-group target that makes such a spec's batches pieces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import replay.trace.format as fmt
from replay.workload.spec import WorkloadSpec, spec_from_dict


def cut_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups of ~60 lookups; batches of more than 120 are cut into pieces."""
    monkeypatch.setattr(fmt, "ROW_GROUP_TARGET_LOOKUPS", 60)
    monkeypatch.setattr(fmt, "PIECE_MIN_LOOKUPS", 120)


def cycled_spec(
    name: str,
    rows: Sequence[int],
    *,
    tables: int,
    batches: int,
    batch_size: int,
    seed: int,
    alpha: float = 1.0,
    **extra: Any,
) -> WorkloadSpec:
    """A spec of `tables` tables whose rows cycle through `rows` and pooling through
    1-3 lookups per sample (`extra`: more top-level fields)."""
    return spec_from_dict(
        {
            "name": name,
            "batch_size": batch_size,
            "batches": batches,
            "seed": seed,
            **extra,
            "tables": [
                {
                    "name": f"t{i}",
                    "rows": rows[i % len(rows)],
                    "alpha": alpha,
                    "pooling": 1 + i % 3,
                }
                for i in range(tables)
            ],
        }
    )
