"""The typed definitions of `replay plan`'s documents: `plan.json`, `torchrec.json` and
`sharding.json` (the shapes `replay._schema` turns into JSON Schemas).

Every key a report, `replay diff` or a pipeline reads is defined with its type and
meaning; units are in the keys' names. Parts whose keys depend on the systems planned
(a cluster's per-GPU breakdowns, a checkpoint strategy's modes, FBGEMM's TBE and SSD TBE
answers, the memory estimate's parts) are objects whose common keys are listed here and
that may hold more (`open_shape`); their meaning is in docs/plan.md and docs/cluster.md.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from replay._schema import FRACTION, NONNEGATIVE, open_shape

Count = Annotated[int, NONNEGATIVE]
Size = Annotated[float, NONNEGATIVE]
Fraction = Annotated[float, FRACTION]


class Horizon(TypedDict):
    """The training run the plan answers for."""

    batches: Annotated[Count, "batches of the whole run"]
    lookups: Annotated[Count, "embedding lookups over the run"]
    sample_rate: Annotated[Fraction, "SHARDS's spatial sample rate of the curves (1: exact)"]
    training_time_s: Annotated[Size, "the run's training time: batches x time_per_batch_s"]
    time_per_batch_s: Annotated[Size, "one training step"]
    time_per_batch_from: Annotated[str, "where the step time comes from"]
    given: Annotated[
        dict[str, float] | None,
        "the training length as given (duration_s, samples, epochs or batches); null: the "
        "source's own batches",
    ]
    workload: Annotated[str, "the workload's name"]
    batch_size: Annotated[Count, "samples per batch"]


class MissRatioCurve(TypedDict):
    """The LRU miss-ratio curve of one cache shared by every table, over the run."""

    rows: Annotated[list[int], "cache sizes in rows"]
    bytes: Annotated[list[float], "the same sizes in bytes (rows x row_bytes)"]
    miss_ratio: Annotated[list[float], "the miss ratio at each size"]
    method: Annotated[str, "exact, or SHARDS at the sample rate"]
    error_bound: Annotated[Size, "the curve's expected absolute error (0 when exact)"]
    point_errors: Annotated[list[float], "~95% absolute error of the miss ratio at each size"]
    error_method: NotRequired[Annotated[str, "how point_errors were estimated"]]
    analytic_miss_ratio: Annotated[
        list[float] | None,
        "Che's analytic curve at the same sizes (null: the workload has reuse or drift)",
    ]


class Touched(TypedDict):
    """touched(k): the distinct rows updated within k consecutive batches, what an
    incremental checkpoint every k batches writes."""

    basis: NotRequired[Annotated[Any, "how the curve was measured at R < 1"]]
    batches: Annotated[list[int], "k, in batches"]
    rows: Annotated[list[float], "distinct rows updated within k batches"]
    bytes: Annotated[list[float], "those rows' state (rows x state_bytes_per_row)"]
    per_table: Annotated[dict[str, list[float]], "the rows per table, at the same k"]


class TableSplit(TypedDict):
    """One table's share of the budget when it is split across tables."""

    table: Annotated[str, "the table's name"]
    table_rows: Annotated[Count, "the table's rows"]
    rows: Annotated[Size, "cache rows given to the table"]
    bytes: Annotated[Size, "those rows in bytes"]
    load_factor: Annotated[Size, "rows / table_rows"]
    hit: Annotated[Fraction, "the table's hit ratio with its share"]
    uniform_hit: Annotated[Fraction, "its hit ratio at the uniform load factor"]
    curve: Annotated[str, "how the table's curve was computed at small sizes"]


@open_shape
class Baseline(TypedDict):
    """What the split is compared with: one cache of the budget shared by every table."""

    policy: Annotated[str, "the policy of the shared cache"]
    cache: Annotated[str, "what the shared cache is"]
    hit: Annotated[Fraction | None, "its hit ratio at the budget"]
    split_gain_points: Annotated[float | None, "split_hit - hit, in percentage points"]


class Cache(TypedDict):
    """Cache answers for one GPU holding every table with the whole budget."""

    budget_bytes: Annotated[Count, "the cache budget"]
    hit_at_budget: Annotated[
        dict[str, Fraction | None], "per policy: the hit ratio of a cache of the budget"
    ]
    bytes_for_hit: Annotated[
        dict[str, dict[str, float | None]],
        "per policy, per hit target: the cache bytes that reach it (null: out of reach)",
    ]
    range_bytes: Annotated[
        dict[str, dict[str, list[float | None]]],
        "per policy, per hit target: the ~95% range [low, high] of bytes_for_hit",
    ]
    methods: Annotated[dict[str, str], "per policy: how its answers were computed"]
    per_table: Annotated[list[TableSplit], "the budget's split across tables"]
    split_hit: Annotated[Fraction, "hit ratio of per-table caches split as per_table"]
    uniform_hit: Annotated[Fraction, "hit ratio of per-table caches at one load factor"]
    uniform_load_factor: Annotated[Size, "that load factor: budget rows / table rows"]
    baseline: Baseline
    shared_hit: Annotated[dict[str, Fraction | None], "per policy: the shared cache's hit ratio"]
    uniform_method: Annotated[str, "how uniform_hit was computed"]
    tbe: Annotated[list[dict[str, Any]], "FBGEMM's TBE cache against an ideal LRU, per load factor"]
    ssd_tbe: NotRequired[Annotated[dict[str, Any], "FBGEMM's SSD TBE: L1 and L2 per hit target"]]


