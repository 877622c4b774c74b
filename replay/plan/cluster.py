"""`replay plan` for a cluster: per-GPU cache answers, the sharding, the all-to-all and
the step time of a system with a `[cluster]` (issue 41, item 4).

Placement. The cluster part of `replay.plan.plan.make_plan`, called when the first
`--system` has a `[cluster]`; it returns plan.json's `cluster` document and nothing is
written here (`replay.plan.write` draws and writes it). It reads the placement from
`replay.engine.placement` (so a plan and `replay run` shard the same way), the per-GPU
curves from `replay.plan.rank_curves` and the cluster replay from
`replay.engine.cluster`.

What is answered, and how:

1. **The budget is per GPU.** `--cache-budget` is one GPU's cache (each GPU caches the
   rows of its own shards, as TorchRec builds one cache per rank): `budget_bytes_per_gpu`.
2. **The sharding**: `cluster.sharding` as given: `auto` is the sharder
   (`replay.engine.sharder`) over the lookups per batch and table (a workload spec's
   pooling x batch size, `spec_loads`; a trace's counted over its first batches), a type
   is that type for every table, a `sharding_file` is that plan (`resolve_placement`).
   Its JSON (`sharding_plan`, written beside plan.json as `sharding.json`) is what
   `cluster.sharding_file` reads back.
3. **Per-GPU curves over the whole run** (`rank_curves`: each GPU's LRU miss-ratio curve
   over the lookups its shards receive, one pass over the horizon, SHARDS-sampled at the
   plan's rate R < 1): per GPU the hit ratio at the budget and the bytes for each hit
   target (the smallest measured size reaching it, sizes 5% apart, never extrapolated,
   as `replay.plan.cache`); the worst GPU (what a budget must be for the target on every
   GPU) and the mean over the GPUs. A GPU whose curve never reaches a target answers
   null, and so do the worst and the mean (a note names the GPUs): never a number the
   run cannot support. A GPU with no lookups has no hit ratio (null, named in a note).
4. **Steady state**: the cluster replay (`replay_cluster`) of the span the one-GPU
   systems replay (`replay.plan.plan.steady_batches`), the recommended placement, the
   first system's policy with a cache of the budget per GPU (`policy.capacity_rows`,
   budget / row bytes) and no checkpointing; means over the span's second half (after
   the caches warm): the imbalance (max / mean per-GPU lookups per batch, measured,
   beside the sharder's modeled max / mean cost), all-to-all bytes and seconds per
   batch (the replay's model: pooled embeddings of each (table, sample) bag from the
   shards holding its lookups to the sample's GPU and their gradients back, NVLink
   inside a node and the NICs across, no overlap of the two, the slowest GPU's time;
   `replay.engine.cluster`'s docstring), the ring all-reduce of the dense gradient, and
   the step time (`step_time_s`: the slowest GPU's embedding time + compute +
   all-to-all + all-reduce, the replay's column). Without `--time-per-batch` the
   plan's time per batch (which the checkpoint answers use) is this step time.
5. **Comparisons** (the report's figures): (a) each GPU's hit ratio at the budget and
   lookups under table-wise, row-wise, table-row-wise and auto sharding (those that fit
   a GPU's memory; one curve pass each, at the budget's size only), and (b) the
   all-to-all time per batch against the number of GPUs (1, 2, 4, 8 nodes and the
   user's, the same GPUs per node, auto sharding, each a short replay of
   `SCALING_BATCHES` batches: the all-to-all depends on the routing, not on the caches).

ASSUMPTIONS: every GPU's cache is the same size (the budget); the shards' rows live in
their GPU's memory (`replay.engine.placement`: conservative for a cache over host
memory); a GPU holds its cache within `cluster.gpu_memory_bytes`, so a target whose
worst-GPU bytes exceed it is flagged (`fits_gpu_memory`). The one-GPU sections of the
plan (cache, split, TBE, systems) stay those of one GPU holding every table: the
reference beside the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import numpy as np

from replay._units import format_bytes, format_target
from replay.errors import ConfigError
from replay.plan.cluster_scaling import (
    ROUTED_BATCHES,
    ROUTED_STEADY,
    SCALING_BATCHES,
    SCALING_NODES,
    routed_counts,
    routed_steady,
    span_capacity,
)
from replay.plan.cluster_scaling import cluster_system as _cluster_system
from replay.plan.cluster_scaling import placement_for as _placement
from replay.plan.cluster_scaling import routed_span as _routed_span
from replay.plan.cluster_scaling import scaling as _scaling

COMPARE_SHARDINGS = ("table-wise", "row-wise", "table-row-wise", "auto")


def one_gpu_sets(sets: Sequence[str]) -> tuple[str, ...]:
    """The `--set` overrides without the `cluster.*` ones: the one-GPU reference systems
    the plan's other sections replay."""
    return tuple(s for s in sets if not s.partition("=")[0].strip().startswith("cluster."))


