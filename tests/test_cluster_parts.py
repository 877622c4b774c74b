"""The cluster replay's routing of a group of ranges where they lie
(`replay.engine.cluster_parts.route_parts`): equal, array for array, to routing the
group merged into one range (`Router.route` of `merge_ranges`), for every sharding type,
the update rows laid out or only counted; and the routing thread (`_routed_ahead`) hands
a source's error to the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from replay.engine.cluster import (
    cluster_link,
    collective_model,
    joined_counts,
    merge_ranges,
    replay_cluster,
)
from replay.engine.cluster_parts import route_parts
from replay.engine.cluster_route import Router
from replay.system.sharding import resolve_plan, table_shapes, uniform_plan
from replay.system.spec import ClusterSpec, apply_overrides, build_system, load_system_data
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange, iter_batch_ranges, split_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


@pytest.fixture(scope="module")
def small() -> GeneratedTrace:
    return GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=9, batch_size=128))


@pytest.mark.parametrize(
    "kind",
    ["row-wise", "table-wise", "column-wise", "data-parallel", "table-row-wise", "grid"],
)
@pytest.mark.parametrize("update_keys", [True, False])
def test_parts_route_as_the_merged_range(
    small: GeneratedTrace, kind: str, update_keys: bool
) -> None:
    tables = table_shapes(small.table_names, small.table_rows, 16)
    plan = uniform_plan(kind, tables, nodes=2, gpus_per_node=2)
    placement = resolve_plan(plan, tables, nodes=2, gpus_per_node=2)
    offsets = table_offsets(np.asarray(small.table_rows, dtype=np.int64))
    link = cluster_link(ClusterSpec(nodes=2, gpus_per_node=2), 2)
    collectives = collective_model(ClusterSpec(nodes=2, gpus_per_node=2), placement, 128, link)
    whole = list(iter_batch_ranges(small, with_updates=True, with_distinct=True))
    parts = list(split_ranges(iter(whole), 2))  # 2 batches a part: 5 parts
    assert len(parts) == 5
    merged = merge_ranges(parts)
    expected_traffic = collectives.buffers(merged.batches)
    expected = Router(placement, offsets, 128, ring=2).route(merged, expected_traffic, update_keys)
    traffic = collectives.buffers(merged.batches)
    got = route_parts(Router(placement, offsets, 128, ring=2), parts, traffic, update_keys)
    assert len(got) == len(expected) == 8
    for name, a, b in zip(("counts", "keys", "starts", "bounds") * 2, got, expected, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert a.dtype == b.dtype, name
    for a, b in zip(traffic, expected_traffic, strict=True):
        np.testing.assert_array_equal(a, b)
    head = joined_counts(parts)
    assert (head.batch_start, head.batch_stop, len(head.keys)) == (0, 9, 0)
    np.testing.assert_array_equal(head.bounds, merged.bounds)
    np.testing.assert_array_equal(head.update_bounds, merged.update_bounds)
    np.testing.assert_array_equal(head.distinct, merged.distinct)


class _Failing:
    """A source whose ranges fail after the first (a corrupt file, say)."""

    def __init__(self, inner: GeneratedTrace) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generated_ranges(self, *args: Any, **kwargs: Any) -> Iterator[BatchRange]:
        for i, br in enumerate(split_ranges(self.inner.generated_ranges(*args, **kwargs), 1)):
            if i == 3:
                raise OSError("range 3: unreadable")
            yield br


def test_a_source_error_reaches_the_caller(
    small: GeneratedTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replay.engine.cluster as cluster

    monkeypatch.setattr(cluster, "RANK_LOOKUPS", 0)  # a range a group: the error mid-run
    data, origin = load_system_data("hbm-lru")
    sets = ["cluster.nodes=2", "cluster.gpus_per_node=2", "policy.capacity_rows=500"]
    system = build_system(apply_overrides(data, sets), origin)
    tables = table_shapes(small.table_names, small.table_rows, 16)
    placement = resolve_plan(
        uniform_plan("row-wise", tables, nodes=2, gpus_per_node=2), tables, nodes=2,
        gpus_per_node=2,
    )  # fmt: skip
    with pytest.raises(OSError, match="range 3"):
        replay_cluster(_Failing(small), system, placement)  # type: ignore[arg-type]
    import threading

    assert not any(t.name == "cluster-route" for t in threading.enumerate())


def test_groups_ramp_up_and_shrink_to_the_end() -> None:
    from replay.engine.cluster import grouped_ranges

    keys = np.arange(4, dtype=np.uint32)
    parts = [
        BatchRange(b, b + 1, keys, np.array([0, 4]), keys, np.array([0, 4]), np.array([4]))
        for b in range(40)
    ]
    sizes = [len(g) for g in grouped_ranges(iter(parts), lookups=32, batches=100)]
    assert sizes == [8] * 5
    sizes = [len(g) for g in grouped_ranges(iter(parts), lookups=32, batches=100, ramp=2)]
    assert sizes == [2, 4, 8, 8, 8, 8, 2]
    sizes = [len(g) for g in grouped_ranges(iter(parts), lookups=32, batches=100, stop=40)]
    assert sizes == [8, 8, 8, 8, 4, 2, 1, 1]  # at most half the batches left
    assert sum(sizes) == 40
