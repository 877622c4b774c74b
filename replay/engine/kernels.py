"""Which tier each table lives in: the per-table kernel of a cluster, as TorchRec places it.

Placement. Beside the placement (`replay/engine/placement.py`, which calls
`choose_kernels` before sharding and `with_kernels` after) and the cluster replay
(`replay/engine/cluster.py`, which reads each shard's kernel from the plan). Pure: nothing
written. The vocabulary is data (`replay.system.spec.KERNELS`, so `system/` can validate
`cluster.kernel` and the kernels of a sharding file); re-exported here.

The four kernels (TorchRec's `EmbeddingComputeKernel`, `torchrec/distributed/
embedding_types.py`, and what FBGEMM builds for each):

- `hbm` (TorchRec `fused`): the shard's rows and optimizer state whole in the GPU's HBM.
- `uvm-caching` (`fused_uvm_caching`): the rows in host memory (UVM), a cache of
  ``load_factor x rows`` slots in HBM (FBGEMM's `lxu_cache_weights`, one row's values a
  slot, with `lxu_cache_state` and `lxu_state`, int64 each a slot:
  `split_table_batched_embeddings_ops_training.py`, the buffers' comments); TorchRec
  requires 0 < clf < 1 and CacheParams with it. A miss copies the row over PCIe.
- `uvm` (`fused_uvm`): the rows in host memory, no cache: every lookup reads host memory
  over PCIe.
- `ssd` (`key_value`, FBGEMM's SSD TBE, `fbgemm_gpu/tbe/ssd/`): L1 of
  ``load_factor x rows`` slots in HBM (a slot holds the row with its optimizer state),
  L2 (`policy.l2_capacity_bytes` per GPU) in host DRAM, the rows on the node's drives.

HBM bytes of a shard: as `replay.system.gpu_memory.shard_hbm` counts them (`shard_hbm_bytes`,
so the choice, the sharder and plan.json's `memory` agree): `hbm` its rows x (values +
optimizer state); a cached kernel FBGEMM's slots (sets of 32) x the row's values, their
`lxu_cache_state` and `lxu_state`, the index map and the optimizer state it keeps in HBM;
`uvm` only row-wise optimizer state. Host bytes:
`uvm-caching` and `uvm` the rows x state; `ssd` the GPU's L2. Drive bytes: `ssd` the rows
x state. Budgets: a GPU's HBM for its tables (its table budget, from the placement:
`cluster.gpu_memory_bytes` less what the GPU holds besides the tables), a node's host memory (the
system's backing tier, `policy.backing_tier`'s capacity, taken as the node's DRAM --
ASSUMPTION: the tier's capacity describes the host, shared by the node's GPUs), a node's
drives (`cluster.drives_per_node x drive_capacity_bytes`).

The choice (`cluster.kernel = auto`):

1. every table fits whole in the GPUs' HBM (the tables' bytes at most world x each
   GPU's table budget): every table `hbm`, "fits in HBM, no cache needed" -- the
   placement and the replay exactly as before kernels existed (a cache policy then
   replays its cache over rows that live in HBM, `policy.capacity_*` per GPU);
2. else tables under `TINY_ROWS` rows stay whole in HBM, every other table starts at the
   smallest load factor of `CLF_STEPS` under the system's offload kernel (`ssd` for the
   `ssd-tbe` policy, else `uvm-caching`), and a greedy spends the HBM left
   (`HBM_FILL` x world x each GPU's table budget -- its memory less what it holds
   besides the tables, `replay.system.gpu_memory` -- less the tiny tables and the
   smallest caches)
   on the step of largest hits gained per byte: from a table's load factor to any larger
   one, or to the whole table in HBM (hit 1) -- a jump, not only the next step, so that a
   small table whose curve is flat between its first steps still comes home whole.
   Hits at a load factor come from the table's measured lookup mass
   over its rows (`TableLoad.mass`: counted from the trace's first batches, or the
   generator's pmf; uniform without one) through Che's approximation of an LRU cache
   (Che, Tung and Wang, IEEE JSAC 2002; Fricker, Robert and Roberts 2012): t_C solves
   sum_i (1 - exp(-p_i t_C)) = C and hit(C) = sum_i p_i (1 - exp(-p_i t_C)), with the
   rows of one bin of the mass taken as equally popular. Greedy by hits per byte on
   concave curves is the classic fractional knapsack; taking the best jump from where a
   table is follows each curve's upper concave hull (ASSUMPTION: between the hull's
   points a table's cache is not worth buying);
3. `cluster.cache_load_factor` > 0 fixes every cached table's load factor (the greedy
   then only chooses which tables stay whole in HBM).

`cluster.kernel` = one of the kernels: every table that kernel (a cached one at
`cluster.cache_load_factor`, or from the curves as above). The placement then checks each
GPU's HBM, each node's host memory and drives (`check_budgets`: one-line errors naming
the tier, its bytes and its capacity). What leaving HBM costs is stated per table: the
expected misses per batch x the row's bytes over the GPU's PCIe link
(`lookup.link`; the misses of a `uvm` table are all its lookups).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._units import format_bytes
from replay.engine.sharder import TableLoad
from replay.errors import ConfigError
from replay.system.gpu_memory import ShardMemory, cache_slots, shard_hbm
from replay.system.sharding import CACHED_KERNELS, DATA_PARALLEL, Placement, TableSharding
from replay.system.spec import KERNELS, SystemSpec
from replay.system.torchrec_plan import OUR_KERNELS, TORCHREC_KERNELS
from replay.workload.row_mass import RowMass

TINY_ROWS = 1000  # tables under this many rows stay whole in HBM (and are never split)
# ASSUMPTION: the share of a GPU's table budget (its HBM less what it holds besides the
# tables, `replay.system.gpu_memory.table_budget_bytes`) the tables and their caches may
# fill when some must leave it: the rest is room for the sharder's spread of bytes
HBM_FILL = 0.9
CLF_STEPS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# each mass's (probabilities, counts, keys, {cache rows: hit}) for `che_hit`
_CHE_MEMO: weakref.WeakKeyDictionary[
    RowMass, tuple[np.ndarray, np.ndarray, float, dict[float, float]]
] = weakref.WeakKeyDictionary()
FITS_LINE = "fits in HBM, no cache needed"


@dataclass(frozen=True)
class TableKernel:
    """One table's kernel, its bytes in each tier and what its lookups cost per batch."""

    table: str
    kernel: str
    cache_load_factor: float | None
    bytes: int  # rows x (values + optimizer state)
    hbm_bytes: int
    host_bytes: int
    drive_bytes: int
    lookups: float  # per batch
    hit: float  # expected share of its lookups served from HBM
    pcie_bytes: float  # per batch: misses x the row's bytes copied to HBM

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class KernelChoice:
    """Every table's kernel, in table order, and how they were chosen."""

    tables: tuple[TableKernel, ...]
    setting: str
    line: str
    basis: dict[str, Any]

    @property
    def all_hbm(self) -> bool:
        return all(t.kernel == "hbm" for t in self.tables)

    def hbm_row_bytes(self, state_bytes: int) -> list[int]:
        """Each table's HBM bytes per row (what the sharder balances and fits)."""
        return [
            math.ceil(t.hbm_bytes / max(t.bytes // max(state_bytes, 1), 1)) for t in self.tables
        ]

    def left_hbm(self) -> list[TableKernel]:
        return [t for t in self.tables if t.kernel != "hbm"]

    def to_json(self) -> dict[str, Any]:
        left = self.left_hbm()
        return {
            "setting": self.setting,
            "line": self.line,
            "counts": {k: sum(t.kernel == k for t in self.tables) for k in KERNELS},
            "hbm_bytes": sum(t.hbm_bytes for t in self.tables),
            "host_bytes": sum(t.host_bytes for t in self.tables),
            "drive_bytes": sum(t.drive_bytes for t in self.tables),
            "left_hbm": [t.to_json() for t in left],
            "pcie_bytes_per_batch": float(sum(t.pcie_bytes for t in left)),
            "basis": self.basis,
        }


def offload_kernel(system: SystemSpec) -> str | None:
    """The kernel a table that leaves HBM takes on `system`: `ssd` under the `ssd-tbe`
    policy, `uvm-caching` under any other cache (a fast and a backing tier), None under
    `static` (every table in one tier: nothing to choose)."""
    if system.policy.name == "ssd-tbe":
        return "ssd"
    if system.policy.name == "static" or not system.policy.backing_tier:
        return None
    return "uvm-caching"


def che_hit(load: TableLoad, cache_rows: float) -> float:
    """An LRU cache of `cache_rows` rows' hit ratio on `load`'s lookups (Che's
    approximation over its row mass; module docstring)."""
    rows = load.rows
    if cache_rows >= rows:
        return 1.0
    if cache_rows <= 0 or rows <= 0:
        return 0.0
    mass = load.mass
    if mass is None or mass.total <= 0:
        return cache_rows / rows  # uniform: Che gives C / rows exactly
    # a mass's groups and its answers kept with it: the greedy, each budget the placement
    # tries, the shardings and cluster sizes a plan compares ask for the same caches
    # again (a mass of 2^18 top rows costs ~0.1 s an answer)
    memo = _CHE_MEMO.get(mass)
    if memo is None:
        x = mass._index
        free = np.asarray(x["free"], dtype=np.float64)
        p_bin = np.divide(mass.bin_mass, free, out=np.zeros(len(free)), where=free > 0)
        p = np.concatenate([np.asarray(mass.top_mass, dtype=np.float64), p_bin]) / mass.total
        n = np.concatenate([np.ones(len(mass.top_mass)), free])
        keep = (p > 0) & (n > 0)
        memo = _CHE_MEMO[mass] = (p[keep], n[keep], float(n[keep].sum()), {})
    p, n, keys, answers = memo
    key = float(cache_rows)
    if key in answers:
        return answers[key]
    if keys <= cache_rows:
        answers[key] = 1.0
        return 1.0

    def filled(t: float) -> float:
        return float((n * -np.expm1(-p * t)).sum())

    lo, hi = 0.0, 1.0
    while filled(hi) < cache_rows:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if filled(mid) < cache_rows:
            if mid == lo:  # (lo, hi) no longer moves: the next steps would not either
                break
            lo = mid
        else:
            if mid == hi:
                break
            hi = mid
    hit = float(min(1.0, (n * p * -np.expm1(-p * hi)).sum()))
    answers[key] = hit
    return hit


def shard_hbm_bytes(system: SystemSpec, rows: int, dim: int, kernel: str, clf: float | None) -> int:
    """HBM of `rows` rows under `kernel`, as `replay.system.gpu_memory` counts a GPU's
    shard (weights, optimizer state, the cache and its metadata as FBGEMM allocates
    them), so that the kernels' choice, the sharder and plan.json's `memory` count the
    same bytes."""
    shard = ShardMemory("", int(rows), int(dim), kernel, float(clf or 0.0))
    parts = shard_hbm(
        shard,
        system.model.optimizer,
        prefetch=system.compute.pipeline == "prefetch-sparse-dist",
        lfu=system.policy.cache_algorithm == "lfu",
    )
    return int(sum(parts.values()))


def table_kernel(
    load: TableLoad, kernel: str, clf: float | None, system: SystemSpec, world: int
) -> TableKernel:
    """`load`'s bytes per tier and its PCIe bytes per batch under `kernel` (module
    docstring). The SSD TBE's L2 is per GPU (`host_bytes` 0 here; `check_budgets`)."""
    state = load.bytes_per_row
    total = load.rows * state
    hbm = host = drive = 0
    if kernel == "hbm":
        hbm, hit = total, 1.0
    elif kernel == "uvm":
        host, hit = total, 0.0
        hbm = shard_hbm_bytes(system, load.rows, load.dim, kernel, None)  # row-wise state
    else:
        assert clf is not None
        slots = cache_slots(ShardMemory(load.name, load.rows, load.dim, kernel, clf))
        hbm = shard_hbm_bytes(system, load.rows, load.dim, kernel, clf)
        hit = che_hit(load, slots)
        if kernel == "uvm-caching":
            host = total
        else:
            drive = total
    misses = load.lookups * (1.0 - hit)
    return TableKernel(
        load.name, kernel, clf if kernel in CACHED_KERNELS else None, total, hbm, host, drive,
        float(load.lookups), float(hit), float(misses * state),
    )  # fmt: skip


def choose_kernels(
    system: SystemSpec,
    loads: Sequence[TableLoad],
    *,
    nodes: int,
    gpus_per_node: int,
    hbm_bytes_per_gpu: float | None = None,
) -> KernelChoice:
    """Every table's kernel on `system`'s cluster of `nodes` x `gpus_per_node` GPUs
    (module docstring), each GPU giving its tables `hbm_bytes_per_gpu` (the placement's
    table budget; None: its whole `cluster.gpu_memory_bytes`)."""
    cluster = system.cluster
    assert cluster is not None
    world = nodes * gpus_per_node
    memory = float(cluster.gpu_memory_bytes if hbm_bytes_per_gpu is None else hbm_bytes_per_gpu)
    setting = cluster.kernel
    fixed = float(cluster.cache_load_factor) or None
    total = sum(ld.bytes for ld in loads)
    hbm_all = world * memory
    basis: dict[str, Any] = {
        "hbm_bytes_per_gpu": memory,
        "world": world,
        "tables_bytes": total,
        "hits": "Che's approximation of an LRU cache over each table's row mass "
        "(replay.engine.kernels)",
    }
    off = offload_kernel(system)
    if setting != "auto":
        _check_kernel(system, setting, "cluster.kernel")
        steps = (fixed,) if fixed else CLF_STEPS
        tables = [
            _best_single(ld, setting, steps, system, world) if setting in CACHED_KERNELS
            else table_kernel(ld, setting, None, system, world)
            for ld in loads
        ]  # fmt: skip
        _check_totals(system, tables, world, nodes)
        return KernelChoice(
            tuple(tables), setting, f"every table {setting} (cluster.kernel={setting})", basis
        )
    if total <= hbm_all or off is None:
        whole = tuple(table_kernel(ld, "hbm", None, system, world) for ld in loads)
        share = total / hbm_all if hbm_all else 0.0
        line = (
            f"{FITS_LINE}: the tables take {format_bytes(total)}, {share:.0%} of "
            f"{world} GPUs x {format_bytes(memory)} (what each GPU has for its tables)"
        )
        if off is None and total > hbm_all:
            line = f"policy {system.policy.name!r} keeps every table in its tier"
        return KernelChoice(whole, setting, line, basis)
    budget = HBM_FILL * hbm_all
    basis["hbm_fill"] = HBM_FILL
    basis["hbm_budget_bytes"] = budget
    steps = (fixed,) if fixed else CLF_STEPS
    choice = _greedy(system, loads, off, steps, budget, world, basis)
    _check_totals(system, choice.tables, world, nodes)
    return choice


def _best_single(
    load: TableLoad, kernel: str, steps: Sequence[float], system: SystemSpec, world: int
) -> TableKernel:
    """A table under a cached kernel for every table: `cluster.cache_load_factor` if
    given, else the smallest step at which its curve's hits stop gaining 1% a step."""
    best = table_kernel(load, kernel, steps[0], system, world)
    for clf in steps[1:]:
        nxt = table_kernel(load, kernel, clf, system, world)
        if nxt.hit - best.hit < 0.01:
            break
        best = nxt
    return best


def _greedy(
    system: SystemSpec,
    loads: Sequence[TableLoad],
    off: str,
    steps: Sequence[float],
    budget: float,
    world: int,
    basis: dict[str, Any],
) -> KernelChoice:
    """Item 2 of the module docstring: tiny tables whole, the rest from the smallest cache
    up by hits gained per byte."""
    n = len(loads)
    level = [0] * n  # index into steps; len(steps): whole in HBM
    cur: list[TableKernel] = []
    for ld in loads:
        if ld.rows < TINY_ROWS:
            cur.append(table_kernel(ld, "hbm", None, system, world))
        else:
            cur.append(table_kernel(ld, off, steps[0], system, world))
    used = float(sum(t.hbm_bytes for t in cur))
    if used > budget:
        raise ConfigError(
            f"cluster: even the smallest caches ({steps[0]:g} of each table's rows) and the "
            f"tables under {TINY_ROWS:,} rows take {format_bytes(used)} of HBM, more than "
            f"{HBM_FILL:.0%} of {world} GPUs' table budgets ({format_bytes(budget / HBM_FILL)}): "
            "more GPUs "
            "(cluster.nodes) or a smaller cluster.cache_load_factor"
        )

    def option(t: int, room: float) -> tuple[float, int, TableKernel] | None:
        """The table's step of most hits per byte that fits `room`, to any higher load
        factor or the whole table (module docstring, item 2)."""
        ld = loads[t]
        if cur[t].kernel == "hbm":
            return None
        best: tuple[float, int, TableKernel] | None = None
        for nxt_level in range(level[t] + 1, len(steps) + 1):
            nxt = (
                table_kernel(ld, off, steps[nxt_level], system, world)
                if nxt_level < len(steps)
                else table_kernel(ld, "hbm", None, system, world)
            )
            extra = nxt.hbm_bytes - cur[t].hbm_bytes
            gain = ld.lookups * (nxt.hit - cur[t].hit)
            if gain <= 0 or extra > room:  # nothing to buy, or no room for it
                continue
            ratio = gain / extra if extra > 0 else math.inf
            if best is None or ratio > best[0]:
                best = (ratio, nxt_level, nxt)
        return best

    heap: list[tuple[float, int]] = []
    pending: dict[int, tuple[int, TableKernel]] = {}
    for t in range(n):
        opt = option(t, budget - used)
        if opt is not None:
            pending[t] = opt[1:]
            heapq.heappush(heap, (-opt[0], t))
    while heap:
        _, t = heapq.heappop(heap)
        nxt_level, nxt = pending.pop(t)
        extra = nxt.hbm_bytes - cur[t].hbm_bytes
        if used + extra > budget:
            # this step no longer fits; the table's best step that does is queued again
            opt = option(t, budget - used)
            if opt is not None:
                pending[t] = opt[1:]
                heapq.heappush(heap, (-opt[0], t))
            continue
        used += extra
        cur[t] = nxt
        level[t] = nxt_level
        opt = option(t, budget - used)
        if opt is not None:
            pending[t] = opt[1:]
            heapq.heappush(heap, (-opt[0], t))
    left = [t for t in cur if t.kernel != "hbm"]
    pcie = sum(t.pcie_bytes for t in left)
    seconds = pcie_seconds(system, pcie / world)
    line = (
        f"{len(left)} of {n} tables leave HBM ({off}, {format_bytes(sum(t.bytes for t in left))}"
        f" of {format_bytes(sum(t.bytes for t in cur))}): the tables take more than "
        f"{world} GPUs' table budgets; their misses move {format_bytes(pcie)} a batch over PCIe, "
        f"{seconds * 1e3:.3g} ms a step on each GPU's link if spread evenly"
    )
    basis["hbm_used_bytes"] = used
    basis["pcie_s_per_batch_per_gpu"] = seconds
    basis["cost"] = (
        "expected misses per batch (lookups x (1 - Che's hit at the load factor), the steady "
        "state: first touches not counted) x the row's bytes, over the lookup link's "
        "host-to-device bandwidth; an ssd table's misses also read L2 or the drives"
    )
    return KernelChoice(tuple(cur), "auto", line, basis)


def _nodes(n: int) -> str:
    return "the node's" if n == 1 else f"{n} nodes'"


def _check_totals(
    system: SystemSpec, tables: Sequence[TableKernel], world: int, nodes: int
) -> None:
    """A one-line ConfigError, before any sharding, where the tables that left HBM take
    more host memory or drive bytes than all the nodes have (`check_budgets` checks each
    node after the placement)."""
    cluster = system.cluster
    assert cluster is not None
    ssd = any(t.kernel == "ssd" for t in tables)
    host = sum(t.host_bytes for t in tables) + (
        world * float(system.policy.l2_capacity_bytes) if ssd else 0.0
    )
    cap = nodes * host_capacity_bytes(system)
    if host > cap:
        raise ConfigError(
            f"cluster: the tables that leave HBM take {format_bytes(host)} of host memory "
            f"(tier {system.policy.backing_tier!r}), more than {_nodes(nodes)} "
            f"{format_bytes(cap)}" + ("" if ssd else "; --system ssd-tbe puts tables on the drives")
        )
    drive = sum(t.drive_bytes for t in tables)
    dcap = nodes * float(cluster.drives_per_node * cluster.drive_capacity_bytes)
    if drive > dcap:
        raise ConfigError(
            f"cluster: the tables on the drives take {format_bytes(drive)}, more than "
            f"{_nodes(nodes)} {format_bytes(dcap)} of drives"
        )


def pcie_seconds(system: SystemSpec, nbytes: float) -> float:
    """`nbytes` over the lookup link's host-to-device bandwidth (0 without a link)."""
    name = system.lookup.link
    if not name:
        return 0.0
    return float(nbytes) / system.link(name).h2d_bw_bytes_per_s


def _check_kernel(system: SystemSpec, kernel: str, where: str) -> None:
    """ConfigError for a kernel `system`'s replay cannot serve: a cached kernel needs
    the system's policy (`ssd` the `ssd-tbe` policy, `uvm-caching` another cache), any
    kernel a policy with a backing tier."""
    if kernel not in KERNELS:
        raise ConfigError(f"{where}: unknown kernel {kernel!r} (kernels: {', '.join(KERNELS)})")
    name = system.policy.name
    if name == "static" or not system.policy.backing_tier:
        raise ConfigError(
            f"{where}: kernel {kernel!r} needs a policy with a fast and a backing tier "
            f"(policy {name!r} keeps every table in one tier)"
        )
    if kernel == "ssd" and name != "ssd-tbe":
        raise ConfigError(f"{where}: kernel 'ssd' is FBGEMM's SSD TBE: use --system ssd-tbe")
    if kernel == "uvm-caching" and name == "ssd-tbe":
        raise ConfigError(
            f"{where}: kernel 'uvm-caching' needs a UVM cache policy (e.g. hbm-lru), "
            "not ssd-tbe (its kernel is 'ssd')"
        )


def entry_kernel(entry: TableSharding) -> str:
    """A plan entry's kernel (`hbm` when it says none)."""
    return entry.kernel or "hbm"


def with_kernels(placement: Placement, choice: KernelChoice | None) -> Placement:
    """`placement` whose plan says every table's kernel (`choice`'s, or each entry's own
    from a sharding file, `hbm` where it says none)."""
    entries = []
    for t, e in enumerate(placement.plan.tables):
        if choice is not None and e.type == DATA_PARALLEL:
            # a replica is TorchRec's dense kernel, whole on every GPU (its bytes checked)
            e = dataclasses.replace(e, kernel="hbm", cache_load_factor=None)
        elif choice is not None:
            k = choice.tables[t]
            e = dataclasses.replace(e, kernel=k.kernel, cache_load_factor=k.cache_load_factor)
        elif e.kernel is None:
            e = dataclasses.replace(e, kernel="hbm")
        entries.append(e)
    plan = dataclasses.replace(placement.plan, tables=tuple(entries))
    return dataclasses.replace(placement, plan=plan)


def rank_tier_bytes(placement: Placement, system: SystemSpec) -> dict[str, np.ndarray]:
    """Per GPU the bytes its shards put in HBM, host memory and the drives (module
    docstring), from each plan entry's kernel; `placement.row_bytes` the full rows'."""
    world = placement.world
    out = {k: np.zeros(world, dtype=np.int64) for k in ("hbm", "host", "drive")}
    ssd_ranks = np.zeros(world, dtype=bool)
    for s in placement.shards:
        e = placement.entry(s.table)
        kernel = entry_kernel(e)
        full = placement.shard_bytes(s)
        if kernel == "hbm":
            out["hbm"][s.rank] += full
        elif kernel == "uvm":
            out["host"][s.rank] += full
            out["hbm"][s.rank] += shard_hbm_bytes(system, s.rows, s.cols, kernel, None)
        else:
            clf = e.cache_load_factor or 0.0
            out["hbm"][s.rank] += shard_hbm_bytes(system, s.rows, s.cols, kernel, clf)
            if kernel == "uvm-caching":
                out["host"][s.rank] += full
            else:
                out["drive"][s.rank] += full
                ssd_ranks[s.rank] = True
    out["host"] += np.where(ssd_ranks, int(system.policy.l2_capacity_bytes), 0)
    return out


def host_capacity_bytes(system: SystemSpec) -> float:
    """A node's host memory: the backing tier's capacity (module docstring), 0 without."""
    p = system.policy
    if not p.backing_tier:
        return 0.0
    return float(system.tier(p.backing_tier).capacity_bytes)


def tier_bytes(
    placement: Placement, system: SystemSpec, hbm_bytes_per_gpu: float | None = None
) -> dict[str, Any]:
    """Each GPU's HBM, host and drive bytes and each node's host and drive bytes beside
    their capacities, from the plan's kernels (`rank_tier_bytes`); a GPU's HBM for its
    tables `hbm_bytes_per_gpu` (None: its whole memory)."""
    cluster = system.cluster
    assert cluster is not None
    per = rank_tier_bytes(placement, system)
    nodes, gpn = placement.nodes, placement.gpus_per_node
    node_host = per["host"].reshape(nodes, gpn).sum(axis=1)
    node_drive = per["drive"].reshape(nodes, gpn).sum(axis=1)
    host = host_capacity_bytes(system)
    drives = float(cluster.drives_per_node * cluster.drive_capacity_bytes)
    return {
        "per_gpu": [
            {"rank": r, "hbm_bytes": int(per["hbm"][r]), "host_bytes": int(per["host"][r]),
             "drive_bytes": int(per["drive"][r])}
            for r in range(placement.world)
        ],
        "per_node": [
            {"node": i, "host_bytes": int(node_host[i]), "drive_bytes": int(node_drive[i])}
            for i in range(nodes)
        ],
        "hbm_capacity_bytes": float(
            cluster.gpu_memory_bytes if hbm_bytes_per_gpu is None else hbm_bytes_per_gpu
        ),
        "host_capacity_bytes_per_node": host,
        "host_tier": system.policy.backing_tier,
        "drive_capacity_bytes_per_node": drives,
    }  # fmt: skip


def check_budgets(
    placement: Placement,
    system: SystemSpec,
    where: str = "cluster",
    hbm_bytes_per_gpu: float | None = None,
) -> dict:
    """`tier_bytes`, after checking each GPU's HBM for its tables (`hbm_bytes_per_gpu`,
    None: its whole memory) and each node's host memory and drives against their
    capacity: a one-line ConfigError for the first tier over it."""
    cluster = system.cluster
    assert cluster is not None
    doc = tier_bytes(placement, system, hbm_bytes_per_gpu)
    hbm = [g["hbm_bytes"] for g in doc["per_gpu"]]
    memory = doc["hbm_capacity_bytes"]
    worst = int(np.argmax(hbm)) if hbm else 0
    if hbm and hbm[worst] > memory:
        raise ConfigError(
            f"{where}: GPU {worst} would hold {format_bytes(hbm[worst])} in HBM "
            f"(its shards under their kernels), more than its {format_bytes(memory)}"
        )
    host, drives = doc["host_capacity_bytes_per_node"], doc["drive_capacity_bytes_per_node"]
    for n in doc["per_node"]:
        if n["host_bytes"] > host:
            raise ConfigError(
                f"{where}: node {n['node']} would hold {format_bytes(n['host_bytes'])} in host "
                f"memory (tier {system.policy.backing_tier!r}), more than its "
                f"{format_bytes(host)}"
                + ("; --system ssd-tbe puts tables on the drives" if not n["drive_bytes"] else "")
            )
        if n["drive_bytes"] > drives:
            raise ConfigError(
                f"{where}: node {n['node']} would hold {format_bytes(n['drive_bytes'])} on its "
                f"drives, more than its {cluster.drives_per_node} x "
                f"{format_bytes(cluster.drive_capacity_bytes)}"
            )
    return doc


def check_plan_kernels(placement: Placement, system: SystemSpec, where: str) -> None:
    """ConfigError for a kernel in the plan `system`'s replay cannot serve
    (`_check_kernel`), or a plan that mixes `uvm-caching` and `ssd` (one cache policy a
    GPU: the system's)."""
    kinds = {entry_kernel(e) for e in placement.plan.tables}
    if kinds == {"hbm"}:
        return
    for k in sorted(kinds - {"hbm"}):
        _check_kernel(system, k, where)
    if {"uvm-caching", "ssd"} <= kinds:
        raise ConfigError(f"{where}: a plan mixes 'uvm-caching' and 'ssd' tables; the replay "
                          "runs one cache policy a GPU (the system's)")  # fmt: skip


def kernels_document(placed: Any, system: SystemSpec) -> dict[str, Any]:
    """plan.json's `cluster.kernels`: how each table's kernel was chosen (the line, "fits
    in HBM, no cache needed" when that is the answer), the tables that left HBM with
    their load factors, bytes and PCIe bytes per batch, and every GPU's HBM, host and
    drive bytes and every node's against their capacities. `placed`: a
    `replay.engine.placement.PlacementResult`."""
    placement = placed.placement
    choice: KernelChoice | None = placed.kernels
    doc: dict[str, Any] = (
        choice.to_json()
        if choice is not None
        else {"setting": system.cluster.kernel if system.cluster else "auto"}
    )
    if choice is None:
        counts = {k: 0 for k in KERNELS}
        for e in placement.plan.tables:
            counts[entry_kernel(e)] += 1
        doc["counts"] = counts
        doc["line"] = (
            f"{FITS_LINE}: every table whole in HBM"
            if counts["hbm"] == len(placement.plan.tables)
            else "each table's kernel from the sharding file"
        )
    budgets = dict(placed.budgets or tier_bytes(placement, system))
    # what each GPU gives its tables (its memory less the rest: replay.engine.placement)
    budgets["hbm_table_budget_bytes"] = placed.basis.get("table_budget_bytes")
    doc["tiers"] = budgets
    doc["tables"] = [
        {"table": e.table, "kernel": entry_kernel(e), "cache_load_factor": e.cache_load_factor}
        for e in placement.plan.tables
    ]
    return doc


def home_tier_note(system: SystemSpec, table_bytes: float, *, cluster: bool) -> str | None:
    """A word where one GPU of `system` would hold `table_bytes` of tables in a tier over
    its capacity (the tier every row lives in: `static`'s tier, a cache's backing tier,
    ssd-tbe's store tier); None where they fit. A one-GPU plan replays them there anyway:
    its answers then describe a GPU that cannot exist, and the plan says so."""
    p = system.policy
    homes = {"static": p.tier, "ssd-tbe": p.store_tier}
    name = homes.get(p.name, p.backing_tier)
    if not name:
        return None
    cap = float(system.tier(name).capacity_bytes)
    if table_bytes <= cap:
        return None
    where = (
        "the cluster's answers place each table within its GPUs' HBM and its nodes' host "
        "memory and drives (their kernels)"
        if cluster
        else "no one GPU of this system holds them (plan a cluster: --set cluster.nodes=N)"
    )
    return (
        f"{system.name}: the one-GPU answers put the tables' {format_bytes(table_bytes)} in "
        f"tier {name!r} of {format_bytes(cap)}, over its capacity: read them as a reference "
        f"only; {where}"
    )


HBM, UVM, CACHED = 0, 1, 2  # a local shard's code in `RankSplit`


@dataclass(frozen=True, eq=False)
class RankSplit:
    """One GPU's local keys by kernel (`replay.engine.cluster`'s mixed placements): its
    shards' first local keys (`starts`, ascending, as the cluster's layout lays them end to
    end), each shard's code (HBM, UVM or CACHED) and, for a cached shard, its first key
    among the cached shards alone (`cached_start`: the rank's policy sees only them)."""

    starts: np.ndarray
    code: np.ndarray
    cached_start: np.ndarray
    cached_rows: list[int]  # the cached shards' rows (the policy's tables)
    cache_rows: int  # sum of ceil(clf x rows) over the cached shards (one cache a GPU)

    def split(
        self, keys: np.ndarray, bounds: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(the cached shards' keys renumbered, their bounds per batch, per batch the
        lookups of `hbm` shards, per batch those of `uvm` shards); vectorized."""
        if len(keys) == 0:
            zeros = np.zeros(len(bounds) - 1, dtype=np.int64)
            return keys, np.zeros_like(bounds), zeros, zeros.copy()
        shard = np.searchsorted(self.starts, keys, side="right") - 1
        code = self.code[shard]
        per = []
        for c in (HBM, UVM, CACHED):
            cum = np.concatenate([[0], np.cumsum(code == c, dtype=np.int64)])
            per.append(cum)
        cached = code == CACHED
        sel = shard[cached]
        renumbered = keys[cached] - self.starts[sel] + self.cached_start[sel]
        counts = [np.diff(cum[bounds]) for cum in per[:2]]
        return renumbered, per[2][bounds] - per[2][bounds[0]], counts[0], counts[1]


def rank_splits(placement: Placement, *, always: bool = False) -> list[RankSplit] | None:
    """Each GPU's `RankSplit`, or None where every table is `hbm` and not `always` (the
    replay then runs the system's policy over every row, as before kernels existed;
    ssd-tbe, which never ran on a cluster before them, always splits: a table in HBM
    never reaches its drives)."""
    if not always and all(entry_kernel(e) == "hbm" for e in placement.plan.tables):
        return None
    world = placement.world
    starts: list[list[int]] = [[] for _ in range(world)]
    codes: list[list[int]] = [[] for _ in range(world)]
    cstart: list[list[int]] = [[] for _ in range(world)]
    crows: list[list[int]] = [[] for _ in range(world)]
    cache = [0] * world
    nxt, cnxt = [0] * world, [0] * world
    for s in placement.shards:
        e = placement.entry(s.table)
        kernel = entry_kernel(e)
        r = s.rank
        starts[r].append(nxt[r])
        cstart[r].append(cnxt[r])
        nxt[r] += s.rows
        if kernel in CACHED_KERNELS:
            codes[r].append(CACHED)
            crows[r].append(s.rows)
            cnxt[r] += s.rows
            cache[r] += math.ceil((e.cache_load_factor or 0.0) * s.rows)
        else:
            codes[r].append(HBM if kernel == "hbm" else UVM)
    i64 = np.int64
    return [
        RankSplit(
            np.array(starts[r], dtype=i64), np.array(codes[r], dtype=np.int8),
            np.array(cstart[r], dtype=i64), crows[r], cache[r],
        )
        for r in range(world)
    ]  # fmt: skip


__all__ = [
    "CACHED_KERNELS",
    "CLF_STEPS",
    "FITS_LINE",
    "HBM_FILL",
    "KERNELS",
    "OUR_KERNELS",
    "TINY_ROWS",
    "TORCHREC_KERNELS",
    "KernelChoice",
    "RankSplit",
    "TableKernel",
    "che_hit",
    "check_budgets",
    "check_plan_kernels",
    "choose_kernels",
    "entry_kernel",
    "home_tier_note",
    "host_capacity_bytes",
    "kernels_document",
    "offload_kernel",
    "pcie_seconds",
    "rank_splits",
    "rank_tier_bytes",
    "table_kernel",
    "tier_bytes",
    "with_kernels",
]