def check_one_gpu(
    systems: Sequence[str], sets: Sequence[str], resolved: Sequence[Any] = ()
) -> None:
    """ConfigError for a system whose own file holds a `[cluster]`: the one-GPU sections
    need the system without it, which only `--set cluster.*` can take away (`resolved`:
    the systems already resolved with `one_gpu_sets(sets)`, as the plan resolves them)."""
    from replay.engine.systems import resolve_system

    for i, name in enumerate(systems):
        one = resolved[i] if resolved else resolve_system(name, list(one_gpu_sets(sets)))
        if one.cluster is not None:
            raise ConfigError(
                f"{name}: replay plan takes a cluster from --set cluster.* on a one-GPU "
                "system (it plans that system as one GPU beside the cluster); move the "
                "file's [cluster] to --set cluster.nodes=... --set cluster.gpus_per_node=..."
            )


def _rank_rows(placement: Any) -> np.ndarray:
    return np.array(
        [sum(s.rows for s in placement.rank_shards(r)) for r in range(placement.world)],
        dtype=np.int64,
    )


def _per_gpu(
    curves: Any, targets: Sequence[float], budget_rows: float, rank_rows: Any = None
) -> tuple[list[float | None], list[dict[str, float | None]]]:
    """Per GPU: the hit at the budget and the rows for each target (None: out of reach,
    or a GPU without lookups). A sampled curve with no resolved size up to the budget
    reads 0 there; where the budget holds every row of the GPU's shards (`rank_rows`),
    its LRU cache misses only the rows' first lookups, so its hit is 1 - distinct /
    lookups (`every_row_fits`), and a target that reaches is answered with the GPU's rows
    (an upper bound: the sample does not resolve smaller sizes)."""
    lookups = np.asarray(curves.lookups, dtype=np.float64)
    hits = np.asarray(curves.hit_at(budget_rows), dtype=np.float64).reshape(-1)
    rows = {
        f"{t:g}": list(np.asarray(curves.rows_for_hit(t), dtype=object).reshape(-1))
        for t in targets
    }
    if rank_rows is not None:
        sizes = np.asarray(curves.sizes)
        resolved = sizes[sizes >= int(getattr(curves, "resolution_rows", 1))]
        if not (resolved <= budget_rows).any():
            for r, held in enumerate(every_row_fits(curves, rank_rows, budget_rows)):
                if held is None:
                    continue
                hits[r] = held
                for t, v in rows.items():
                    if v[r] is None and float(t) <= held:
                        v[r] = float(rank_rows[r])
    hit_out: list[float | None] = []
    rows_out: list[dict[str, float | None]] = []
    for r in range(len(lookups)):
        idle = not lookups[r] > 0
        hit_out.append(None if idle else float(min(max(hits[r], 0.0), 1.0)))
        rows_out.append(
            {
                t: None if idle or v[r] is None or not np.isfinite(float(v[r])) else float(v[r])
                for t, v in rows.items()
            }
        )
    return hit_out, rows_out


def every_row_fits(curves: Any, rank_rows: Any, budget_rows: float) -> list[float | None]:
    """Per GPU whose budget holds all its shards' rows: its hit over the run, 1 - its
    distinct rows (at most its rows) / its lookups; None elsewhere (or without lookups)."""
    out: list[float | None] = []
    for r, n in enumerate(np.asarray(curves.lookups, dtype=np.float64)):
        rows = int(rank_rows[r])
        if n > 0 and rows <= budget_rows:
            first = min(float(np.asarray(curves.distinct)[r]), float(rows))
            out.append(max(0.0, 1.0 - first / n))
        else:
            out.append(None)
    return out