@open_shape
class Strategy(TypedDict):
    """One checkpoint strategy at its best interval over the run (docs/plan.md)."""

    name: Annotated[str, "the strategy"]
    interval_s: Annotated[Size, "its best interval"]
    young_daly_interval_s: Annotated[Size, "Young/Daly's interval from its cost and the MTBF"]
    cost_s: Annotated[Size, "one checkpoint's stall"]
    bytes: Annotated[Size, "one checkpoint's bytes written"]
    storage_bytes: Annotated[Size, "bytes kept on storage"]
    restore_s: Annotated[Size, "one restore"]
    lost_work_per_training_failure_s: Annotated[Size, "work lost to one failure"]
    failures_during_restore_per_run: Annotated[Size, "failures that hit a restore, per run"]
    goodput: Annotated[Fraction, "useful share of the run's time (mean over draws)"]
    goodput_p5: Annotated[Fraction, "its 5th percentile over the draws"]


class Checkpoint(TypedDict):
    """Checkpoint strategies at the cluster's MTBF, best first."""

    cluster_mtbf_s: Annotated[Size, "mean time between failures of the whole job"]
    nodes: Annotated[int | None, "nodes, as given with --nodes (null: --cluster-mtbf)"]
    node_mtbf_s: Annotated[float | None, "one node's MTBF as given (null: --cluster-mtbf)"]
    system: Annotated[str, "the system whose checkpoint settings were planned"]
    best: Annotated[str | None, "the strategy of the highest goodput"]
    strategies: Annotated[list[Strategy], "every strategy, best first"]
    store: NotRequired[
        Annotated[dict[str, Any], "a cluster's checkpoint store: bandwidths and capacity"]
    ]


class SystemAnswer(TypedDict):
    """One system's steady state per batch."""

    name: Annotated[str, "the system"]
    time_per_batch_s: Annotated[Size, "time per batch"]
    energy_per_batch_j: Annotated[Size, "energy per batch"]
    hit_ratio: Annotated[Fraction | None, "its cache's hit ratio"]
    pareto: Annotated[bool, "on the time-energy Pareto front"]
    never_evicts: Annotated[bool, "its cache held every row of the span it replayed"]
    batches: Annotated[Count, "the span replayed"]
    cache_rows: Annotated[int | None, "the cache's rows"]
    modelled: NotRequired[Annotated[bool, "modelled from the curve (production scale)"]]


@open_shape
class Memory(TypedDict):
    """Each GPU's memory by parts, as FBGEMM and TorchRec allocate it."""

    per_gpu: Annotated[list[dict[str, Any]], "per GPU: peaks, capacity and parts in bytes"]
    per_node: Annotated[list[dict[str, Any]], "per node: host and drive bytes"]
    worst_rank: Annotated[int, "the GPU of the highest peak"]
    fits: Annotated[bool, "every GPU's peak fits its memory"]
    basis: Annotated[str, "what the estimate assumes"]


@open_shape
class Tolerance(TypedDict):
    """The sample rate chosen for --tolerance."""

    tolerance: Annotated[Size, "the widest ~95% range asked for, as a fraction of the answer"]
    met: Annotated[bool, "whether the chosen rate met it"]
    tried: Annotated[list[dict[str, Any]], "each rate tried and its widest range"]


@open_shape
class Cluster(TypedDict):
    """A cluster's per-GPU answers (docs/cluster.md); keys beyond these describe the
    sharding, the step's parts, the scaling points and TorchRec's own plan."""

    nodes: Annotated[Count, "nodes"]
    gpus_per_node: Annotated[Count, "GPUs per node"]
    world: Annotated[Count, "GPUs"]
    sharding: Annotated[str, "how the tables are sharded"]
    budget_bytes_per_gpu: Annotated[Count, "each GPU's cache budget"]
    imbalance: Annotated[Size, "the busiest GPU's lookups over the mean"]
    all_to_all_bytes_per_batch: Annotated[Size, "the all-to-all's bytes per batch"]
    all_to_all_s_per_batch: Annotated[Size, "the all-to-all's time per batch"]
    step_time_s: Annotated[Size, "the step's time"]
    hit_at_budget: Annotated[dict[str, Any], "the hit ratio at each GPU's budget"]
    bytes_for_hit: Annotated[dict[str, Any], "per hit target: each GPU's cache bytes"]
    per_gpu: Annotated[list[dict[str, Any]], "per GPU: lookups, hit ratio, cache bytes"]
    notes: Annotated[list[str], "what the cluster's answers assume"]


@open_shape
class Claim(TypedDict):
    """A published claim computed for this cluster."""

    claim: Annotated[str, "the claim"]
    source: Annotated[str, "where it is published"]


