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

Whole tables in closed form. A lookup's rank depends on its row only where its table is
split across ranks (row-wise, table-row-wise, grid, column-wise): a table held whole by
one rank (table-wise, or a row split left one block) sends each lookup there, and a
data-parallel table each lookup to its sample's own rank. The kernels give lookup p of
a table's n in a batch of B samples to sample floor(p B / n) and sample s to rank
floor(s W / B) (`Router`), so rank o's samples are [ceil(o B / W), ceil((o + 1) B / W))
and its lookups of the table L_o = ceil(S1 n / B) - ceil(S0 n / B); its non-empty bags
K_o = L_o where n <= B (a sample holds at most one lookup) and S1 - S0 where n > B (every
sample holds one or more). The holder's counts are n, its update rows the table's
distinct rows in the batch, the input all-to-all's ids L_o from each rank o to the
holder, and the forward all-to-all's bytes K_o x the pooled row's bytes from the holder to
each rank o, intra- or inter-node as the kernels count them: so only each table's
lookups and update rows per batch are counted from the keys (one pass for every
placement), and only the split tables' lookups go through a placement's `Router`
(meta-2021: none at 8 to 128 GPUs, auto sharding; tested equal to the `Router` for every
sharding type).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._machine import usable_cores
from replay.engine.account import Shape
from replay.engine.cluster import allreduce_model, cluster_link, collective_model
from replay.engine.cluster_route import DP, ROWS, Router, layout
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
from replay.trace.keys import table_of, table_offsets
from replay.trace.stream import BatchRange, iter_batch_ranges
from replay.workload.source import Source

ROUTED_POLICIES = ("lru",)  # whose steady-state counters this module models


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


@kernel
def table_counts(
    keys: np.ndarray, bounds: np.ndarray, ukeys: np.ndarray, ubounds: np.ndarray,
    offsets: np.ndarray, looks: np.ndarray, upds: np.ndarray,
) -> None:  # fmt: skip
    """looks[b, t], upds[b, t]: batch b's lookups and update rows of table t. A batch's
    lookups come table by table (as `route_lookups` reads them): each table's end by a
    binary search; its update rows are taken one by one, their table searched where a
    row leaves the previous row's (as `route_updates` reads them)."""
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        i = lo
        while i < hi:
            t = table_of(offsets, np.int64(keys[ix(i)]))
            tend = offsets[ix(t + 1)]
            a = i
            z = hi
            while a < z:
                m = (a + z) >> 1
                if np.int64(keys[ix(m)]) >= tend:
                    z = m
                else:
                    a = m + 1
            looks[b, t] += a - i
            i = a
        toff = np.int64(0)
        tend = np.int64(-1)
        t = 0
        for i in range(ubounds[b], ubounds[b + 1]):
            key = np.int64(ukeys[ix(i)])
            if key >= tend or key < toff:
                t = table_of(offsets, key)
                toff = offsets[ix(t)]
                tend = offsets[ix(t + 1)]
            upds[b, t] += 1


