"""The cluster replay's merged ranges (`replay.engine.cluster.grouped_ranges`,
`merge_ranges`): a merged range holds its parts' keys, bounds and counts end to end, and
a replay whose ranges are merged equals one whose ranges are not, column for column."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import replay.engine.cluster as cluster
from replay.engine.cluster import grouped_ranges, merge_ranges, replay_cluster
from replay.system.sharding import resolve_plan, table_shapes, uniform_plan
from replay.system.spec import apply_overrides, build_system, load_system_data
from replay.trace.stream import BatchRange, split_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


def _range(start: int, sizes: list[int], usizes: list[int], key0: int) -> BatchRange:
    keys = np.arange(key0, key0 + sum(sizes), dtype=np.uint32)
    ukeys = np.arange(key0, key0 + sum(usizes), dtype=np.uint32)
    return BatchRange(
        start, start + len(sizes), keys, np.concatenate([[0], np.cumsum(sizes)]),
        ukeys, np.concatenate([[0], np.cumsum(usizes)]), np.array(usizes, dtype=np.int64),
        updates_are_lookups=True,
    )  # fmt: skip


def test_merge_ranges_end_to_end() -> None:
    parts = [_range(0, [3, 2], [2, 1], 0), _range(2, [4], [3], 5), _range(3, [0, 1], [0, 1], 9)]
    merged = merge_ranges(parts)
    assert (merged.batch_start, merged.batch_stop) == (0, 5)
    np.testing.assert_array_equal(merged.keys, np.arange(10))
    np.testing.assert_array_equal(merged.bounds, [0, 3, 5, 9, 9, 10])
    np.testing.assert_array_equal(merged.update_bounds, [0, 2, 3, 6, 6, 7])
    np.testing.assert_array_equal(merged.update_keys, [0, 1, 2, 5, 6, 7, 9])
    np.testing.assert_array_equal(merged.distinct, [2, 1, 3, 0, 1])
    assert merged.updates_are_lookups and merged.keys.dtype == np.uint32


def test_grouped_ranges_limits() -> None:
    parts = [_range(b, [4], [1], 4 * b) for b in range(7)]
    sizes = [len(g) for g in grouped_ranges(iter(parts), lookups=12, batches=100)]
    assert sizes == [3, 3, 1]
    sizes = [len(g) for g in grouped_ranges(iter(parts), lookups=100, batches=2)]
    assert sizes == [2, 2, 2, 1]
    big = [_range(0, [20], [1], 0), *parts[1:3]]  # larger than the limit alone
    assert [len(g) for g in grouped_ranges(iter(big), lookups=12, batches=100)] == [1, 2]
    # a piece of a batch is a group of its own
    piece = BatchRange(**{**parts[1].__dict__, "tables": (0, 1)})
    mixed = [parts[0], piece, parts[2], parts[3]]
    assert [len(g) for g in grouped_ranges(iter(mixed), lookups=100, batches=100)] == [1, 1, 2]


class _OneBatchRanges:
    """A source whose ranges hold one batch each (so that the replay has some to merge)."""

    def __init__(self, inner: GeneratedTrace) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generated_ranges(self, *args: Any, **kwargs: Any) -> Iterator[BatchRange]:
        return split_ranges(self.inner.generated_ranges(*args, **kwargs), 1)


@pytest.mark.parametrize("kind", ["row-wise", "data-parallel"])
@pytest.mark.parametrize("policy", ["hbm-lru", "hbm-tbe-lru"])
def test_merged_ranges_replay_the_same(
    kind: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _OneBatchRanges(
        GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=12, batch_size=256))
    )
    data, origin = load_system_data(policy)
    sets = ["cluster.nodes=2", "cluster.gpus_per_node=2", "policy.capacity_rows=2000"]
    system = build_system(apply_overrides(data, sets), origin)
    tables = table_shapes(source.table_names, source.table_rows, 16)
    plan = uniform_plan(kind, tables, nodes=2, gpus_per_node=2)
    placement = resolve_plan(plan, tables, nodes=2, gpus_per_node=2)
    ranges: list[int] = []
    merged = replay_cluster(source, system, placement, lambda done, _: ranges.append(done))  # type: ignore[arg-type]
    assert len(ranges) < 12  # the 12 one-batch ranges merged (in groups shrinking to the end)
    monkeypatch.setattr(cluster, "RANK_LOOKUPS", 0)
    ranges.clear()
    alone = replay_cluster(source, system, placement, lambda done, _: ranges.append(done))  # type: ignore[arg-type]
    assert len(ranges) == 12
    assert merged.columns.keys() == alone.columns.keys()
    for name, values in alone.columns.items():
        np.testing.assert_array_equal(merged.columns[name], values, err_msg=name)
    for name, values in alone.batch_columns.items():
        np.testing.assert_array_equal(merged.batch_columns[name], values, err_msg=name)
    assert merged.ranks == alone.ranks and merged.totals == alone.totals
    assert alone.totals["lookups"] == source.num_lookups > 0