def _span_means(columns: dict[str, np.ndarray]) -> dict[str, float]:
    """Means over the span's second half (after the caches warm)."""
    n = len(columns["imbalance"])
    half = slice(n // 2, n) if n > 1 else slice(0, n)
    out: dict[str, float] = {}
    for key in ("imbalance", "all_to_all_bytes", "all_to_all_s", "allreduce_s", "step_time_s",
                "all_to_all_input_bytes", "all_to_all_forward_bytes",
                "all_to_all_backward_bytes"):  # fmt: skip
        if key in columns:
            out[key] = float(np.asarray(columns[key], dtype=np.float64)[half].mean())
    return out


STEP_BASIS = (
    "the slowest GPU's embedding time + compute + all-to-all + all-reduce per batch "
    "(the cluster replay's step_time_s)"
)


def _step_figures(means: dict[str, Any]) -> dict[str, Any]:
    """The steady state's all-to-all, all-reduce and step per batch, in plan.json's names,
    from `_span_means`: for our placement and TorchRec's alike."""
    from replay.engine.collectives import PHASES

    return {
        "all_to_all_bytes_per_batch": means["all_to_all_bytes"],
        "all_to_all_bytes_per_batch_by_phase": {
            phase: means[f"all_to_all_{phase}_bytes"] for phase in PHASES
        },
        "all_to_all_s_per_batch": means["all_to_all_s"],
        "allreduce_s_per_batch": means["allreduce_s"],
        "step_time_s": means["step_time_s"],
    }


def begin_cluster(
    *, base: Any, horizon: Any, spec: Any, rate: float, budget_bytes: int, row_bytes: int,
    smallest: int,
) -> Future[SimpleNamespace]:  # fmt: skip
    """`plan_cluster`'s first part begun on a helper thread (its `begun`): the sharder's
    loads, the placement, each GPU's curves and the comparison of shardings need nothing
    of the one-GPU cache answers, which the plan's main thread computes meanwhile (the
    per-table curves' and TorchRec's per-table passes, Python much of their time, one
    core otherwise idle). The same numbers as `plan_cluster` begun without it."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="cluster-begin")
    begun = pool.submit(
        _begin, base, horizon, spec, rate, math.floor(budget_bytes / row_bytes), smallest
    )
    pool.shutdown(wait=False)
    return begun


def _begin(
    base: Any, horizon: Any, spec: Any, rate: float, budget_rows: int, smallest: int
) -> SimpleNamespace:
    """The loads, the placement, its per-GPU curves at the plan's sizes (`sizes`), the
    horizon's ranges their pass held and the comparison of shardings (`compared`, a
    future: begun on its own thread as soon as the placement is made)."""
    from replay.engine.placement import spec_loads
    from replay.plan.cache import curve_sizes
    from replay.plan.rank_curves import rank_curves

    loads = spec_loads(spec, base) if spec is not None else None
    chosen = _placement(base, horizon, loads)
    placement = chosen.placement
    rank_rows = _rank_rows(placement)
    top = int(max(rank_rows.max(initial=1), 1))
    sizes = curve_sizes(top, min(smallest, top))
    if smallest <= budget_rows < sizes[-1]:
        sizes = np.union1d(sizes, [budget_rows])
    # the other shardings need nothing of what follows: begun on a helper thread now,
    # their placements and block shares run beside this placement's curves, their
    # curves beside TorchRec's per-shard statistics and the routing (the sharder's
    # Python, a core left idle) over the ranges this placement's pass held (the horizon
    # read once), and they are taken where the plan reports them
    held: list[Any] = []
    read: Future[list[Any]] = Future()
    compare_pool = ThreadPoolExecutor(1, thread_name_prefix="compare-shardings")
    compared = compare_pool.submit(
        _compare_curves, base, horizon, loads, str(chosen.basis.get("sharding")), budget_rows,
        rate=rate, spec=spec, ranges=read,
    )  # fmt: skip
    compare_pool.shutdown(wait=False)
    try:
        curves = rank_curves(horizon, placement, sizes, rate=rate, spec=spec, keep=held)
    except BaseException as exc:  # the helper waits for the ranges: it ends too
        read.set_exception(exc)
        raise
    read.set_result(held)
    return SimpleNamespace(
        loads=loads, chosen=chosen, sizes=sizes, curves=curves, held=held, compared=compared
    )


def plan_cluster(
    *,
    system_name: str,
    sets: Sequence[str],
    base: Any,
    horizon: Any,
    steady_source: Any,
    rate: float,
    spec: Any,
    budget_bytes: int,
    row_bytes: int,
    targets: Sequence[float],
    smallest: int,
    say: Callable[[str], None],
    torchrec_bins: int | None = None,
    torchrec_tables: dict[str, Any] | None = None,
    begun: Future[SimpleNamespace] | None = None,
) -> dict[str, Any]:
    """plan.json's `cluster` (module docstring). `base`: the first system resolved with
    `sets`; `horizon`: the curves' source (sampled at `rate`); `steady_source`: the
    span the systems replay; `smallest`: the curves' first size (the SHARDS resolution
    at R < 1); `torchrec_bins`, `torchrec_tables`: torchrec.json's bins and one-GPU
    tables (`replay.plan.torchrec_shards.shard_stats`); `begun`: `begin_cluster`'s, where
    the plan began it."""
    from replay.engine.cluster import replay_cluster
    from replay.engine.collectives import DESCRIPTIONS
    from replay.engine.kernels import kernels_document
    from replay.engine.step_cluster import cluster_step, source_batch_size
    from replay.plan.cluster_checkpoint import checkpoint_bytes
    from replay.plan.memory import cluster_block

    cluster = base.cluster
    assert cluster is not None
    notes: list[str] = []
    budget_rows = math.floor(budget_bytes / row_bytes)
    from replay._threads import wait_for

    if begun is None:
        say(f"cluster: sharding {cluster.world_size} GPUs ({cluster.sharding}), each GPU's "
            f"LRU curve over {int(horizon.num_batches):,} batches")  # fmt: skip
        start = _begin(base, horizon, spec, rate, budget_rows, smallest)
    else:
        say("cluster: the sharding and each GPU's LRU curve (begun beside the cache answers)")
        start = wait_for(begun)
    loads, chosen, sizes, curves = start.loads, start.chosen, start.sizes, start.curves
    placement = chosen.placement
    world = placement.world
    rank_rows = _rank_rows(placement)
    hits, rows = _per_gpu(curves, targets, budget_rows, rank_rows)
    fits_all = [h for h in every_row_fits(curves, rank_rows, budget_rows) if h is not None]
    sizes_resolved = sizes[sizes >= int(getattr(curves, "resolution_rows", 1))]
    if fits_all and not (sizes_resolved <= budget_rows).any():
        notes.append(
            f"basis: {len(fits_all)} of {world} GPUs hold all their shards' rows within the "
            "budget, below what the sample resolves per GPU: their hit is 1 - first "
            "lookups / lookups (an LRU cache that holds every row misses only first "
            "touches; the distinct rows estimated by the sample), and a target they reach "
            "is answered with their rows (an upper bound)"
        )
    from replay.plan.torchrec import DEFAULT_BINS
    from replay.plan.torchrec_shards import SHARDS_KEY, shard_stats

    say("cluster: TorchRec's cache statistics per shard (torchrec.json)")
    per_shard = shard_stats(
        horizon, placement, rate=rate, spec=spec, budget_rows=budget_rows,
        bins=DEFAULT_BINS if torchrec_bins is None else int(torchrec_bins),
        table_stats=torchrec_tables,
    )  # fmt: skip
    exact = bool(getattr(curves, "exact", rate >= 1.0))
    lookups = np.asarray(curves.lookups, dtype=np.float64)
    idle = [r for r in range(world) if hits[r] is None]
    if idle:
        notes.append(
            f"GPU{'s' if len(idle) > 1 else ''} {_ranks_text(idle)} receive no lookups under "
            "this sharding: no hit ratio (left out of the worst and the mean)"
        )
    busy = [r for r in range(world) if r not in idle]
    worst: dict[str, float | None] = {}
    mean: dict[str, float | None] = {}
    fits: dict[str, bool | None] = {}
    for t in targets:
        key = f"{t:g}"
        per = [rows[r][key] for r in busy]
        missing = [r for r in busy if rows[r][key] is None]
        if missing or not per:
            worst[key] = mean[key] = None
            fits[key] = None
            if missing:
                notes.append(
                    f"a hit ratio of {format_target(key)} is out of reach over this run on GPU"
                    f"{'s' if len(missing) > 1 else ''} {_ranks_text(missing)} (their curves "
                    "end below it: the rows' first lookups always miss): no budget reaches it "
                    "on every GPU"
                )
            continue
        known = [float(v) for v in per if v is not None]  # none missing: checked above
        worst_bytes = max(known) * row_bytes
        worst[key] = worst_bytes
        mean[key] = float(np.mean(known)) * row_bytes
        fits[key] = bool(worst_bytes <= cluster.gpu_memory_bytes)
        if not fits[key]:
            notes.append(
                f"a hit ratio of {format_target(key)} on every GPU needs "
                f"{format_bytes(worst_bytes)} of cache on the "
                f"worst GPU, more than a GPU's {format_bytes(cluster.gpu_memory_bytes)} "
                "(cluster.gpu_memory_bytes)"
            )
    if budget_bytes > cluster.gpu_memory_bytes:
        notes.append(
            f"the budget per GPU ({format_bytes(budget_bytes)}) exceeds a GPU's memory "
            f"({format_bytes(cluster.gpu_memory_bytes)}, cluster.gpu_memory_bytes)"
        )

    routed = routed_steady(spec, base)
    scaling: dict[str, Any] | None = None
    if routed:
        # production scale (`replay.engine.cluster_routed`): the span routed in pieces,
        # the caches' hits from each GPU's curve at the budget; the scaling points from
        # the same read
        say(f"cluster: routing {ROUTED_BATCHES} batch in pieces on {world} GPUs and at each "
            "GPU count (no caches: hits from the per-GPU curves)")  # fmt: skip
        capacity = budget_rows
        system = _cluster_system(system_name, sets, capacity, base.policy.name)
        at_budget = np.array([0.0 if h is None else float(h) for h in hits])
        result, scaling = _routed_span(
            base, system_name, sets, spec, loads, placement, system, at_budget,
            nodes=cluster.nodes,
        )  # fmt: skip
        notes.append(
            "basis: the steady state and the scaling points are "
            + ROUTED_STEADY.format(
                span=ROUTED_BATCHES, lookups=int(result.columns["lookups"].sum())
            )
            + "; the scaling's step times put every GPU at the mean per-GPU hit"
        )
    else:
        say(f"cluster: steady-state replay on {world} GPUs")
        capacity = span_capacity(steady_source, placement, budget_rows, base.policy.name)
        system = _cluster_system(system_name, sets, capacity, base.policy.name)
        result = replay_cluster(steady_source, system, placement)
    step = np.asarray(result.columns["step_time_s"], dtype=np.float64)
    step_basis = STEP_BASIS
    columns = result.columns
    means = _span_means(columns)
    span = len(step)
    steady_lookups = np.asarray(result.columns["rank_lookups"]).sum(axis=0)
    steady_hits = np.asarray(result.columns["rank_hits"]).sum(axis=0)
    run_mean = float(lookups.mean()) if world else 0.0
    per_gpu = [
        {
            "rank": r,
            "node": placement.node_of(r),
            "lookups": float(lookups[r]),
            "rows": int(rank_rows[r]),
            # its distinct rows over the run: a node's share of what a failure loses (cpr)
            "distinct_rows": int(np.asarray(curves.distinct)[r]),
            "shards": len(placement.rank_shards(r)),
            "shard_bytes": int(placement.rank_bytes()[r]),
            "hit_at_budget": hits[r],
            "bytes_for_hit": {
                k: None if v is None else float(v) * row_bytes for k, v in rows[r].items()
            },
            "steady_lookups": int(steady_lookups[r]),
            "steady_hit": float(steady_hits[r] / steady_lookups[r]) if steady_lookups[r] else None,
        }
        for r in range(world)
    ]
    bounds = np.asarray(curves.error_bound, dtype=np.float64).reshape(-1)
    from replay.plan.rank_curves import cluster_ranges

    # each GPU's ~95% range per target from its curve's error where it crosses the target
    per_range, ranges = cluster_ranges(curves, targets, busy, row_bytes)
    for r, entry in enumerate(per_gpu):
        entry["error_bound"] = float(bounds[r]) if r < len(bounds) else 0.0
        entry["bytes_for_hit_range"] = per_range[r]
    # at R < 1 sizes below the sample's resolution are not measured: a target reached at
    # the first resolved size may need less (an upper bound, said as such)
    floor_rows = int(getattr(curves, "resolution_rows", 1))
    low: dict[str, list[int]] = {}
    if not exact:
        for r, entry in enumerate(per_gpu):
            entry["at_resolution"] = [
                t for t, v in rows[r].items() if v is not None and v <= floor_rows
            ]
            for t in entry["at_resolution"]:
                low.setdefault(t, []).append(r)
    for label, ranks in low.items():
        notes.append(
            f"hit {format_target(label)}: {len(ranks)} of {world} GPUs reach it at the sample's "
            "resolution "
            f"({format_bytes(floor_rows * row_bytes)}, {floor_rows:,} rows at R = {rate:g}): "
            "their bytes "
            "are upper bounds, and so is the mean"
            + (
                ""
                if (w := worst.get(label)) is None or w > floor_rows * row_bytes
                else "; and the worst"
            )
        )
    valid = [h for h in hits if h is not None]
    say("cluster: hit ratios under each sharding, all-to-all against GPUs")
    comparison = _compare_shardings(chosen, curves, budget_rows, *wait_for(start.compared))
    start.held.clear()  # the horizon's ranges (195 MB at meta-2021's day): all passes read them
    if scaling is None:
        scaling = _scaling(
            base, system_name, sets, steady_source, loads, spec, budget_rows, nodes=cluster.nodes,
            steady=(placement, system, result.columns),
        )  # fmt: skip
    method_curves = "exact stack distances per GPU" if exact else f"SHARDS at R = {rate:g} per GPU"
    doc: dict[str, Any] = {
        "nodes": int(cluster.nodes),
        "gpus_per_node": int(cluster.gpus_per_node),
        "world": world,
        "preset": cluster.preset,
        "gpu_memory_bytes": float(cluster.gpu_memory_bytes),
        "sharding": "file" if chosen.basis.get("sharding") == "file" else cluster.sharding,
        "sharding_basis": chosen.basis,
        "sharding_types": _type_counts(placement),
        "budget_bytes_per_gpu": int(budget_bytes),
        "budget_rows_per_gpu": int(budget_rows),
        "imbalance": means["imbalance"],
        "imbalance_modeled": chosen.basis.get("modeled_imbalance"),
        "imbalance_run": float(lookups.max() / run_mean) if run_mean > 0 else 1.0,
        "all_to_all_model": cluster.all_to_all_model,
        **_step_figures(means),
        "hit_at_budget": {
            "worst": None if not valid else float(min(valid)),
            "mean": None if not valid else float(np.mean(valid)),
            "worst_gpu": None if not valid else int(hits.index(min(valid))),
        },
        "bytes_for_hit": {"worst_gpu": worst, "mean": mean},
        "bytes_for_hit_range": ranges,
        "fits_gpu_memory": fits,
        "resolution_bytes": None if exact else float(floor_rows * row_bytes),
        "per_gpu": per_gpu,
        "steady": {
            "batches": span,
            "averaged_batches": span - span // 2 if span > 1 else span,
            "imbalance_max": float(np.max(result.columns["imbalance"])) if span else 1.0,
            # routed without caches, each GPU's hits from its curve (methods.steady)
            "routed": bool(routed),
        },
        "comparison": comparison,
        "scaling": scaling,
        "sharding_plan": placement.plan.to_json(),
        # each table's tier and each GPU's and node's bytes in them (replay.engine.kernels)
        "kernels": kernels_document(chosen, base),
        # what a checkpoint writes per rank (issue 42: replay.plan.cluster_checkpoint)
        "checkpoint_bytes": checkpoint_bytes(placement),
        # each GPU's step by parts and compute.pipeline's overlap (replay.engine.step_cluster)
        "step": cluster_step(
            {"rank_updates": getattr(result, "rank_updates", None), **columns},
            system,
            placement,
            source_batch_size(steady_source),
        ),
        # what each GPU holds (replay.plan.memory): make_plan moves it to plan.json's memory
        "memory": cluster_block(
            base, horizon.workload, placement, source_batch_size(steady_source)
        ),
        "methods": {
            "budget": "--cache-budget is per GPU: each GPU caches the rows of its own shards",
            "curves": f"{method_curves}, over the whole run ({int(horizon.num_batches):,} "
            "batches); bytes = rows x the row's bytes, sizes 5% apart, never extrapolated",
            "error_bound": float(np.max(bounds, initial=0.0)),
            "sharding": _sharding_method(chosen.basis, spec is not None),
            "steady": ROUTED_STEADY.format(span=span, lookups=int(result.columns["lookups"].sum()))
            if routed
            else f"cluster replay of the plan's steady span ({span} batches), means "
            "over its second half; a cache of the budget per GPU, no checkpointing"
            + (
                f" (replayed with {capacity:,} rows per GPU, the most distinct rows a GPU "
                "touches in the span: the same hits, as such a cache never evicts there)"
                if capacity < budget_rows
                else ""
            ),
            "imbalance": "max / mean per-GPU lookups per batch, measured (imbalance_modeled: "
            "the sharder's max / mean modeled cost; imbalance_run: max / mean per-GPU "
            "lookups over the whole run, from the curves' pass)",
            "all_to_all": f"{DESCRIPTIONS[cluster.all_to_all_model]} (fp32 embeddings); "
            "NVLink inside a node, the node's NICs shared by its GPUs across nodes, the two "
            "not overlapped; each collective the slowest GPU's time, the collectives one "
            "after another (replay.engine.collectives)",
            "allreduce": "ring all-reduce of the dense gradient and the data-parallel "
            "tables' every batch (replay.engine.cluster)",
            "step_time": step_basis,
            "comparison": "per sharding: one curve pass over the run, each GPU's LRU hit at "
            "the budget and its lookups",
            "scaling": (
                f"auto sharding at each GPU count, the same {scaling['batches']} batch "
                "routed in pieces (all-to-all, all-reduce, imbalance exact for it), the step "
                "time with every GPU at the mean per-GPU hit at the budget of the user's "
                "cluster"
            )
            if routed
            else f"auto sharding at each GPU count, {scaling['batches']} batches "
            "replayed each from cold caches, means over every batch (all-to-all, "
            "all-reduce, step time, imbalance)",
        },
        "notes": notes,
        # torchrec.json's per-shard part (`replay.plan.write` moves it there)
        SHARDS_KEY: per_shard,
    }
    from replay.plan.cluster_spread import spread, tradeoff

    # bytes, cache and checkpoint bytes per GPU and node beside the imbalance, and what
    # each compared sharding costs (replay.plan.cluster_spread)
    doc["spread"] = spread(
        per_gpu, doc["checkpoint_bytes"], chosen.basis, targets, int(cluster.gpus_per_node)
    )
    doc["tradeoff"] = tradeoff(comparison)
    from replay.plan.torchrec_planner import torchrec_side

    # TorchRec's own plan from the same tables, topology, budget and statistics, measured
    # by `measure_placement` as this plan's sharding is (replay.plan.torchrec_planner)
    doc["torchrec"] = torchrec_side(
        base=base, horizon=horizon, budget_bytes=budget_bytes, tables=torchrec_tables,
        shards=per_shard, say=say,
        replay=lambda other: measure_placement(
            other, base=base, system_name=system_name, sets=sets, horizon=horizon,
            steady_source=steady_source, rate=rate, spec=spec, budget_rows=budget_rows,
            routed=routed,
        ),
    )  # fmt: skip
    return doc


def measure_placement(
    placement: Any, *, base: Any, system_name: str, sets: Sequence[str], horizon: Any,
    steady_source: Any, rate: float, spec: Any, budget_rows: int, routed: bool,
) -> dict[str, Any]:  # fmt: skip
    """Another placement of the same tables measured as `plan_cluster` measures its own:
    each GPU's lookups and LRU hit at the budget over the run (one curve pass), and the
    steady state (the same span replayed, or routed at production scale, `routed`):
    imbalance, all-to-all, all-reduce and step time, means over its second half."""
    from replay.engine.cluster import replay_cluster
    from replay.plan.rank_curves import rank_curves

    rank_rows = _rank_rows(placement)
    curves = rank_curves(horizon, placement, np.array([max(budget_rows, 1)]), rate=rate, spec=spec)
    hits, _ = _per_gpu(curves, (), budget_rows, rank_rows)
    lookups = np.asarray(curves.lookups, dtype=np.float64)
    if routed:
        from replay.engine.cluster_routed import route_clusters
        from replay.workload.onthefly import GeneratedTrace

        at_budget = np.array([0.0 if h is None else float(h) for h in hits])
        span = GeneratedTrace(spec.with_overrides(batches=ROUTED_BATCHES))
        system = _cluster_system(system_name, sets, budget_rows, base.policy.name)
        columns = route_clusters(
            span, [(system, placement, at_budget)], counts=routed_counts(spec, [placement])
        )[0]
    else:
        capacity = span_capacity(steady_source, placement, budget_rows, base.policy.name)
        system = _cluster_system(system_name, sets, capacity, base.policy.name)
        columns = replay_cluster(steady_source, system, placement).columns
    means = _span_means(columns)
    steady = np.asarray(columns["rank_lookups"]).sum(axis=0)
    valid = [h for h in hits if h is not None]
    mean = float(lookups.mean()) if len(lookups) else 0.0
    return {
        "per_gpu": [
            {
                "rank": r,
                "node": placement.node_of(r),
                "lookups": float(lookups[r]),
                "rows": int(rank_rows[r]),
                "hit_at_budget": hits[r],
                "steady_lookups": int(steady[r]),
            }
            for r in range(placement.world)
        ],
        "hit_at_budget": {
            "worst": None if not valid else float(min(valid)),
            "mean": None if not valid else float(np.mean(valid)),
            "worst_gpu": None if not valid else int(hits.index(min(valid))),
        },
        "imbalance": means["imbalance"],
        "imbalance_run": float(lookups.max() / mean) if mean > 0 else 1.0,
        **_step_figures(means),
    }


def _ranks_text(ranks: Sequence[int], most: int = 8) -> str:
    shown = ", ".join(str(r) for r in ranks[:most])
    return shown + (f" and {len(ranks) - most} more" if len(ranks) > most else "")


def _type_counts(placement: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in placement.plan.tables:
        out[entry.type] = out.get(entry.type, 0) + 1
    return dict(sorted(out.items()))


def _sharding_method(basis: dict[str, Any], from_spec: bool) -> str:
    kind = basis.get("sharding")
    if kind == "file":
        return f"the plan in {basis.get('sharding_file')} (cluster.sharding_file)"
    loads = (
        "the workload's lookups per batch and table (pooling x batch size)"
        if from_spec
        else "the lookups per batch and table counted over the trace's first batches"
    )
    if kind == "auto":
        return f"the automatic sharder (replay.engine.sharder) over {loads}"
    return f"{kind} for every table (cluster.sharding); modeled imbalance over {loads}"


def _compare_kinds(given: str) -> list[str]:
    kinds = list(COMPARE_SHARDINGS)
    if given not in kinds:
        kinds.append(given)
    return kinds


def _compare_curves(
    base: Any, horizon: Any, loads: Any, given: str, budget_rows: int, *, rate: float,
    spec: Any, ranges: Future[list[Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The placements of `COMPARE_SHARDINGS` but the recommended one (`given`; a
    ConfigError where one does not fit) and each one's curves at the budget (one curve
    pass each, over `ranges`: the horizon's ranges as the recommended placement's pass
    read them, waited for where a placement's pass begins)."""
    from replay.plan.rank_curves import rank_curves, row_split_starts, spec_block_shares

    placements: dict[str, Any] = {}
    for kind in _compare_kinds(given):
        if kind == given:
            continue
        try:
            placements[kind] = _placement(base, horizon, loads, sharding=kind)
        except ConfigError as exc:
            placements[kind] = exc
    placed_ok = [k for k, p in placements.items() if not isinstance(p, ConfigError)]
    starts = {k: row_split_starts(placements[k].placement) for k in placed_ok}
    sampled = spec is not None and rate < 1.0
    shares: dict[str, Any] = {k: {} if sampled else None for k in placed_ok}

    def curves_of(kind: str) -> Any:
        return rank_curves(
            horizon, placements[kind].placement, np.array([max(budget_rows, 1)]), rate=rate,
            spec=spec, shares=shares[kind], ranges=ranges.result(),
        )  # fmt: skip

    # each placement's pass is its own (its router and states), and its kernels release
    # the GIL: the placements side by side, one a core (each pass's Python holds one
    # core for much of it), the same curves; a placement that splits no table needs no
    # block shares and begins at once, beside the others' shares
    from replay._machine import usable_cores
    from replay._threads import worker_pool

    with worker_pool(max(1, min(len(placed_ok), usable_cores())), "compare-curves") as pool:
        begun = {k: pool.submit(curves_of, k) for k in placed_ok if not starts[k]}
        split = [k for k in placed_ok if starts[k]]
        if sampled and split:
            # the row-split tables' block shares of every placement, each table's pmf
            # built once; the sharder's loads hold each table's pmf (`spec_loads`:
            # `spec_mass`, which is `RowMass.from_spec` where not None): built once
            masses = None if loads is None else [getattr(load, "mass", None) for load in loads]
            got = spec_block_shares(spec, [starts[k] for k in split], masses)
            shares.update(zip(split, got, strict=True))
        begun.update((k, pool.submit(curves_of, k)) for k in split)
        measured = {k: begun[k].result() for k in placed_ok}
    return placements, measured


