"""TorchRec's own plan beside ours: `replay plan` on a cluster runs TorchRec's planner on
the same tables, topology and budget, with our statistics as its constraints, replays
its plan on the same trace, and reports both side by side (plan.json's
`cluster.torchrec`, plan.md's "TorchRec's plan beside ours").

Placement. Called by `replay.plan.cluster.plan_cluster` once its own placement is
answered; it imports TorchRec (torch) only inside its functions, and the replay of
TorchRec's plan is the caller's (`replay` argument: the same per-GPU curves, cluster
replay and collectives the plan's own sharding is measured with), so this module reads
no trace. Nothing is written: the statistics TorchRec's constraints come from go through
a temporary `torchrec.json` (`replay.plan.torchrec.parameter_constraints` reads a file).

What TorchRec is given (torchrec 1.8.0, read in its source):

- **Tables**: an `EmbeddingBagCollection` on the meta device (no memory), one
  `EmbeddingBagConfig` per table of the workload (its name, rows, the embedding dim, one
  feature of the table's name); each weight carries the system's optimizer class
  (`_optimizer_classes`, what `planner/shard_estimators.py` `_get_optimizer_multipler`
  reads: sgd 0, row-wise Adagrad 1 / dim, Adagrad 1, Adam 2 times the table's bytes).
- **Topology** (`planner/types.py` `Topology`): `world_size` and `local_world_size` the
  cluster's GPUs and GPUs per node, `compute_device="cuda"` (the planner only estimates:
  no GPU is needed), `intra_host_bw` = the cluster's per-GPU fabric bandwidth,
  `inter_host_bw` = a GPU's share of its node's NICs (both in TorchRec's bytes per ms),
  no storage reservation (`FixedPercentageStorageReservation(0)`), and `hbm_cap` as the
  proposer asks (below). TorchRec's own constants stay for what the cluster does not
  describe: its HBM, DDR and HBM-to-DDR bandwidths (897, 51, 32 GB/s;
  `planner/constants.py`) and 128 GB of DDR per rank.
- **Batch**: `batch_size` = the trace's batch (a global batch) / GPUs, TorchRec's
  per-rank batch.
- **Constraints**: `replay.parameter_constraints` of the plan's own statistics (the
  documented route: the same `ParameterConstraints` a user builds from the plan's
  `torchrec.json`): per table its pooling factor, and, for a table with a cache,
  `fused_uvm_caching` with the plan's load factor (its shards' split of the per-GPU
  budgets, combined) and `EmbeddingOffloadStats` over its unique ids per batch; a table
  that fits whole `fused`.
- **Proposers** (`cluster.torchrec_proposer`):
  `default`, TorchRec's defaults (`GridSearchProposer`, `GreedyProposer` with and without
  depth, `UniformProposer`: `planners.py`): *TorchRec places the plan's caches*. They
  keep the constraints' load factors (the caches are the plan's split of the budget) and
  choose sharding types and ranks, in a GPU's memory (`hbm_cap` =
  `cluster.gpu_memory_bytes`): the caches add up to the budget on every GPU of our
  placement, and TorchRec's storage estimate adds HBM of its own to them (4 B per row of
  every cached table and 16 B per cache slot for FBGEMM's cache state,
  `_calculate_cache_aux_state_sizes`; the shards' input and output buffers,
  `calculate_pipeline_io_cost`), so with the budget as its HBM it never finds a plan.
  `scaleup`, `EmbeddingOffloadScaleupProposer` (`planner/proposers.py`): *TorchRec splits
  the budget*. `hbm_cap` = the budget per GPU; it grows the caches of the cached tables,
  in proportion to cacheability x expected lookups (our statistics), from
  `SCALEUP_START` of the plan's load factors (it scales only tables with a load factor
  above 0, and its first proposal must fit), until its own estimate fills the HBM.
  `none`: not run.

What comes back: TorchRec's `ShardingPlan`, imported by
`replay.system.torchrec_plan.sharding_from_torchrec` (every sharding type it emits), and
its own estimates per rank: the sum over the rank's shards of `Shard.perf` (forward and
backward compute and comms, prefetch; `Perf.total`, in ms: TorchRec's bandwidths are
bytes per ms) and of `Shard.storage` (HBM, DDR bytes), read through the planner's `stats`
hook (`planner/types.py` `Stats.log` receives the chosen `ShardingOption`s). The planner's
own rating of a plan is the largest rank's total.

What the trace sees that TorchRec's formulas miss: TorchRec prices a shard from its
share of the table's pooling factor (a row-wise block gets 1 / world of every table's
lookups: uniform ids) and a cached lookup from the load factor, not the hit ratio
(`kernel_bw_lookup`); the replay routes the trace's ids to the ranks that hold their rows,
so a skewed table's hot rows load one rank (on criteo-terabyte four tables send 37% of
their lookups to one row each).

Cost. TorchRec's search grows with the tables and GPUs (its partitioner copies its
options per table and GPU; measured on the 2-core VM, profiled: 26 tables on 128 GPUs
7.8 s, 100 tables on 8, 16, 128 GPUs 16, 29, 63 s, roughly as tables^2 x sqrt(GPUs)):
`torchrec_side` asks it only up to `cluster.torchrec_max_table_gpus` tables x GPUs,
and says why not beyond.

ASSUMPTIONS: the same cache model judges both plans (each GPU's LRU over its shards at
the budget; TorchRec's per-table load factors are its own storage estimate, reported,
not replayed); TorchRec's plan's shards are not held to `cluster.gpu_memory_bytes`
(TorchRec placed them within its own HBM and DDR estimates, which are reported). If
TorchRec's planner raises (no plan fits its storage estimate, or any other failure),
its one-line reason is recorded and the rest of the plan goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from replay.errors import ConfigError, ReplayError
from replay.system.sharding import Placement, TableShape, resolve_plan
from replay.system.torchrec_plan import (
    INSTALL,
    OUR_TYPES,
    TESTED,
    plan_from_torchrec_json,
    torchrec_plan_json,
)

PROPOSERS = ("default", "scaleup")
# the scale-up proposer's first load factors: this share of the plan's (it grows them)
SCALEUP_START = 1e-3
PERF_FIELDS = (
    "fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms", "prefetch_compute",
    "input_dist_comms",
)  # fmt: skip
WHAT_TRACE_SEES = (
    "TorchRec prices each shard from its share of the table's pooling factor (a "
    "row-wise block 1 / world of the table's lookups: ids spread evenly over the rows) "
    "and a cached lookup from the load factor, not the hit ratio; the replay routes the "
    "trace's ids to the ranks that hold their rows, so a skewed table's hot rows load "
    "one rank and TorchRec's balanced estimates miss it"
)


def torchrec_missing() -> str | None:
    """Why TorchRec's planner cannot run here; None when it can."""
    try:
        import torch  # noqa: F401
        from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: F401
    except ImportError:
        return f"TorchRec is not installed: {INSTALL}"
    except OSError as exc:  # a native library that fails to load
        return f"TorchRec cannot be imported ({' '.join(str(exc).split())}): {INSTALL}"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """TorchRec's planner logs a warning per table the constraints keep from
    data-parallel, one about building the Topology directly, and its own summaries:
    none of them is the user's business here (the outcome is recorded)."""
    logger = logging.getLogger("torchrec")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _one_line(exc: BaseException) -> str:
    """TorchRec's error as one line: its first line, and where it says them, the HBM its
    estimate needs and has (`PlannerError`'s "insufficient storage" text)."""
    text = str(exc).strip()
    first = " ".join(text.splitlines()[0].split()) if text else type(exc).__name__
    need = re.search(r"requirement for model parallel: Storage\(hbm = ([\d.]+) GB", text)
    have = re.search(r"available for model parallel: Storage\(hbm = ([\d.]+) GB", text)
    if need and have and float(need.group(1)) > 0:  # TorchRec rounds to 0.001 GB
        first += (
            f" (its estimate needs {need.group(1)} GB of HBM over all GPUs, "
            f"{have.group(1)} GB available)"
        )
    return f"{type(exc).__name__}: {first}"


