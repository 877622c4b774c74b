"""From a policy's integer counters to bytes, time and energy per batch (DESIGN section 5).

Sizes. A row is `4 × dim` bytes (fp32); with its optimizer state it is `state` bytes
(`replay.system.spec.optimizer_bytes_per_row`). A policy's unit is one row, or a chunk of
`unit_rows` rows. An access of n bytes at a tier moves ceil(n / access_bytes) ×
access_bytes bytes there (a 64 B row costs a whole 256 B persistent-memory line or a
4 KiB SSD page).

Traffic, for a cache policy (lookups on the GPU, fast tier beside it, backing tier across
the lookup link):
- fast tier reads: every lookup not bypassed reads its row; every update resident in the
  fast tier reads its row state; every write-back reads its unit.
- fast tier writes: fills write their unit; resident updates write their row state.
- backing tier reads: fills read their unit; bypassed lookups read their row; updates of
  non-resident rows read their row state (the host applies them).
- backing tier writes: write-backs write their unit; non-resident updates write state.
- link h2d: fills (units) and bypassed rows; d2h: write-backs (units) and the gradient
  rows of non-resident updates.
For `static` (one tier T): every lookup reads a row of T, every update reads and writes
its row state in T. With lookups on the GPU and a link, the rows cross it (h2d) and the
gradients come back (d2h); with no link T is beside the GPU. With lookups on the host
CPU or near memory only pooled vectors cross the link: batch_size × tables vectors of
4 × dim bytes h2d, and as many gradients d2h.

Time per batch (seconds):
- tier: read_bytes / read_bw + write_bytes / write_bw
        + (read_accesses × read_latency + write_accesses × write_latency) / parallelism;
  an access is one row, or one unit for fills and write-backs.
- link direction: bytes / bw + transfers × (latency + transfer_cost); transfers per
  batch and direction that carries bytes: 1 for GPU-side gathers (one batched copy),
  one per table for host or near-memory pooling (one copy of each table's pooled output).
  Both directions run at once: link time = max(h2d, d2h).
- overlap rules: a GPU-side fetch streams from the backing tier over the link, so
  embedding time = fast-tier time + max(backing-tier time, link time); host and
  near-memory pooling gather first, then copy: tier time + link time.
  With `lookup.overlap_with_compute` (the next batch's rows are fetched during this
  batch's compute) only max(0, embedding − compute) is exposed; otherwise all of it.
- read-after-write: lookups of rows the previous batch updated wait the home tier's
  `write_to_read_ns` / parallelism each (TrainingCXL); added to the embedding time
  (0 with `lookup.relaxed` or a tier without the turnaround).
- batch time = compute + exposed embedding + checkpoint stall + other. The stall and the
  checkpoint's own traffic come from the checkpoint strategy (`replay.checkpoint`), run
  on a first pass of these columns without them; checkpoint bytes are added to the tiers'
  and links' byte columns (so to their energy) but not to their `_time_s` columns, which
  time the embedding traffic only.
- compute = `compute.seconds_per_batch`, or flops_per_sample × batch_size / flops_per_s.

Energy per batch (joules): bytes × pJ/byte for every tier (reads and writes) and link
(both directions), plus static power of every tier and link × batch time, plus the
compute device's active power × compute time and idle power × the rest of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from replay._study_bounds import failure_study_warning, no_failure_warning
from replay.policies.base import (
    BYPASS,
    COUNTER_NAMES,
    FILLS,
    HITS,
    MISSES,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
)
from replay.system.spec import BYTES_PER_VALUE, SystemSpec, TierSpec, optimizer_bytes_per_row

if TYPE_CHECKING:
    from replay.checkpoint.base import CheckpointLog

PJ = 1e-12
NS = 1e-9


@dataclass(frozen=True)
class Shape:
    """The workload facts the accounting needs."""

    batch_size: int
    tables: int
    embedding_dim: int


def _ceil_to(nbytes: int, granule: int) -> int:
    return -(-nbytes // granule) * granule


def account(
    system: SystemSpec,
    shape: Shape,
    counters: np.ndarray,
    lookups: np.ndarray,
    distinct: np.ndarray,
    updates: np.ndarray,
    unit_rows: int,
    checkpoint: CheckpointLog | None = None,
    raw_lookups: np.ndarray | None = None,
    store: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-batch columns (name -> array) for `batches.parquet`, in a stable order.

    `checkpoint`: the strategy's stall and traffic per batch (None: no checkpoint pass).
    `raw_lookups`: lookups of rows the previous batch updated (`replay.engine.raw`).
    `store`: a third level's rows per batch (`Policy.store_rows`, `ssd-tbe`)."""
    nb = len(lookups)
    dim = shape.embedding_dim
    row_bytes = BYTES_PER_VALUE * dim
    state_bytes = row_bytes + optimizer_bytes_per_row(system.model.optimizer, dim)
    unit_bytes = unit_rows * state_bytes
    i64 = np.int64
    c = counters.astype(i64, copy=False)

    cols: dict[str, np.ndarray] = {
        "batch": np.arange(nb, dtype=i64),
        "lookups": lookups.astype(i64),
        "distinct_rows": distinct.astype(i64),
        "updates": updates.astype(i64),
    }
    for index, name in enumerate(COUNTER_NAMES):
        cols[name] = c[:, index].copy()
    if store is not None:  # ssd-tbe: L2's and the store's rows per batch
        # imported for ssd-tbe only: its module (and the TBE cache's) has 9 kernels
        from replay.policies.ssd_tbe import STORE_NAMES

        for index, name in enumerate(STORE_NAMES):
            cols[name] = store[:, index].astype(i64)

    zero = np.zeros(nb, dtype=i64)
    tier_io = {
        t.name: {
            "hits": zero.copy(),
            "misses": zero.copy(),
            "read_bytes": zero.copy(),
            "write_bytes": zero.copy(),
            "read_accesses": zero.copy(),
            "write_accesses": zero.copy(),
        }
        for t in system.tiers
    }
    link_io = {lk.name: {"h2d_bytes": zero.copy(), "d2h_bytes": zero.copy()} for lk in system.links}
    link_transfers = {lk.name: zero.copy() for lk in system.links}
    policy = system.policy
    lookup = system.lookup
    link_name = lookup.link
    g = _ceil_to

    if policy.name == "static":
        t = system.tier(policy.tier)
        io = tier_io[t.name]
        io["hits"] += c[:, HITS]
        io["read_bytes"] += c[:, HITS] * g(row_bytes, t.access_bytes) + updates * g(
            state_bytes, t.access_bytes
        )
        io["write_bytes"] += updates * g(state_bytes, t.access_bytes)
        io["read_accesses"] += c[:, HITS] + updates
        io["write_accesses"] += updates
        if link_name:
            if lookup.location == "gpu":
                h2d = c[:, HITS] * row_bytes
                d2h = updates * row_bytes
                per_transfer = 1
            else:  # host or near-memory pooling: pooled vectors only
                pooled = shape.batch_size * shape.tables * row_bytes
                h2d = np.where(lookups > 0, pooled, 0).astype(i64)
                d2h = np.where(updates > 0, pooled, 0).astype(i64)
                per_transfer = shape.tables
            link_io[link_name]["h2d_bytes"] += h2d
            link_io[link_name]["d2h_bytes"] += d2h
            link_transfers[link_name] += per_transfer  # per direction that carries bytes
    else:
        fast = system.tier(policy.fast_tier)
        back = system.tier(policy.backing_tier)
        served_fast = lookups - c[:, BYPASS]
        fio, bio = tier_io[fast.name], tier_io[back.name]
        fio["hits"] += c[:, HITS]
        fio["misses"] += c[:, MISSES]
        fio["read_bytes"] += (
            served_fast * g(row_bytes, fast.access_bytes)
            + c[:, UPDATES_FAST] * g(state_bytes, fast.access_bytes)
            + c[:, WRITEBACKS] * g(unit_bytes, fast.access_bytes)
        )
        fio["write_bytes"] += c[:, FILLS] * g(unit_bytes, fast.access_bytes) + c[
            :, UPDATES_FAST
        ] * g(state_bytes, fast.access_bytes)
        fio["read_accesses"] += served_fast + c[:, UPDATES_FAST] + c[:, WRITEBACKS]
        fio["write_accesses"] += c[:, FILLS] + c[:, UPDATES_FAST]
        bio["hits"] += c[:, MISSES]
        bio["read_bytes"] += (
            c[:, FILLS] * g(unit_bytes, back.access_bytes)
            + c[:, BYPASS] * g(row_bytes, back.access_bytes)
            + c[:, UPDATES_BACKING] * g(state_bytes, back.access_bytes)
        )
        bio["write_bytes"] += c[:, WRITEBACKS] * g(unit_bytes, back.access_bytes) + c[
            :, UPDATES_BACKING
        ] * g(state_bytes, back.access_bytes)
        bio["read_accesses"] += c[:, FILLS] + c[:, BYPASS] + c[:, UPDATES_BACKING]
        bio["write_accesses"] += c[:, WRITEBACKS] + c[:, UPDATES_BACKING]
        if link_name:
            link_io[link_name]["h2d_bytes"] += c[:, FILLS] * unit_bytes + c[:, BYPASS] * row_bytes
            link_io[link_name]["d2h_bytes"] += (
                c[:, WRITEBACKS] * unit_bytes + c[:, UPDATES_BACKING] * row_bytes
            )
            link_transfers[link_name] += 1

    if store is not None:
        _store_io(system, store, state_bytes, tier_io)

    # -- time ----------------------------------------------------------------------
    tier_time = {}
    for t in system.tiers:
        io = tier_io[t.name]
        tier_time[t.name] = _tier_seconds(t, io)
    link_time = {}
    for lk in system.links:
        io = link_io[lk.name]
        overhead = (lk.latency_ns + lk.transfer_cost_ns) * NS
        h2d_s = io["h2d_bytes"] / lk.h2d_bw_bytes_per_s + (io["h2d_bytes"] > 0) * (
            link_transfers[lk.name] * overhead
        )
        d2h_s = io["d2h_bytes"] / lk.d2h_bw_bytes_per_s + (io["d2h_bytes"] > 0) * (
            link_transfers[lk.name] * overhead
        )
        link_time[lk.name] = np.maximum(h2d_s, d2h_s)
    link_t = link_time[link_name] if link_name else np.zeros(nb)
    if policy.name == "static":
        tier_t = tier_time[policy.tier]
        embedding = np.maximum(tier_t, link_t) if lookup.location == "gpu" else tier_t + link_t
    else:
        host = tier_time[policy.backing_tier]
        if store is not None:  # L2 misses wait for the store before the copy
            host = host + tier_time[policy.store_tier]
        embedding = tier_time[policy.fast_tier] + np.maximum(host, link_t)
    home = system.tier(policy.tier if policy.name == "static" else policy.backing_tier)
    raw = np.zeros(nb, dtype=i64) if raw_lookups is None else raw_lookups.astype(i64)
    t_raw = raw * home.write_to_read_ns * NS / home.parallelism
    embedding = embedding + t_raw
    comp = system.compute
    if comp.seconds_per_batch > 0:
        t_compute = np.full(nb, comp.seconds_per_batch)
    elif comp.flops_per_sample > 0:
        t_compute = np.full(nb, comp.flops_per_sample * shape.batch_size / comp.flops_per_s)
    else:
        t_compute = np.zeros(nb)
    exposed = np.maximum(embedding - t_compute, 0.0) if lookup.overlap_with_compute else embedding
    t_checkpoint = checkpoint.stall_s if checkpoint is not None else np.zeros(nb)
    checkpoint_bytes = np.zeros(nb, dtype=i64)
    if checkpoint is not None:
        for name, nbytes in checkpoint.tier_write_bytes.items():
            tier_io[name]["write_bytes"] = tier_io[name]["write_bytes"] + nbytes
        logged = checkpoint.columns()
        if len(logged["batch"]):
            np.add.at(checkpoint_bytes, np.maximum(logged["batch"], 0), logged["bytes"])
        for name, nbytes in checkpoint.tier_read_bytes.items():
            tier_io[name]["read_bytes"] = tier_io[name]["read_bytes"] + nbytes
        for name, nbytes in checkpoint.link_d2h_bytes.items():
            link_io[name]["d2h_bytes"] = link_io[name]["d2h_bytes"] + nbytes
    t_other = np.full(nb, comp.other_seconds_per_batch)
    t_batch = t_compute + exposed + t_checkpoint + t_other

    # -- energy --------------------------------------------------------------------
    dynamic = np.zeros(nb)
    static_w = 0.0
    for t in system.tiers:
        io = tier_io[t.name]
        dynamic += (
            io["read_bytes"] * t.energy_read_pj_per_byte
            + io["write_bytes"] * t.energy_write_pj_per_byte
        ) * PJ
        static_w += t.static_power_w
    for lk in system.links:
        io = link_io[lk.name]
        dynamic += (io["h2d_bytes"] + io["d2h_bytes"]) * lk.energy_pj_per_byte * PJ
        static_w += lk.static_power_w
    e_static = static_w * t_batch
    e_compute = comp.active_power_w * t_compute + comp.idle_power_w * (t_batch - t_compute)

    for t in system.tiers:
        io = tier_io[t.name]
        for key in ("hits", "misses", "read_bytes", "write_bytes"):
            cols[f"{t.name}_{key}"] = io[key]
        cols[f"{t.name}_time_s"] = tier_time[t.name]
    for lk in system.links:
        cols[f"{lk.name}_h2d_bytes"] = link_io[lk.name]["h2d_bytes"]
        cols[f"{lk.name}_d2h_bytes"] = link_io[lk.name]["d2h_bytes"]
        cols[f"{lk.name}_time_s"] = link_time[lk.name]
    cols["raw_lookups"] = raw
    cols["time_raw_stall_s"] = t_raw
    cols["time_compute_s"] = t_compute
    cols["time_embedding_s"] = embedding
    cols["time_embedding_exposed_s"] = exposed
    cols["time_checkpoint_s"] = t_checkpoint
    cols["checkpoint_bytes"] = checkpoint_bytes
    cols["time_other_s"] = t_other
    cols["time_s"] = t_batch
    cols["energy_dynamic_j"] = dynamic
    cols["energy_static_j"] = e_static
    cols["energy_compute_j"] = e_compute
    cols["energy_j"] = dynamic + e_static + e_compute
    return cols


