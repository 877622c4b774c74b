"""The replay driver: stream a trace through a system's placement policy and account it.

Pure: it returns a `RunResult` and writes nothing (`replay.runs.results` writes run folders).
Memory: the per-key state of the policy and of the checkpoint strategy (each class's
`state_bytes_per_key`) + 1 bit per key for the distinct-row count (or, with `inspect`,
the trace statistics' byte per row, which count the distinct rows instead) + the batch
ranges in flight (read ahead, and queued for the statistics: 4 each at most) + one row of
counters per batch.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay._files import MANIFEST, read_bytes
from replay._threads import OrderedWorker
from replay.analysis.stats import Inspector, inspect_trace, trace_inspector, trace_statistics
from replay.checkpoint import STRATEGIES, CheckpointContext, CheckpointStrategy, Timing
from replay.checkpoint.summarize import checkpoint_summary, failures_summary
from replay.engine.account import Shape, account, idle_cache_warnings, study_warnings, summarize
from replay.engine.raw import RawState, count_raw
from replay.errors import TraceError
from replay.policies import POLICIES
from replay.policies.base import NUM_COUNTERS, Policy, PolicyContext
from replay.system.optimizer import with_workload_rule
from replay.system.spec import (
    BYTES_PER_VALUE,
    SystemSpec,
    embedding_dim,
    optimizer_bytes_per_row,
)
from replay.trace.keys import key_dtype, table_offsets
from replay.trace.reader import Trace
from replay.trace.stream import empty_range, iter_batch_ranges, warm_up_reader
from replay.workload.source import Source, is_generated


@dataclass(frozen=True, eq=False)
class RunResult:
    """Everything a run folder holds. Compared by identity (its columns are arrays, which
    `==` cannot reduce to one truth value); compare `summary` dicts for equal results."""

    system: SystemSpec
    columns: dict[str, np.ndarray]  # batches.parquet
    checkpoints: dict[str, np.ndarray]  # checkpoints.parquet
    summary: dict[str, Any]  # summary.json
    meta: dict[str, Any]  # meta.json
    workload: dict[str, Any] | None = None  # workload.json (`inspect=True`)


@dataclass(frozen=True, eq=False)
class ClusterRunResult(RunResult):
    """A `RunResult` with a cluster's two more files (`replay.engine.cluster_run`)."""

    sharding: dict[str, Any] = field(default_factory=dict)  # sharding.json
    rank_columns: dict[str, np.ndarray] = field(default_factory=dict)  # ranks.parquet


def trace_digest(trace: Source) -> str:
    """SHA-256 of the trace's manifest (which holds every data file's SHA-256); for an
    on-the-fly workload, of the spec's canonical JSON."""
    if is_generated(trace):
        return trace.digest()
    manifest = read_bytes(trace.path / "manifest.json", MANIFEST, TraceError)
    return hashlib.sha256(manifest).hexdigest()


def trace_meta(trace: Source, lookups: int) -> dict[str, Any]:
    """meta.json's `trace`: what was replayed."""
    workload = trace.workload
    meta: dict[str, Any] = {"path": str(trace.path)}
    on_the_fly = is_generated(trace)
    if on_the_fly:
        meta["on_the_fly"] = True
    meta["workload_sha256" if on_the_fly else "manifest_sha256"] = trace_digest(trace)
    meta.update(
        format_version=trace.manifest.get("format_version"),
        workload=workload.get("name"),
        seed=workload.get("seed"),
        batches=trace.num_batches,
        lookups=lookups,
    )
    return meta


def workload_shape(trace: Source, system: SystemSpec) -> Shape:
    workload = trace.workload
    dim = embedding_dim(system, workload)
    return Shape(
        batch_size=int(trace.manifest.get("batch_size", workload.get("batch_size", 0))),
        tables=len(trace.table_names),
        embedding_dim=dim,
    )


