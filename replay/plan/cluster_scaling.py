"""The cluster plan's replays at other GPU counts and its variants of the first system:
the scaling points (the all-to-all and the step time at 1, 2, 4, 8 nodes and the user's,
auto sharding), the production-scale steady span routed in pieces without caches
(`replay.engine.cluster_routed`), the cache rows a span's replay needs, and the first
system as the cluster replay runs it. Split from `replay.plan.cluster` (its module
docstring states the model: item 4 for the steady state, 5 (b) for the scaling).

ASSUMPTIONS: those of `replay.plan.cluster`; a scaling point uses auto sharding with the
user's GPUs per node; at production scale every scaling point puts each GPU at the mean
per-GPU hit of the user's cluster.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from replay.errors import ConfigError

SCALING_NODES = (1, 2, 4, 8)  # the all-to-all against GPUs: these node counts and the user's
SCALING_BATCHES = 16  # batches of each scaling replay (at most the steady span)
STEADY_OVERRIDES = ("checkpoint.strategy=none",)
# policies that fill every miss and evict only when full: over a span whose rank touches D
# distinct rows, any cache of at least D rows behaves the same (it never evicts)
NO_EVICTION_EQUIVALENT = ("lru", "lfu")


def cluster_system(name: str, sets: Sequence[str], capacity_rows: int, policy: str) -> Any:
    """The first system as the cluster replay runs it: no checkpointing, a cache of
    `capacity_rows` per GPU (cached policies; `policy`: the plan's resolved first system's).
    A variant of the plan's spec, so resolved here with its own sets."""
    from replay.engine.systems import resolve_system
    from replay.policies import POLICIES

    extra = list(STEADY_OVERRIDES)
    if POLICIES[policy].cached:
        extra.append(f"policy.capacity_rows={max(int(capacity_rows), 1)}")
    return resolve_system(name, [*sets, *extra])


def span_capacity(source: Any, placement: Any, budget_rows: int, policy: str) -> int:
    """The cache rows per GPU a replay of `source` needs to behave as caches of
    `budget_rows`: for `NO_EVICTION_EQUIVALENT` policies, min(budget, the most distinct
    rows any GPU touches over the span) (counted exactly, `rank_curves` at R = 1): a
    larger cache never evicts there either, and its hash table and slots would cost 32 B
    and more per row of its GPU's shards (64 GPUs of 8 GiB caches over Criteo Terabyte's
    187 M rows: 10 GB measured) for nothing. Other policies: the budget."""
    from replay.plan.rank_curves import rank_curves

    if policy not in NO_EVICTION_EQUIVALENT or budget_rows <= 1:
        return int(budget_rows)
    curves = rank_curves(source, placement, np.array([1]), rate=1.0)
    touched = int(np.max(np.asarray(curves.distinct), initial=1))
    return int(min(budget_rows, max(touched, 1)))


def placement_for(base: Any, source: Any, loads: Any, **kw: Any) -> Any:
    from replay.engine.placement import resolve_placement

    return resolve_placement(base, source, loads=loads, **kw)


# a batch above this many lookups: the steady span is routed in pieces, not replayed
# with caches (`replay.engine.cluster_routed`); one batch of it
ROUTED_MIN_LOOKUPS = 1 << 27
ROUTED_BATCHES = 1
ROUTED_STEADY = (
    "at production scale ({lookups:,} lookups in {span} batch): the batch routed in pieces "
    "of tables without caches (replay.engine.cluster_routed: per-GPU lookups, update rows, "
    "all-to-all and all-reduce exactly as the cluster replay routes them); each GPU's hits "
    "= its lookups x its curve's hit at the budget (SHARDS over the whole run, above), its "
    "other counters a full LRU cache's (every miss fills and evicts a dirty row); no "
    "checkpointing"
)


def routed_steady(spec: Any, base: Any) -> bool:
    """Whether the cluster's steady state is routed without caches (`ROUTED_STEADY`): a
    workload whose batch has more than `ROUTED_MIN_LOOKUPS` lookups, an LRU policy."""
    from replay.engine.cluster_routed import routed_policy_ok

    return (
        spec is not None
        and int(spec.lookups_per_batch) > ROUTED_MIN_LOOKUPS
        and routed_policy_ok(base)
    )