def _store_io(
    system: SystemSpec, store: np.ndarray, state_bytes: int, tier_io: dict[str, Any]
) -> None:
    """`ssd-tbe`'s L2 (the backing tier) and store traffic (`replay.policies.ssd_tbe`):
    a row read from the store is put into L2 (an L2 write of its state); an L2 victim is
    read out of L2 and written to the store. The store reads whole access units (RocksDB
    reads blocks, FBGEMM's `use_direct_reads`), one access per row; its writes are
    memtable flushes and compactions, large sequential files: bytes x the write
    amplification at the drive's bandwidth, no per-row access."""
    from replay.policies.ssd_tbe import L2_EVICTIONS, L2_MISSES, SSD_READS, SSD_WRITES

    p = system.policy
    back, st = system.tier(p.backing_tier), system.tier(p.store_tier)
    s = store.astype(np.int64, copy=False)
    bio, sio = tier_io[back.name], tier_io[st.name]
    bio["write_bytes"] += s[:, L2_MISSES] * _ceil_to(state_bytes, back.access_bytes)
    bio["write_accesses"] += s[:, L2_MISSES]
    bio["read_bytes"] += s[:, L2_EVICTIONS] * _ceil_to(state_bytes, back.access_bytes)
    bio["read_accesses"] += s[:, L2_EVICTIONS]
    sio["hits"] += s[:, SSD_READS]
    sio["read_bytes"] += s[:, SSD_READS] * _ceil_to(state_bytes, st.access_bytes)
    sio["read_accesses"] += s[:, SSD_READS]
    written = s[:, SSD_WRITES] * state_bytes * p.ssd_write_amplification
    sio["write_bytes"] += np.round(written).astype(np.int64)