def make_policy(system: SystemSpec, trace: Source, shape: Shape) -> Policy:
    cls = POLICIES[system.policy.name]
    dim = shape.embedding_dim
    state = BYTES_PER_VALUE * dim + optimizer_bytes_per_row(system.model.optimizer, dim)
    unit_rows = cls.unit_rows(system.policy)
    rows = np.asarray(trace.table_rows, dtype=np.int64)
    offsets = table_offsets(rows)
    cap = cls.capacity(system, unit_rows, state, int(offsets[-1])) if cls.cached else 0
    ctx = PolicyContext(
        total_keys=int(offsets[-1]),
        table_rows=rows,
        offsets=offsets,
        num_batches=trace.num_batches,
        row_state_bytes=state,
        capacity_units=cap,
        unit_rows=unit_rows,
        num_lookups=int(trace.num_lookups),
    )
    return cls(system.policy, ctx)


def make_strategy(system: SystemSpec, trace: Source, shape: Shape) -> CheckpointStrategy:
    dim = shape.embedding_dim
    rows = np.asarray(trace.table_rows, dtype=np.int64)
    ctx = CheckpointContext(
        system=system,
        total_rows=int(rows.sum()),
        table_rows=rows,
        num_batches=trace.num_batches,
        embedding_dim=dim,
        row_state_bytes=BYTES_PER_VALUE * dim
        + optimizer_bytes_per_row(system.model.optimizer, dim),
        dense_bytes=BYTES_PER_VALUE * system.model.dense_params,
    )
    return STRATEGIES[system.checkpoint.strategy](ctx)