# the latest `count_ahead`: (its span's spec, the future of its counts)
_ahead: list[tuple[Any, Future[Any]]] = []
_ahead_lock = threading.Lock()


def _counts_of(span: Any) -> tuple[np.ndarray, np.ndarray]:
    from replay.workload.batch_distinct import batch_table_counts
    from replay.workload.generator import CompiledWorkload

    return batch_table_counts(CompiledWorkload.from_spec(span), 0)


def count_ahead(spec: Any, base: Any) -> None:
    """Start counting the routed span's lookups and update rows per table (batch 0's, from
    its draws: `replay.workload.batch_distinct`) on a helper thread, where the plan will
    route it (`routed_steady`) and a batch's update rows are its own: it needs the spec
    alone, and the plan's stages before the routing leave a core idle at times, which
    the helper takes (at a lower priority than the plan's own threads). `routed_counts`
    takes the counts (the same numbers as counting there)."""
    if spec is None or base is None or base.cluster is None or not routed_steady(spec, base):
        return
    if spec.update.accumulate_batches != 1:
        return
    span = spec.with_overrides(batches=ROUTED_BATCHES)
    with _ahead_lock:
        if _ahead and _ahead[0][0] == span:
            return
        future: Future[Any] = Future()
        _ahead[:] = [(span, future)]

    def run() -> None:
        from replay._threads import lower_priority

        lower_priority()
        try:
            got = _counts_of(span)
        except BaseException as exc:  # raised where the counts are taken
            future.set_exception(exc)
        else:
            future.set_result(got)

    threading.Thread(target=run, name="routed-counts", daemon=True).start()