def _optimizer_class(optimizer: str) -> Any:
    import torch
    from torchrec import optim as trec_optim

    return {
        "sgd": torch.optim.SGD,
        "rowwise-adagrad": trec_optim.RowWiseAdagrad,
        "adagrad": torch.optim.Adagrad,
        "adam": torch.optim.Adam,
    }.get(optimizer)


def hbm_bytes(cluster: Any, budget_bytes: int, proposer: str) -> int:
    """TorchRec's HBM per GPU (`hbm_cap`): the GPU's memory where TorchRec places the
    plan's caches (`default`), the budget where it splits it (`scaleup`)."""
    return int(budget_bytes) if proposer == "scaleup" else int(cluster.gpu_memory_bytes)


def topology_settings(cluster: Any, hbm: int) -> dict[str, Any]:
    """The `Topology` arguments of a cluster with `hbm` bytes of HBM per GPU (module
    docstring); bandwidths in TorchRec's bytes per ms."""
    out: dict[str, Any] = {
        "world_size": int(cluster.world_size),
        "local_world_size": int(cluster.gpus_per_node),
        "compute_device": "cuda",
        "hbm_cap": int(hbm),
        "intra_host_bw": float(cluster.intra_node_bw_bytes_per_s) / 1e3,
    }
    share = float(cluster.nics_per_node) * float(cluster.nic_bw_bytes_per_s)
    if share > 0:  # none: TorchRec's default (its cross-node figure is never 0)
        out["inter_host_bw"] = share / int(cluster.gpus_per_node) / 1e3
    return out