def _compare_shardings(
    chosen: Any, chosen_curves: Any, budget_rows: int, placements: dict[str, Any],
    measured: dict[str, Any],
) -> list[dict[str, Any]]:  # fmt: skip
    """Each GPU's hit at the budget and lookups under each of `COMPARE_SHARDINGS` (and
    the recommended plan's, when it is a file): `placements` and `measured` from
    `_compare_curves`, the recommended one's `chosen` and `chosen_curves`."""
    out = []
    given = chosen.basis.get("sharding")
    for kind in _compare_kinds(str(given)):
        entry: dict[str, Any] = {"sharding": kind, "recommended": kind == given}
        if kind == given:
            placed, curves = chosen, chosen_curves
        else:
            placed = placements[kind]
            if isinstance(placed, ConfigError):
                entry.update(fits=False, why=str(placed))
                out.append(entry)
                continue
            curves = measured[kind]
        hits, _ = _per_gpu(curves, (), budget_rows, _rank_rows(placed.placement))
        lookups = np.asarray(curves.lookups, dtype=np.float64)
        mean = float(lookups.mean()) if len(lookups) else 0.0
        entry.update(
            fits=True,
            hit_at_budget=hits,
            lookups=[float(v) for v in lookups],
            imbalance_run=float(lookups.max() / mean) if mean > 0 else 1.0,
            imbalance_modeled=placed.basis.get("modeled_imbalance"),
            modeled_step_s=placed.basis.get("modeled_step_s_max"),
            shard_bytes_max=float(placed.placement.rank_bytes().max()),
        )
        out.append(entry)
    return out


__all__ = [
    "COMPARE_SHARDINGS",
    "SCALING_BATCHES",
    "SCALING_NODES",
    "begin_cluster",
    "check_one_gpu",
    "one_gpu_sets",
    "plan_cluster",
]
