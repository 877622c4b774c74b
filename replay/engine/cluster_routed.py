"""The cluster's routing without its caches: per-GPU lookups, update rows and the
all-to-all of a batch read in pieces, and the step time from given per-GPU hit ratios.

Why. `replay.engine.cluster.replay_cluster` feeds one cache per GPU, each batch whole. At
production scale (meta-2021: 887 M lookups a batch over 5.16 G rows, 128 GPUs) a batch's
keys alone are 7 GiB, and caches sized to what a GPU touches hold ~1 M rows per GPU per
batch, ~500 M over a span: neither fits 4 GiB. But what the routing gives (each GPU's
lookups and update rows per batch, the all-to-all's bytes and time, the imbalance) needs
no cache at all: this pass routes the source's batches in the pieces of tables the
generator cuts them into (`replay.trace.format.plan_pieces`, `iter_batch_ranges(pieces=
True)`) with the same kernels (`replay.engine.cluster_route.Router`: a later piece of a
batch keeps the batch's per-rank bytes, `route_lookups(goes_on=True)`, since no bag spans
two tables), so those columns are exactly the cluster replay's (tested on small workloads
with pieces forced).

The caches. Each GPU's hits are taken as `hit_ratios[r]` x its lookups (the plan passes
the per-GPU curves' hit at the budget, `replay.plan.rank_curves`: SHARDS over the whole
run), and its other counters as an LRU cache in its steady state holds them: every miss
fills one row and evicts one (a full cache), every evicted row is dirty (each row looked
up is updated by the same batch's step), and a batch's update rows are resident when it
ends (a GPU's cache of the budget holds far more rows than one batch's). ASSUMPTION:
that is the `lru` policy's steady state; other policies are not modelled this way
(`routed_policy_ok`). The embedding time and the step then come from the very
accounting the cluster replay uses (`replay.engine.cluster_time.RankAccount`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from replay.engine.account import Shape
from replay.engine.cluster import allreduce_model, cluster_link, collective_model
from replay.engine.cluster_route import Router
from replay.engine.cluster_time import RankAccount
from replay.engine.collectives import CollectiveModel
from replay.engine.replay import workload_shape
from replay.errors import ConfigError
from replay.policies.base import (
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    NUM_COUNTERS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_FAST,
    WRITEBACKS,
)
from replay.system.sharding import Placement
from replay.system.spec import ClusterSpec, SystemSpec
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange, iter_batch_ranges
from replay.workload.source import Source

ROUTED_POLICIES = ("lru",)  # whose steady-state counters this module models


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def routed_policy_ok(system: SystemSpec) -> bool:
    return system.policy.name in ROUTED_POLICIES


def steady_counters(
    lookups: np.ndarray, updates: np.ndarray, hit: np.ndarray, capacity_rows: int
) -> np.ndarray:
    """int64 (world, n, NUM_COUNTERS): a full LRU cache's counters for per-rank `lookups`
    and `updates` (world, n) at hit ratios `hit` (world) (module docstring)."""
    world, n = lookups.shape
    out = np.zeros((world, n, NUM_COUNTERS), dtype=np.int64)
    hits = np.rint(lookups * np.clip(hit, 0.0, 1.0)[:, None]).astype(np.int64)
    misses = lookups - hits
    out[:, :, HITS] = hits
    out[:, :, MISSES] = misses
    out[:, :, FILLS] = misses
    out[:, :, EVICTIONS] = misses
    out[:, :, WRITEBACKS] = misses
    out[:, :, UPDATES_FAST] = updates
    out[:, :, RESIDENT] = capacity_rows
    out[:, :, RESIDENT_MAX] = capacity_rows
    out[:, :, NEEDED_ROWS] = misses
    return out


def _router(source: Source, system: SystemSpec, placement: Placement) -> tuple:
    cluster = system.cluster or ClusterSpec(
        nodes=placement.nodes, gpus_per_node=placement.gpus_per_node
    )
    rows = np.asarray(source.table_rows, dtype=np.int64)
    if [t.rows for t in placement.tables] != rows.tolist():
        raise ConfigError("cluster: the placement's tables are not the source's tables")
    shape = workload_shape(source, system)
    if shape.batch_size <= 0:
        raise ConfigError("cluster: the source names no batch size (samples per batch)")
    link = cluster_link(cluster, placement.gpus_per_node)
    router = Router(placement, table_offsets(rows), shape.batch_size)
    return router, collective_model(cluster, placement, shape.batch_size, link), shape


def route_clusters(
    source: Source,
    jobs: list[tuple[SystemSpec, Placement, np.ndarray | None]],
    threads: int | None = None,
) -> list[dict[str, np.ndarray]]:
    """The cluster replay's routing columns of every batch of `source` for each job
    (system, placement, per-GPU hit ratios or None), all from one read of the source in
    pieces: `rank_lookups`, `rank_updates` (batches x world), `lookups`,
    `routed_lookups`, the all-to-all's columns (`CollectiveModel.columns`:
    `all_to_all_bytes`, its parts and phases, `all_to_all_s`, and per rank),
    `allreduce_s`, `imbalance` (per batch);
    with hit ratios also `rank_hits`, `rank_time_s` and `step_time_s` (module
    docstring)."""
    nb = int(source.num_batches)
    # jobs on the same placement object (the user's cluster among the scaling points)
    # are routed once
    first: dict[int, int] = {}
    of = [first.setdefault(id(placement), j) for j, (_, placement, _) in enumerate(jobs)]
    routers = [_router(source, system, placement) for system, placement, _ in jobs]
    looks = [np.zeros((nb, p.world), dtype=np.int64) for _, p, _ in jobs]
    upds = [np.zeros((nb, p.world), dtype=np.int64) for _, p, _ in jobs]
    nets: list[dict[str, np.ndarray]] = [{} for _ in jobs]
    unique = sorted(set(of))
    lookups = np.zeros(nb, dtype=np.int64)
    ranges = iter_batch_ranges(source, with_updates=True, updates_from_lookups=True, pieces=True)

    def route(j: int, br: BatchRange) -> None:
        window = slice(br.batch_start, br.batch_stop)
        # a later piece adds to its batch; the router keeps the batch's counts
        model = routers[j][1]
        traffic = model.buffers(br.batches)
        counts, ucounts = routers[j][0].count(br, traffic)
        looks[j][window] += counts
        upds[j][window] += ucounts
        for name, values in model.columns(*traffic).items():  # the batch's so far
            if name not in nets[j]:
                nets[j][name] = np.zeros((nb, *values.shape[1:]), dtype=np.float64)
            nets[j][name][window] = values

    # the routers are independent (each its own buffers) and their kernels release the
    # GIL: the placements of a piece route side by side
    workers = max(1, min(len(unique), threads if threads is not None else _cores()))
    with ThreadPoolExecutor(workers, thread_name_prefix="cluster-routed") as pool:
        for br in ranges:
            lookups[br.batch_start : br.batch_stop] += np.diff(br.bounds)
            for done in [pool.submit(route, j, br) for j in unique]:
                done.result()
    return [
        _columns(
            system, placement, model, shape, hit, lookups, looks[of[j]], upds[of[j]],
            nets[of[j]] or {k: v[:0] for k, v in model.columns(*model.buffers(0)).items()},
        )
        for j, ((system, placement, hit), (_, model, shape)) in enumerate(
            zip(jobs, routers, strict=True)
        )
    ]  # fmt: skip


def _columns(
    system: SystemSpec, placement: Placement, model: CollectiveModel, shape: Shape,
    hit_ratios: np.ndarray | None, lookups: np.ndarray, rank_lookups: np.ndarray,
    rank_updates: np.ndarray, net: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:  # fmt: skip
    nb, world = rank_lookups.shape
    _, _, _, ar_s = allreduce_model(placement, system.model.dense_params, tuple(model.link))
    routed = rank_lookups.sum(axis=1)
    mean = routed / world
    columns: dict[str, np.ndarray] = {
        "lookups": lookups.copy(),
        "routed_lookups": routed,
        "rank_lookups": rank_lookups,
        "rank_updates": rank_updates,
        **net,
        "allreduce_s": np.full(nb, ar_s),
        "imbalance": np.where(routed > 0, rank_lookups.max(axis=1) / np.maximum(mean, 1e-300), 1.0),
    }
    if hit_ratios is None:
        return columns
    hit = np.asarray(hit_ratios, dtype=np.float64)
    if hit.shape != (world,):
        raise ValueError(f"hit_ratios: one per GPU ({world}), got {hit.shape}")
    acc = RankAccount(system, shape, world, nb, 1)
    capacity = int(system.policy.capacity_rows or 0)
    counters = steady_counters(rank_lookups.T, rank_updates.T, hit, capacity)
    acc.add(slice(0, nb), counters, rank_lookups.T, rank_updates.T, np.zeros(nb, np.int64))
    batch = acc.finish(columns["all_to_all_s"], columns["allreduce_s"])
    columns["rank_hits"] = counters[:, :, HITS].T.copy()
    columns["rank_time_s"] = acc.rank_time_s
    columns["step_time_s"] = batch["time_s"]
    return columns


__all__ = ["ROUTED_POLICIES", "route_clusters", "routed_policy_ok", "steady_counters"]