class WholeTables:
    """One placement's routing counts with its whole tables in closed form (module
    docstring) and its split tables through its `Router`: `count` gives what
    `Router.count` gives for a range, from the range's per-table counts."""

    def __init__(self, router: Router, batch_size: int) -> None:
        lay = router.lay
        self.router = router
        world = self.world = router.world
        gpn = router.gpn
        nt = len(lay.kind)
        self.batch_size = batch_size
        whole = (lay.kind == ROWS) & (lay.count == 1)
        dp = (lay.kind == DP) & (lay.count == world)
        self.whole = np.flatnonzero(whole)
        self.dp = np.flatnonzero(dp)
        self.split = np.flatnonzero(~whole & ~dp)
        holder = lay.rank[lay.base[self.whole]]
        self.onehot = np.zeros((len(self.whole), world), dtype=np.int64)
        self.onehot[np.arange(len(self.whole)), holder] = 1
        self.pooled = lay.pooled[lay.base[self.whole]]
        ranks = np.arange(world)
        same_node = holder[:, None] // gpn == ranks[None, :] // gpn
        away = holder[:, None] != ranks[None, :]
        self.intra = (same_node & away).astype(np.int64)  # (whole tables, owner ranks)
        self.inter = (~same_node & away).astype(np.int64)
        group = router.group[self.whole]
        self.groups = [(g, np.flatnonzero(group == g)) for g in np.unique(group[group >= 0])]
        # the DP tables' replicas: rank of replica o (blocks in rank order)
        self.dp_rank = [lay.rank[lay.base[t] : lay.base[t] + world] for t in self.dp]
        # samples per rank: rank o owns [sb[o], sb[o + 1])
        self.sb = -(-np.arange(world + 1, dtype=np.int64) * batch_size // world)
        self.nt = nt

    def _per_rank(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(L, K), each (batches, tables, world): lookups and non-empty bags of each rank's
        samples, for n (batches, tables) lookups of a table in a batch."""
        b = self.batch_size
        n = n[:, :, None]
        first = -(-(self.sb[None, None, :] * n) // b)  # the first lookup of each rank
        looks = np.diff(first, axis=2)
        bags = np.where(n <= b, looks, np.diff(self.sb)[None, None, :])
        return looks, bags

    def count(
        self, br: BatchRange | None, looks: np.ndarray, upds: np.ndarray,
        traffic: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(counts, ucounts) of the range as `Router.count` gives them, and its all-to-all
        counts added to `traffic` (the range's own, as `Router.count` with no batch going
        on); `looks`, `upds`: the range's lookups and update rows per batch and table
        (`table_counts`). `br` None: the counts alone (a placement without split tables)."""
        lower, ids = traffic
        nb = len(looks)
        counts = np.zeros((nb, self.world), dtype=np.int64)
        ucounts = np.zeros((nb, self.world), dtype=np.int64)
        if len(self.whole):
            n = looks[:, self.whole]
            counts += n @ self.onehot
            ucounts += upds[:, self.whole] @ self.onehot
            each, bags = self._per_rank(n)
            nbytes = bags * self.pooled[None, :, None]
            for out, side in ((0, self.intra), (1, self.inter)):
                sent = nbytes * side[None]
                lower[:, :, 2 + out] += sent.sum(axis=1)  # received by each sample's rank
                lower[:, :, out] += sent.sum(axis=2) @ self.onehot  # sent by the holder
                for g, at in self.groups:
                    moved = each[:, at] * side[None, at]
                    ids[:, g, :, out] += moved.sum(axis=1)  # sent by each sample's rank
                    ids[:, g, :, 2 + out] += moved.sum(axis=2) @ self.onehot[at]
        for t, ranks in zip(self.dp.tolist(), self.dp_rank, strict=True):
            each, _ = self._per_rank(looks[:, t : t + 1])
            counts[:, ranks] += each[:, 0]
            ucounts[:, ranks] += upds[:, t : t + 1]
        if len(self.split) and (looks[:, self.split].any() or upds[:, self.split].any()):
            if br is None:
                raise ValueError("WholeTables.count: split tables need the range's keys")
            sub = _tables_only(br, self.split, looks, self.router.offsets)
            part = (np.zeros_like(traffic[0]), np.zeros_like(traffic[1]))
            c, u = self.router.count(sub, part)
            counts += c
            ucounts += u
            lower += part[0]
            ids += part[1]
        return counts, ucounts


def splits_tables(placement: Placement) -> bool:
    """Whether any table of the placement is routed by its rows (not held whole by one
    rank nor data-parallel, `WholeTables`): such a placement needs the keys."""
    lay = layout(placement)
    held = (lay.kind == ROWS) & (lay.count == 1)
    whole = held | ((lay.kind == DP) & (lay.count == placement.world))
    return not bool(whole.all())


def _tables_only(
    br: BatchRange, tables: np.ndarray, looks: np.ndarray, offsets: np.ndarray
) -> BatchRange:
    """The range's lookups and update rows of `tables` only, in their order, as whole
    batches (no batch going on). A batch's lookups come table by table (`looks`: per
    batch and table); its update rows are kept by their table."""
    nb = br.batches
    starts = np.asarray(br.bounds[:-1], dtype=np.int64)[:, None] + np.cumsum(looks, axis=1)
    starts -= looks  # each table's first lookup in each batch
    take = [np.arange(starts[b, t], starts[b, t] + looks[b, t]) for b in range(nb) for t in tables]
    at = np.concatenate(take) if take else np.zeros(0, dtype=np.int64)
    bounds = np.zeros(nb + 1, dtype=np.int64)
    bounds[1:] = np.cumsum(looks[:, tables].sum(axis=1))
    keep = np.zeros(len(offsets) - 1, dtype=np.bool_)
    keep[tables] = True
    of = np.searchsorted(offsets, br.update_keys.astype(np.int64), side="right") - 1
    mask = keep[of]
    ends = np.concatenate([[0], np.cumsum(mask)])
    ubounds = ends[np.asarray(br.update_bounds, dtype=np.int64)]
    return BatchRange(
        br.batch_start, br.batch_stop, br.keys[at], bounds, br.update_keys[mask], ubounds
    )


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


def _ranges(source: Source) -> Iterator[BatchRange]:
    for br in iter_batch_ranges(source, with_updates=True, updates_from_lookups=True, pieces=True):
        if len(br.update_keys) != br.update_bounds[-1]:
            raise ValueError("cluster_routed: the source's ranges carry no update keys")
        yield br


def source_table_counts(source: Source) -> tuple[np.ndarray, np.ndarray]:
    """(lookups, update rows) per batch and table (int64, batches x tables) of `source`,
    from one read in pieces: what `route_clusters` needs of the keys where no placement
    splits a table (`counts`)."""
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    shape = (int(source.num_batches), len(offsets) - 1)
    looks, upds = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    for br in _ranges(source):
        window = slice(br.batch_start, br.batch_stop)
        table_counts(
            br.keys, br.bounds, br.update_keys, br.update_bounds, offsets, looks[window],
            upds[window],
        )  # fmt: skip
    return looks, upds


def route_clusters(
    source: Source,
    jobs: list[tuple[SystemSpec, Placement, np.ndarray | None]],
    threads: int | None = None,
    counts: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[dict[str, np.ndarray]]:
    """The cluster replay's routing columns of every batch of `source` for each job
    (system, placement, per-GPU hit ratios or None), all from one read of the source in
    pieces: `rank_lookups`, `rank_updates` (batches x world), `lookups`,
    `routed_lookups`, the all-to-all's columns (`CollectiveModel.columns`:
    `all_to_all_bytes`, its parts and phases, `all_to_all_s`, and per rank),
    `allreduce_s`, `imbalance` (per batch);
    with hit ratios also `rank_hits`, `rank_time_s` and `step_time_s` (module
    docstring). `counts`: `source_table_counts(source)` where already counted: where no
    placement splits a table the source is then not read at all."""
    nb = int(source.num_batches)
    # jobs on the same placement object (the user's cluster among the scaling points)
    # are routed once
    first: dict[int, int] = {}
    of = [first.setdefault(id(placement), j) for j, (_, placement, _) in enumerate(jobs)]
    routers = [_router(source, system, placement) for system, placement, _ in jobs]
    looks_j = [np.zeros((nb, p.world), dtype=np.int64) for _, p, _ in jobs]
    upds = [np.zeros((nb, p.world), dtype=np.int64) for _, p, _ in jobs]
    nets: list[dict[str, np.ndarray]] = [{} for _ in jobs]
    unique = sorted(set(of))
    counters = {j: WholeTables(routers[j][0], routers[j][2].batch_size) for j in unique}
    # each job's all-to-all counts of the batch a range's first batch goes on with
    carried: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    lookups = np.zeros(nb, dtype=np.int64)
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    if counts is not None and not any(len(c.split) for c in counters.values()):
        # every batch whole at once: a batch's counts are the sums of its pieces'
        for j in unique:
            model = routers[j][1]
            traffic = model.buffers(nb)
            looks_j[j][:], upds[j][:] = counters[j].count(None, counts[0], counts[1], traffic)
            for name, values in model.columns(*traffic).items():
                nets[j][name] = np.zeros((nb, *values.shape[1:]), dtype=np.float64)
                nets[j][name][:] = values
        lookups[:] = counts[0].sum(axis=1)
        return _all_columns(jobs, routers, of, lookups, looks_j, upds, nets)

    def route(j: int, br: BatchRange, looks: np.ndarray, ups: np.ndarray) -> None:
        window = slice(br.batch_start, br.batch_stop)
        model = routers[j][1]
        traffic = model.buffers(br.batches)
        counts, ucounts = counters[j].count(br, looks, ups, traffic)
        if br.tables is not None and br.tables[0] > 0 and j in carried:
            # a later piece adds to its batch (no bag spans two tables)
            traffic[0][0] += carried[j][0]
            traffic[1][0] += carried[j][1]
        carried[j] = (traffic[0][-1].copy(), traffic[1][-1].copy())
        looks_j[j][window] += counts
        upds[j][window] += ucounts
        for name, values in model.columns(*traffic).items():  # the batch's so far
            if name not in nets[j]:
                nets[j][name] = np.zeros((nb, *values.shape[1:]), dtype=np.float64)
            nets[j][name][window] = values

    # the split tables' routers are independent (each its own buffers) and their kernels
    # release the GIL: the placements of a piece route side by side
    workers = max(1, min(len(unique), threads if threads is not None else usable_cores()))
    with ThreadPoolExecutor(workers, thread_name_prefix="cluster-routed") as pool:
        for br in _ranges(source):
            lookups[br.batch_start : br.batch_stop] += np.diff(br.bounds)
            per_table = np.zeros((br.batches, len(offsets) - 1), dtype=np.int64)
            per_table_updates = np.zeros_like(per_table)
            table_counts(
                br.keys, br.bounds, br.update_keys, br.update_bounds, offsets, per_table,
                per_table_updates,
            )  # fmt: skip
            for done in [pool.submit(route, j, br, per_table, per_table_updates) for j in unique]:
                done.result()
    return _all_columns(jobs, routers, of, lookups, looks_j, upds, nets)


def _all_columns(
    jobs: list[tuple[SystemSpec, Placement, np.ndarray | None]], routers: list[tuple],
    of: list[int], lookups: np.ndarray, looks: list[np.ndarray], upds: list[np.ndarray],
    nets: list[dict[str, np.ndarray]],
) -> list[dict[str, np.ndarray]]:  # fmt: skip
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


__all__ = [
    "ROUTED_POLICIES",
    "WholeTables",
    "route_clusters",
    "routed_policy_ok",
    "source_table_counts",
    "splits_tables",
    "steady_counters",
    "table_counts",
]