def _tier_seconds(t: TierSpec, io: dict[str, np.ndarray]) -> np.ndarray:
    return (
        io["read_bytes"] / t.read_bw_bytes_per_s
        + io["write_bytes"] / t.write_bw_bytes_per_s
        + (io["read_accesses"] * t.read_latency_ns + io["write_accesses"] * t.write_latency_ns)
        * NS
        / t.parallelism
    )


def summarize(
    system: SystemSpec,
    cols: dict[str, np.ndarray],
    unit_rows: int,
    capacity_units: int,
    *,
    cached: bool = True,
) -> dict[str, Any]:
    """The run's totals (summary.json), from the per-batch columns. A system whose policy
    caches nothing (`static`: every table in one tier) has no hit or miss ratio: each is
    None (JSON null), since counting every lookup as a hit of its one tier (1.0) would
    read as a perfect cache."""

    def total(name: str) -> int:
        return int(cols[name].sum())

    def ftotal(name: str) -> float:
        return float(cols[name].sum())

    lookups = total("lookups")
    hits, misses = total("hits"), total("misses")
    needed = total("needed_rows")
    fills = total("fills")
    return {
        "lookups": lookups,
        "batches": len(cols["batch"]),
        "updates": total("updates"),
        "time_s": ftotal("time_s"),
        "energy_j": ftotal("energy_j"),
        "time": {
            "compute_s": ftotal("time_compute_s"),
            "embedding_s": ftotal("time_embedding_s"),
            "embedding_exposed_s": ftotal("time_embedding_exposed_s"),
            "checkpoint_s": ftotal("time_checkpoint_s"),
            "other_s": ftotal("time_other_s"),
        },
        "energy": {
            "dynamic_j": ftotal("energy_dynamic_j"),
            "static_j": ftotal("energy_static_j"),
            "compute_j": ftotal("energy_compute_j"),
        },
        "tiers": {
            t.name: {
                "hits": total(f"{t.name}_hits"),
                "misses": total(f"{t.name}_misses"),
                "read_bytes": total(f"{t.name}_read_bytes"),
                "write_bytes": total(f"{t.name}_write_bytes"),
                "time_s": ftotal(f"{t.name}_time_s"),
            }
            for t in system.tiers
        },
        "links": {
            lk.name: {
                "h2d_bytes": total(f"{lk.name}_h2d_bytes"),
                "d2h_bytes": total(f"{lk.name}_d2h_bytes"),
                "time_s": ftotal(f"{lk.name}_time_s"),
            }
            for lk in system.links
        },
        "policy": {
            "name": system.policy.name,
            "hits": hits,
            "misses": misses,
            "bypass": total("bypass"),
            "fills": fills,
            "evictions": total("evictions"),
            "writebacks": total("writebacks"),
            "updates_fast": total("updates_fast"),
            "updates_backing": total("updates_backing"),
            "capacity_units": capacity_units,
            "unit_rows": unit_rows,
            "resident_max": int(cols["resident_max"].max()) if len(cols["batch"]) else 0,
            "hit_ratio": (hits / lookups if lookups else 0.0) if cached else None,
            "miss_ratio": (misses / lookups if lookups else 0.0) if cached else None,
            # bytes moved into the fast tier / bytes of the rows used from them
            "amplification": fills * unit_rows / needed if needed else 1.0,
        },
    }