class Plan(TypedDict):
    """plan.json: `replay plan`'s answers for a whole training run (docs/plan.md)."""

    horizon: Horizon
    row_bytes: Annotated[Count, "what a cache holds per row (the embedding values)"]
    state_bytes_per_row: Annotated[Count, "a row with its optimizer state (a checkpoint writes)"]
    distinct_rows: Annotated[Count, "distinct rows the run touches"]
    mrc: MissRatioCurve
    touched: Touched
    cache: Cache
    checkpoint: Checkpoint
    systems: Annotated[list[SystemAnswer], "each system's steady state"]
    notes: Annotated[list[str], "what the answers assume, and where they stop holding"]
    memory: Memory
    tolerance: NotRequired[Tolerance]
    cluster: NotRequired[Cluster]
    claims: NotRequired[Annotated[list[Claim], "published claims computed for the cluster"]]


class PlanDocument(Plan):
    """The plan as `replay plan` assembles it (`replay.plan.plan.make_plan`): plan.json's
    keys and its `torchrec` part, which is written apart as torchrec.json (not a
    published document: plan.json and torchrec.json are)."""

    torchrec: dict[str, Any]


@open_shape
class TorchrecTable(TypedDict):
    """One table's (or shard's) cache statistics, as TorchRec's planner takes them."""

    height: Annotated[Count, "the table's rows (the histogram's range)"]
    bins: Annotated[Count, "the histogram's bins"]
    mrc_hist_counts: Annotated[list[int], "reuse-distance histogram: lookups per bin"]
    expected_lookups: Annotated[Size, "distinct rows a batch looks up (expected)"]
    cacheability: Annotated[Fraction, "TorchRec's cacheability"]
    cold_miss_ratio: Annotated[Fraction, "share of lookups that are first touches"]
    load_factor: Annotated[Size, "the cache's load factor the budget's split gives it"]
    lookups: Annotated[Count, "lookups over the run"]
    pooling_factor: Annotated[Size, "lookups per sample"]
    batch_size: Annotated[Count, "samples per batch"]


class Torchrec(TypedDict):
    """torchrec.json: each table's cache statistics for TorchRec's planner
    (docs/torchrec.md); `schema_version` is the file's `version`."""

    format: Annotated[str, "replay-torchrec-cache-stats"]
    version: Annotated[int, "the same as schema_version"]
    replay_version: Annotated[str, "replay's version"]
    batches: Annotated[Count, "batches of the run"]
    batch_size: Annotated[Count, "samples per batch"]
    row_bytes: Annotated[Count, "bytes per row a cache holds"]
    cache_budget_bytes: Annotated[Count, "the cache budget (per GPU) the load factors split"]
    gpu_memory_bytes: NotRequired[Annotated[Size, "a cluster GPU's memory"]]
    sample_rate: Annotated[Fraction, "SHARDS's sample rate of the statistics"]
    method: Annotated[str, "how the statistics were computed"]
    histogram: Annotated[str, "what mrc_hist_counts counts"]
    miss_ratio: Annotated[str, "how TorchRec reads a miss ratio from the histogram"]
    bins: Annotated[str, "how the bins are laid out"]
    expected_lookups: Annotated[str, "what expected_lookups counts"]
    few_sampled_rows: Annotated[list[str], "tables with too few sampled rows to trust"]
    tables: Annotated[dict[str, TorchrecTable], "per table"]
    cluster: NotRequired[
        Annotated[dict[str, Any], "a cluster's per-shard statistics (shards, as tables)"]
    ]


class ShardingEntry(TypedDict):
    """One table's sharding."""

    table: Annotated[str, "the table"]
    type: Annotated[str, "TorchRec's sharding type (table-wise, row-wise, ...)"]
    ranks: Annotated[list[int], "the GPUs holding its shards"]
    shards: NotRequired[Annotated[list[list[int]], "each shard's [start, stop) rows"]]
    rows: NotRequired[Annotated[Count, "the table's rows"]]
    dim: NotRequired[Annotated[Count, "its embedding dimension"]]
    kernel: NotRequired[Annotated[str, "its compute kernel (hbm, uvm-caching, uvm, ssd)"]]
    cache_load_factor: NotRequired[
        Annotated[Fraction, "its HBM cache's load factor (a cached kernel)"]
    ]


class Sharding(TypedDict):
    """sharding.json: a resolved sharding plan (docs/cluster.md); a hand-written one may
    give only `tables`."""

    tables: Annotated[list[ShardingEntry], "per table"]
    source: NotRequired[Annotated[str, "what chose it"]]
    world_size: NotRequired[Annotated[Count, "GPUs"]]
    gpus_per_node: NotRequired[Annotated[Count, "GPUs per node"]]
    torchrec_executable: NotRequired[Annotated[bool, "TorchRec can run it as it is"]]
    torchrec_executable_reason: NotRequired[Annotated[str, "why TorchRec cannot, if not"]]


__all__ = ["Plan", "PlanDocument", "Sharding", "Torchrec"]