def routed_counts(spec: Any, placements: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The routed span's (lookups, update rows) per table (1 x tables arrays: batch 0's,
    `replay.engine.cluster_routed.source_table_counts` of the span), where they are all
    its routing needs: no placement splits a table (`cluster_routed.splits_tables`) and
    a batch's update rows are its own (a step every batch); else None (the span is read
    in pieces). Counted from the draws (`replay.workload.batch_distinct`), or taken from
    `count_ahead`."""
    from replay._threads import wait_for
    from replay.engine.cluster_routed import splits_tables

    if spec is None or spec.update.accumulate_batches != 1:
        return None
    if any(splits_tables(p) for p in placements):
        return None
    span = spec.with_overrides(batches=ROUTED_BATCHES)
    with _ahead_lock:
        held = _ahead[0][1] if _ahead and _ahead[0][0] == span else None
    if held is not None:
        looks, upds = wait_for(held)
        return looks.copy(), upds.copy()
    return _counts_of(span)


def routed_span(
    base: Any, name: str, sets: Sequence[str], spec: Any, loads: Any, placement: Any,
    system: Any, at_budget: np.ndarray, *, nodes: int,
) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """The user's cluster and the scaling points (`scaling`'s GPU counts) from one read
    of `ROUTED_BATCHES` in pieces (`replay.engine.cluster_routed.route_clusters`), or
    from its per-table counts alone where they suffice (`routed_counts`)."""
    from types import SimpleNamespace

    from replay.engine.cluster_routed import route_clusters
    from replay.workload.onthefly import GeneratedTrace

    span = GeneratedTrace(spec.with_overrides(batches=ROUTED_BATCHES))
    cluster = base.cluster
    jobs: list[tuple[Any, Any, Any]] = [(system, placement, at_budget)]
    mean_hit = float(at_budget.mean()) if len(at_budget) else 0.0
    points: list[dict[str, Any]] = []
    index: list[int | None] = []
    for n in sorted({*SCALING_NODES, int(nodes)}):
        point: dict[str, Any] = {"nodes": n, "gpus": n * cluster.gpus_per_node}
        points.append(point)
        if n == int(nodes) and cluster.sharding == "auto" and not cluster.sharding_file:
            placed_at: Any = placement  # the user's cluster: routed once (`route_clusters`)
        else:
            try:
                placed_at = placement_for(base, span, loads, sharding="auto", nodes=n).placement
            except ConfigError as exc:
                point.update(fits=False, why=str(exc))
                index.append(None)
                continue
        sized = dataclasses.replace(system, cluster=dataclasses.replace(system.cluster, nodes=n))
        index.append(len(jobs))
        jobs.append((sized, placed_at, np.full(placed_at.world, mean_hit)))
    results = route_clusters(span, jobs, counts=routed_counts(spec, [job[1] for job in jobs]))
    for point, j in zip(points, index, strict=True):
        if j is None:
            continue
        cols = results[j]
        point.update(
            fits=True,
            all_to_all_s_per_batch=float(np.mean(cols["all_to_all_s"])),
            all_to_all_bytes_per_batch=float(np.mean(cols["all_to_all_bytes"])),
            allreduce_s_per_batch=float(np.mean(cols["allreduce_s"])),
            step_time_s=float(np.mean(cols["step_time_s"])),
            imbalance=float(np.mean(cols["imbalance"])),
        )
    return SimpleNamespace(columns=results[0]), {"batches": ROUTED_BATCHES, "points": points}


def scaling(
    base: Any, name: str, sets: Sequence[str], source: Any, loads: Any, spec: Any,
    budget_rows: int, *, nodes: int, steady: tuple[Any, Any, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The all-to-all (and step) time per batch at 1, 2, 4, 8 nodes and the user's, the
    same GPUs per node, auto sharding, over the first `SCALING_BATCHES` of the span.
    `steady`: the user's cluster's (placement, system, columns) as the steady span
    replayed it, taken for the point that would replay the same (deterministic: the same
    numbers, one replay fewer)."""
    from replay.engine.cluster import replay_cluster
    from replay.plan.cluster_spread import same_run

    span = source
    if spec is not None and int(source.num_batches) > SCALING_BATCHES:
        from replay.workload.onthefly import GeneratedTrace

        span = GeneratedTrace(spec.with_overrides(batches=SCALING_BATCHES))
    cluster = base.cluster
    points = []
    for n in sorted({*SCALING_NODES, int(nodes)}):
        point: dict[str, Any] = {"nodes": n, "gpus": n * cluster.gpus_per_node}
        try:
            placed = placement_for(base, span, loads, sharding="auto", nodes=n)
        except ConfigError as exc:
            point.update(fits=False, why=str(exc))
            points.append(point)
            continue
        capacity = span_capacity(span, placed.placement, budget_rows, base.policy.name)
        system = cluster_system(name, sets, capacity, base.policy.name)
        sized = dataclasses.replace(system, cluster=dataclasses.replace(system.cluster, nodes=n))
        if steady is not None and span is source and same_run(steady, sized, placed.placement):
            columns = steady[2]
        else:
            columns = replay_cluster(span, sized, placed.placement).columns
        step = np.asarray(columns["step_time_s"], dtype=np.float64)
        point.update(
            fits=True,
            all_to_all_s_per_batch=float(np.mean(columns["all_to_all_s"])),
            all_to_all_bytes_per_batch=float(np.mean(columns["all_to_all_bytes"])),
            allreduce_s_per_batch=float(np.mean(columns["allreduce_s"])),
            step_time_s=float(np.mean(step)),
            imbalance=float(np.mean(columns["imbalance"])),
        )
        points.append(point)
    return {"batches": int(span.num_batches), "points": points}


__all__ = [
    "NO_EVICTION_EQUIVALENT",
    "ROUTED_BATCHES",
    "ROUTED_MIN_LOOKUPS",
    "ROUTED_STEADY",
    "SCALING_BATCHES",
    "SCALING_NODES",
    "STEADY_OVERRIDES",
    "cluster_system",
    "count_ahead",
    "placement_for",
    "routed_counts",
    "routed_span",
    "routed_steady",
    "scaling",
    "span_capacity",
]