def study_warnings(summary: dict[str, Any], *, evicts: bool) -> list[str]:
    """One line per way the replayed span makes a result degenerate (summary.json's
    `warnings`; the CLI prints them on stderr and reports show them):

    - a cache that never had to choose: it held every row the trace touched, so it never
      evicted (for a pinned set: it had room to spare), every policy gives the same hit
      ratio and only first touches miss, and the result says nothing about the policy;
    - the checkpoint model's own (`checkpoint.warnings`: no checkpoint in the span);
    - a failure study in which no failure struck, or whose goodput measures its interval
      or its first writes rather than the strategy (`replay._study_bounds`).
    """
    out = []
    pol = summary["policy"]
    units, unit_rows = int(pol["capacity_units"]), int(pol["unit_rows"])
    resident = int(pol["resident_max"])
    if (
        pol["hit_ratio"] is not None
        and units > 0
        and pol["evictions"] == 0
        and pol["bypass"] == 0  # a miss served uncached (tbe's conflicts): it had to choose
        and (evicts or resident < units)
    ):
        touched = resident * unit_rows
        what = (
            f"{touched:,} rows"
            if unit_rows == 1
            else (f"{resident:,} chunks of {unit_rows:,} rows")
        )
        out.append(
            f"the cache ({units * unit_rows:,} rows) holds everything the trace touched "
            f"({what}) and never evicted: every policy (LRU, LFU, ...) gives the same hit "
            f"ratio here and only first touches miss; give a cache smaller than "
            f"{touched:,} rows or a longer trace"
        )
    checkpoint = summary.get("checkpoint") or {}
    out += [str(w) for w in checkpoint.get("warnings", [])]
    failures = summary.get("failures")
    if failures:
        for warning in (no_failure_warning(failures), failure_study_warning(checkpoint, failures)):
            if warning is not None:
                out.append(warning)
    return out


def idle_cache_warnings(system: SystemSpec, *, cached: bool) -> list[str]:
    """A cache size given to a policy that caches nothing (`static`: every table in one
    tier) changes no figure of the run: say so, rather than let a user read the run as
    that cache's (`--set policy.capacity_bytes=8GiB` on cxl-d replays the same bytes)."""
    p = system.policy
    if cached:
        return []
    given = []
    if p.capacity_bytes > 0:
        from replay._units import format_bytes

        given.append(f"policy.capacity_bytes ({format_bytes(p.capacity_bytes)})")
    if p.capacity_rows > 0:
        given.append(f"policy.capacity_rows ({p.capacity_rows:,} rows)")
    if not given:
        return []
    return [
        f"{' and '.join(given)} {'change' if len(given) > 1 else 'changes'} nothing here: "
        f"policy {p.name!r} keeps every table in tier {p.tier!r} and caches nothing; a "
        "system with a cache (hbm-lru, hbm-tbe-lru, ssd-tbe, ...) sizes one"
    ]


__all__ = ["Shape", "account", "idle_cache_warnings", "study_warnings", "summarize"]