def start_load_factors(stats: dict[str, Any], proposer: str) -> dict[str, float] | None:
    """The load factors the constraints start from: the plan's (None: as the statistics
    say), or for `scaleup` `SCALEUP_START` of each cached table's (0 < f < 1)."""
    from replay.plan.torchrec import combine_shards

    if proposer != "scaleup":
        return None
    tables = combine_shards(stats) if "cluster" in stats else stats["tables"]
    return {
        name: float(t["load_factor"]) * SCALEUP_START
        for name, t in tables.items()
        if t["load_factor"] is not None and 0.0 < float(t["load_factor"]) < 1.0
    }


def _constraints(stats: dict[str, Any], load_factors: dict[str, float] | None) -> dict[str, Any]:
    """`replay.parameter_constraints` of the statistics document (what the plan writes as
    torchrec.json), read from a temporary copy."""
    from replay.plan.torchrec import parameter_constraints

    with tempfile.TemporaryDirectory(prefix="replay-torchrec-") as tmp:
        path = Path(tmp) / "torchrec.json"
        path.write_text(json.dumps(stats))
        return parameter_constraints(path, load_factors=load_factors)


def run_planner(
    *,
    shapes: Sequence[TableShape],
    cluster: Any,
    budget_bytes: int,
    batch_size: int,
    stats: dict[str, Any],
    proposer: str,
    optimizer: str = "sgd",
) -> dict[str, Any]:
    """TorchRec's planner on `shapes` (module docstring): its plan in the JSON form
    (`torchrec_plan`), each rank's estimates (`per_rank`: `estimate_ms`, the `Perf`
    fields in ms, `hbm_bytes`, `ddr_bytes`) and each table's choice (`tables`). Raises
    what TorchRec raises."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.proposers import EmbeddingOffloadScaleupProposer
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )
    from torchrec.distributed.planner.types import Stats

    class _Chosen(Stats):
        """The planner's `stats` hook: it is handed the chosen sharding options."""

        def __init__(self) -> None:
            self.options: list[Any] = []

        def log(self, *args: Any, **kwargs: Any) -> None:
            self.options = list(kwargs.get("best_plan") or [])

    world = int(cluster.world_size)
    configs = [
        EmbeddingBagConfig(name=s.name, embedding_dim=int(s.dim), num_embeddings=int(s.rows),
                           feature_names=[s.name])
        for s in shapes
    ]  # fmt: skip
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    optimizer_class = _optimizer_class(optimizer)
    if optimizer_class is not None:
        for weight in ebc.parameters():
            weight._optimizer_classes = [optimizer_class]
    chosen = _Chosen()
    with _quiet():
        constraints = _constraints(stats, start_load_factors(stats, proposer))
        planner = EmbeddingShardingPlanner(
            topology=Topology(
                **topology_settings(cluster, hbm_bytes(cluster, budget_bytes, proposer))
            ),
            batch_size=max(1, -(-int(batch_size) // world)),
            constraints=constraints,
            storage_reservation=FixedPercentageStorageReservation(0.0),
            proposer=[EmbeddingOffloadScaleupProposer()] if proposer == "scaleup" else None,
            stats=[chosen],
        )
        plan = planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    per_rank = [
        {"rank": r, "estimate_ms": 0.0, **{f"{k}_ms": 0.0 for k in PERF_FIELDS},
         "hbm_bytes": 0, "ddr_bytes": 0}
        for r in range(world)
    ]  # fmt: skip
    tables = []
    for option in chosen.options:
        tables.append(
            {
                "table": option.name,
                "type": OUR_TYPES.get(option.sharding_type, option.sharding_type),
                "kernel": option.compute_kernel,
                "load_factor": option.cache_load_factor,
                "ranks": sorted({int(s.rank) for s in option.shards}),
            }
        )
        for shard in option.shards:
            entry = per_rank[int(shard.rank)]
            if shard.perf is not None:
                entry["estimate_ms"] += float(shard.perf.total)
                for k in PERF_FIELDS:
                    entry[f"{k}_ms"] += float(getattr(shard.perf, k))
            if shard.storage is not None:
                entry["hbm_bytes"] += int(shard.storage.hbm)
                entry["ddr_bytes"] += int(shard.storage.ddr)
    return {
        "torchrec_plan": torchrec_plan_json(plan, world, int(cluster.gpus_per_node)),
        "per_rank": per_rank,
        "tables": sorted(tables, key=lambda t: [s.name for s in shapes].index(t["table"])),
    }


def placement_of_plan(
    torchrec_plan: dict[str, Any], shapes: Sequence[TableShape], cluster: Any
) -> Placement:
    """Our placement of TorchRec's plan (the JSON form), as the cluster replay routes it
    (every type TorchRec emits, grid included)."""
    ours = plan_from_torchrec_json(torchrec_plan, "TorchRec's plan")
    placement = resolve_plan(
        ours, shapes, nodes=int(cluster.nodes), gpus_per_node=int(cluster.gpus_per_node),
        where="TorchRec's plan",
    )  # fmt: skip
    return placement


def torchrec_beside(
    *,
    cluster: Any,
    shapes: Sequence[TableShape],
    budget_bytes: int,
    batch_size: int,
    stats: dict[str, Any],
    optimizer: str,
    replay: Callable[[Placement], dict[str, Any]],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """plan.json's `cluster.torchrec` (module docstring). `stats`: the plan's torchrec.json
    document (its tables and, under `cluster`, its shards); `replay`: the caller's
    measure of a placement on the trace (`per_gpu` [{rank, lookups, hit_at_budget, ...}],
    `imbalance`, `all_to_all_bytes_per_batch`, `step_time_s`, ...)."""
    proposer = str(cluster.torchrec_proposer)
    world = int(cluster.world_size)
    missing = torchrec_missing()
    if missing is not None:
        return {"skipped": missing}
    local = max(1, -(-int(batch_size) // world))
    out: dict[str, Any] = {
        "proposer": proposer,
        "torchrec_tested": TESTED,
        "topology": topology_settings(cluster, hbm_bytes(cluster, budget_bytes, proposer)),
        "batch_size_per_rank": local,
        "methods": {
            "planner": (
                "TorchRec's EmbeddingShardingPlanner with EmbeddingOffloadScaleupProposer: "
                "TorchRec splits the budget (its HBM per GPU) among the cached tables by "
                "cacheability x expected lookups, from "
                f"{SCALEUP_START:g} of the plan's load factors"
                if proposer == "scaleup"
                else "TorchRec's EmbeddingShardingPlanner with its default proposers: "
                "TorchRec places the plan's caches (the plan's load factors) in the GPUs' "
                "memory (cluster.gpu_memory_bytes), choosing sharding types and ranks"
            )
            + "; the workload's tables, the cluster's GPUs and links, and "
            "replay.parameter_constraints of the plan's statistics (torchrec.json: "
            "EmbeddingOffloadStats, pooling factors); no storage reservation; TorchRec's "
            "own HBM, DDR and HBM-to-DDR bandwidths",
            "estimate": "TorchRec's estimate per rank: the sum of its shards' Shard.perf "
            "(forward and backward compute and comms, prefetch), in ms, and of their "
            "Shard.storage; TorchRec rates a plan by its largest rank",
            "replay": "TorchRec's plan imported (replay.sharding_from_torchrec) and measured "
            "as the plan's own sharding: each GPU's LRU curve at the budget over the run, "
            "the steady state's cluster replay (imbalance, all-to-all, step time)",
            "what_the_trace_sees": WHAT_TRACE_SEES,
        },
    }
    say(f"cluster: TorchRec's planner ({proposer} proposers) on the same tables and budget")
    try:
        got = run_planner(
            shapes=shapes, cluster=cluster, budget_bytes=budget_bytes, batch_size=batch_size,
            stats=stats, proposer=proposer, optimizer=optimizer,
        )  # fmt: skip
    except (KeyboardInterrupt, MemoryError):
        raise
    except ReplayError as exc:  # our constraints refused (e.g. a torchrec.json it rejects)
        out["error"] = f"the constraints: {exc}"
        return out
    except Exception as exc:  # TorchRec's planner, whatever it raises: recorded, plan goes on
        out["error"] = f"TorchRec's planner: {_one_line(exc)}"
        return out
    estimates = got["per_rank"]
    out["tables"] = got["tables"]
    out["kernels"] = _counts(t["kernel"] for t in got["tables"])
    out["sharding_types"] = _counts(t["type"] for t in got["tables"])
    out["estimate_max_ms"] = max((e["estimate_ms"] for e in estimates), default=0.0)
    try:
        placement = placement_of_plan(got["torchrec_plan"], shapes, cluster)
    except ConfigError as exc:
        out["error"] = f"replaying TorchRec's plan: {exc}"
        out["estimates"] = estimates
        return out
    out["sharding"] = placement.plan.to_json()
    say("cluster: TorchRec's plan on the trace (curves and steady state)")
    measured = replay(placement)
    per_gpu = []
    for g, e in zip(measured.pop("per_gpu"), estimates, strict=True):
        per_gpu.append({**g, **{k: v for k, v in e.items() if k != "rank"}})
    out.update(measured)
    out["per_gpu"] = per_gpu
    return out


def torchrec_side(
    *,
    base: Any,
    horizon: Any,
    budget_bytes: int,
    tables: dict[str, Any] | None,
    shards: dict[str, Any],
    replay: Callable[[Placement], dict[str, Any]],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """`torchrec_beside` for `replay.plan.cluster.plan_cluster`: the system `base` with its
    `[cluster]`, the plan's `horizon` (its tables, the embedding dim, the batch size),
    torchrec.json's one-GPU `tables` and per-shard part `shards`."""
    from replay.engine.placement import embedding_dim
    from replay.plan.torchrec import FORMAT, VERSION, batch_size_of
    from replay.system.sharding import table_shapes

    if base.cluster.torchrec_proposer not in PROPOSERS:
        return {"skipped": "cluster.torchrec_proposer = none: TorchRec's planner not run"}
    pairs = len(horizon.table_names) * int(base.cluster.world_size)
    if pairs > int(base.cluster.torchrec_max_table_gpus):
        return {
            "skipped": (
                f"TorchRec's planner not run: {len(horizon.table_names):,} tables x "
                f"{int(base.cluster.world_size):,} GPUs = {pairs:,} is over "
                f"cluster.torchrec_max_table_gpus ({int(base.cluster.torchrec_max_table_gpus):,}),"
                " where its greedy partitioner takes tens of minutes; raise it to run it"
            )
        }
    batch = batch_size_of(horizon)
    if not tables or batch is None:
        return {"skipped": "the plan has no batch size or no statistics for TorchRec's planner"}
    names = [str(n) for n in horizon.table_names]
    dim = embedding_dim(base, dict(horizon.workload or {}))
    shapes = table_shapes(names, [int(r) for r in horizon.table_rows], dim)
    stats = {"format": FORMAT, "version": VERSION, "tables": tables, "cluster": shards}
    return torchrec_beside(
        cluster=base.cluster, shapes=shapes, budget_bytes=int(budget_bytes), batch_size=batch,
        stats=stats, optimizer=str(base.model.optimizer), replay=replay, say=say,
    )  # fmt: skip


def _counts(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in items:
        out[str(k)] = out.get(str(k), 0) + 1
    return dict(sorted(out.items()))


__all__ = [
    "PROPOSERS",
    "SCALEUP_START",
    "WHAT_TRACE_SEES",
    "hbm_bytes",
    "placement_of_plan",
    "run_planner",
    "start_load_factors",
    "topology_settings",
    "torchrec_beside",
    "torchrec_missing",
    "torchrec_side",
]