def replay_trace(
    trace: Source,
    system: SystemSpec,
    *,
    inspect: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay every batch of `trace` on `system`. on_progress(batches_done, batches).

    `inspect=True` also computes the trace's statistics (`replay.analysis.stats.inspect_trace`'s
    result, as `RunResult.workload`): for a trace folder in the same pass, fed the chunks
    the replay decodes anyway; for an on-the-fly workload by a second generation pass.
    """
    from replay.engine.systems import refuse_cluster

    # one GPU: a cluster is `replay.engine.cluster.replay_cluster`'s
    refuse_cluster(system, "system", "the one-GPU replay (replay_trace)")
    # the workload's [update] rule names the optimizer when the system leaves it at sgd
    system = with_workload_rule(system, trace.workload)
    started = time.perf_counter()
    shape = workload_shape(trace, system)
    policy = make_policy(system, trace, shape)
    strategy = make_strategy(system, trace, shape)
    nb = trace.num_batches
    prepare_s = 0.0
    if policy.needs_prepare():
        policy.prepare(trace)
        prepare_s = time.perf_counter() - started
    counters = np.zeros((nb, NUM_COUNTERS), dtype=np.int64)
    lookups = np.zeros(nb, dtype=np.int64)
    distinct = np.zeros(nb, dtype=np.int64)
    updates = np.zeros(nb, dtype=np.int64)
    replay_start = time.perf_counter()
    observe_s = 0.0  # the checkpoint strategy's share of the replay loop
    raw_state = _raw_state(system, policy)
    raw = np.zeros(nb, dtype=np.int64) if raw_state is not None else None
    inspector = trace_inspector(trace) if inspect and isinstance(trace, Trace) else None
    # the policy may take each batch's update rows as its distinct lookups (where the
    # source declares so) when nothing else needs their keys: a trace's update files are
    # then only range-checked, and the LRU searches no update key
    from_lookups = (
        type(policy).updates_from_lookups and not strategy.needs_updates and raw_state is None
    )
    # a batch too large for a row group (meta-2021: 887 M lookups) comes in pieces of
    # tables where the policy adds them up (`Policy.takes_pieces`) and nothing else needs
    # whole batches: ranges in flight then hold ~1 M lookups, not 887 M
    pieces = streams_pieces(trace, system)
    # the LRU takes each batch's distinct lookups in order, made by the reader's thread
    # beside its own (`lru_order_kernel`): 3.7 lookups a distinct row on criteo-terabyte
    ordered = from_lookups and type(policy).takes_order and isinstance(trace, Trace) and not pieces
    # Threads on numba kernels that release the GIL: the reader decodes ahead and counts
    # distinct rows (1 bit per key), the caller runs the policy. With the trace
    # statistics, a third thread feeds the inspector (whose per-row state counts the
    # distinct rows instead); the OS fits it into the others' waits (measured faster on
    # 2 cores than the statistics in the reader thread). A third thread for the distinct
    # count alone measured slower: it preempts the policy.
    with OrderedWorker(name="replay-inspect") as worker:
        # while the reader decodes the first range, the worker loads the policy's
        # kernels, the reader's and the statistics', and only then faults state in (the
        # policy's not waited for): a kernel loads in maps of memory, which wait while
        # another thread faults a range in (`warm_up_reader`)
        warming: Future[object] | None = worker.submit(
            policy.warm_up, empty_range(policy.ctx.total_keys, ordered=ordered)
        )
        worker.submit(_load_kernels, trace, inspector, ordered)
        worker.submit(_prefault, policy, inspector, int(trace.num_lookups))
        for br in iter_batch_ranges(
            trace,
            with_updates=True,
            with_distinct=inspector is None,
            with_runs=inspector is not None,
            updates_from_lookups=from_lookups,
            pieces=pieces,
            with_order=ordered,
        ):
            window = slice(br.batch_start, br.batch_stop)
            fed = None
            if inspector is not None:
                assert br.runs is not None
                fed = worker.submit(
                    inspector.feed_runs,
                    br.keys,
                    br.runs,
                    distinct[window],
                    br.batch_start,
                )
            else:
                assert br.distinct is not None
                distinct[window] += br.distinct  # a batch's pieces add up
            if warming is not None:  # never beside `process`: both use the state
                warming.result()
                warming = None
            policy.process(br, counters[window])
            lookups[window] += np.diff(br.bounds)
            updates[window] += np.diff(br.update_bounds)
            if raw_state is not None and raw is not None:
                raw[window] = count_raw(
                    br.keys, br.bounds, br.update_keys, br.update_bounds, raw_state
                )
            if strategy.needs_updates:
                if fed is not None:
                    fed.result()  # the window's distinct counts
                observe_start = time.perf_counter()
                strategy.observe(
                    br,
                    _base_times(
                        system, shape, policy, counters, lookups, distinct, updates, raw, window
                    ),
                )
                observe_s += time.perf_counter() - observe_start
            if on_progress is not None and br.ends_batch:
                on_progress(br.batch_stop, nb)
        worker.drain()
    replay_s = time.perf_counter() - replay_start
    workload = None
    if inspector is not None:
        workload = trace_statistics(trace, inspector)
    elif inspect:
        workload = inspect_trace(trace)
    inspect_s = time.perf_counter() - replay_start - replay_s
    account_start = time.perf_counter()
    ctx = policy.ctx
    store = policy.store_rows()
    first = account(
        system,
        shape,
        counters,
        lookups,
        distinct,
        updates,
        ctx.unit_rows,
        raw_lookups=raw,
        store=store,
    )
    checkpoint_start = time.perf_counter()
    timing = Timing(
        base_s=first["time_s"],
        compute_s=first["time_compute_s"],
        forward_backward_s=first["time_s"]
        - system.compute.optimizer_fraction * first["time_compute_s"],
    )
    checkpointed = strategy.run(timing)
    columns = account(
        system,
        shape,
        counters,
        lookups,
        distinct,
        updates,
        ctx.unit_rows,
        checkpointed.log,
        raw_lookups=raw,
        store=store,
    )
    summary = summarize(
        system,
        columns,
        ctx.unit_rows,
        ctx.capacity_units,
        cached=POLICIES[system.policy.name].cached,
    )
    summary["policy"].update(policy.summary_extra())
    summary["checkpoint"] = checkpoint_summary(strategy.ctx, timing, checkpointed)
    summary["failures"] = failures_summary(
        strategy.ctx, timing, checkpointed, summary["checkpoint"]
    )
    plugin = POLICIES[system.policy.name]
    summary["warnings"] = study_warnings(summary, evicts=plugin.evicts) + idle_cache_warnings(
        system, cached=plugin.cached
    )
    checkpoint_s = time.perf_counter() - checkpoint_start
    summary["row_bytes"] = BYTES_PER_VALUE * shape.embedding_dim
    summary["row_state_bytes"] = ctx.row_state_bytes
    account_s = time.perf_counter() - account_start
    total_s = time.perf_counter() - started
    total_lookups = int(lookups.sum())
    meta = {
        "trace": trace_meta(trace, total_lookups),
        "system": system.name,
        "policy_state_bytes_per_key": type(policy).state_bytes_per_key,
        **({"sizing": notes} if (notes := policy.sizing_notes()) else {}),
        "timings": {
            "prepare_s": prepare_s,
            "replay_s": replay_s,
            # the statistics' share after the loop (top-1% selection; for an on-the-fly
            # workload the whole second pass)
            "inspect_s": inspect_s,
            "account_s": account_s,
            # the checkpoint and failure models: in the loop (observe) and after it
            "checkpoint_s": observe_s + checkpoint_s,
            "total_s": total_s,
            "lookups_per_s": total_lookups / total_s if total_s > 0 else 0.0,
        },
    }
    return RunResult(system, columns, checkpointed.log.columns(), summary, meta, workload)


def streams_pieces(trace: Source, system: SystemSpec) -> bool:
    """Whether `replay_trace(trace, system)` reads batches in pieces of
    tables (`iter_batch_ranges(pieces=True)`): where the source cuts its batches
    (`piece_lookups`), the policy adds pieces up (`Policy.takes_pieces`), takes each
    batch's update rows as its distinct lookups, and nothing else needs whole batches
    (a checkpoint strategy reading update keys, read-after-write counting); the trace
    statistics fed from the replay's own ranges take a batch over several ranges."""
    cls = POLICIES[system.policy.name]
    return bool(
        system.cluster is None  # a cluster's replay routes whole batches
        and getattr(trace, "piece_lookups", 0)
        and trace.updates_are_lookups
        and cls.takes_pieces
        and cls.updates_from_lookups
        and not STRATEGIES[system.checkpoint.strategy].needs_updates
        and not counts_read_after_write(system)
    )


def _load_kernels(trace: Source, inspector: Inspector | None, ordered: bool) -> None:
    warm_up_reader(trace, with_distinct=inspector is None, with_order=ordered)
    if inspector is not None:
        inspector.warm_up()


def _prefault(policy: Policy, inspector: Inspector | None, lookups: int) -> None:
    policy.prefault()
    if inspector is not None:
        inspector.prefault(lookups)


def counts_read_after_write(system: SystemSpec) -> bool:
    """Whether a replay counts read-after-write turnarounds: the rows' home tier has one
    to wait and lookups are not relaxed."""
    p = system.policy
    home = system.tier(p.tier if p.name == "static" else p.backing_tier)
    return home.write_to_read_ns > 0 and not system.lookup.relaxed


def _raw_state(system: SystemSpec, policy: Policy) -> RawState | None:
    """Read-after-write counting, when the rows' home tier has a turnaround to wait."""
    if not counts_read_after_write(system):
        return None
    total = policy.ctx.total_keys
    return RawState(total, key_dtype(total))


def _base_times(
    system: SystemSpec,
    shape: Shape,
    policy: Policy,
    counters: np.ndarray,
    lookups: np.ndarray,
    distinct: np.ndarray,
    updates: np.ndarray,
    raw: np.ndarray | None,
    window: slice,
) -> Callable[[], np.ndarray]:
    """Failure-free batch times of one range, computed only if a strategy asks."""

    def base() -> np.ndarray:
        cols = account(
            system,
            shape,
            counters[window],
            lookups[window],
            distinct[window],
            updates[window],
            policy.ctx.unit_rows,
            raw_lookups=None if raw is None else raw[window],
            store=None if (store := policy.store_rows()) is None else store[window],
        )
        return cols["time_s"]

    return base


__all__ = [
    "RunResult",
    "Source",
    "counts_read_after_write",
    "make_policy",
    "make_strategy",
    "replay_trace",
    "streams_pieces",
    "trace_digest",
    "trace_meta",
    "workload_shape",
]
