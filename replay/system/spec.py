"""System specifications: memory tiers, links, lookup placement, policy, compute, model.

A system spec is data (DESIGN section 5): frozen dataclasses loaded from TOML, with the
unit in every numeric field's name. Unknown keys, wrong types, NaN and out-of-range values
are `ConfigError`s naming the dotted path of the offending key.

TOML layout (presets live in `replay/system/presets/*.toml`)::

    name = "hbm-lru"
    description = "..."
    extends = "other-preset"        # optional: start from another preset, deep-merged
    [tiers.hbm]                     # any number of named tiers
    device = "h100-hbm3"            # optional: defaults from replay/system/devices.toml
    capacity_bytes = 80e9
    [links.pcie]
    device = "pcie5-x16"
    [lookup]
    location = "gpu"                # gpu | host | near-memory
    link = "pcie"
    [policy]
    name = "lru"
    fast_tier = "hbm"
    backing_tier = "dram"
    capacity_bytes = 268435456      # or capacity_rows = 150000 (wins when > 0)
    [compute]
    seconds_per_batch = 0.0005      # or flops_per_sample with flops_per_s
    [model]
    optimizer = "sgd"
    [checkpoint.store]              # optional: where a cluster's checkpoints go
    kind = "shared-fs"              # local-nvme | shared-fs | object-store (STORE_DEFAULTS)
    [cluster]                       # optional: many GPUs (ClusterSpec); absent: one GPU
    preset = "dgx-h100"             # optional: defaults from replay/system/clusters.toml
    nodes = 8

`--set key=value` overrides act on the raw data before validation, by dotted path
(`--set cluster.nodes=8` on a system without `[cluster]` makes one, from the defaults).

A system without `[cluster]` is one GPU: `cluster` is None and `SystemSpec.to_dict` has
no `cluster` key, so every result written before the section existed stays byte-identical;
likewise `checkpoint.store` (None) and `checkpoint.replicas` (0) leave no key when not given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from replay.errors import ConfigError, did_you_mean, unknown_key
from replay.system.optimizer import OPTIMIZERS, optimizer_bytes_per_row
from replay.system.spec_fields import build_flat as _build
from replay.system.spec_fields import build_named as _named
from replay.system.spec_load import apply_overrides, load_system_data, parse_value

LOCATIONS = ("gpu", "host", "near-memory")
# TorchRec's train pipelines, whose batches in flight size each GPU's memory
# (`replay.system.gpu_memory`, which a one-GPU run does not import)
PIPELINES = ("base", "sparse-dist", "prefetch-sparse-dist")
# ComputeSpec's knobs left out of `SystemSpec.to_dict` at their defaults
COMPUTE_DEFAULTS: dict[str, object] = {"pipeline": "sparse-dist", "activations_bytes": 0.0}
INCREMENTS = ("one-shot", "consecutive", "intermittent")
QUANTIZE_BITS = (0, 2, 3, 4, 8)  # 0: no quantization (Check-N-Run's b in 2, 3, 4, 8)
CHUNK_EVICTIONS = ("furthest", "lru")
TBE_ALGORITHMS = ("lru", "lfu")  # fbgemm_gpu CacheAlgorithm
SSD_TBE_KNOBS = ("l2_capacity_bytes", "store_tier", "ssd_write_amplification")
TBE_ASSOCIATIVITIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
BYTES_PER_VALUE = 4  # fp32 embeddings and optimizer state
MAX_BYTES = 1e18
MAX_RATE = 1e18
MAX_NS = 1e12  # 1000 s
# the intra-node fabric's name (descriptive: its numbers are the bandwidth and latency)
FABRICS = ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "nvswitch", "pcie", "xgmi")
# TorchRec's sharding types (torchrec.distributed.types.ShardingType), as the CLI names
# them, and the sharder, which balances per-GPU cost: `auto` in plans TorchRec executes,
# `auto-uneven` in uneven blocks only replay can replay (replay/engine/placement.py)
SHARDINGS = (
    "auto", "auto-uneven", "table-wise", "row-wise", "column-wise", "table-row-wise",
    "data-parallel", "table-column-wise",
)  # fmt: skip
# where a table's rows live (replay/engine/kernels.py; TorchRec's compute kernels
# `fused`, `fused_uvm_caching`, `fused_uvm` and `key_value`): whole in HBM, cached in HBM
# over host memory, in host memory read over PCIe, FBGEMM's SSD TBE; `auto` chooses per table
KERNELS = ("hbm", "uvm-caching", "uvm", "ssd")
CLUSTER_KERNELS = ("auto", *KERNELS)
# a cluster's all-to-all model (replay/engine/collectives.py)
ALL_TO_ALL_MODELS = ("torchrec", "lower-bound")
# the proposers of TorchRec's planner a cluster plan runs beside its own sharding
# (replay/plan/torchrec_planner.py); "none": not run
TORCHREC_PROPOSERS = ("default", "scaleup", "none")
MAX_GPUS_PER_NODE = 1024
# ASSUMPTION: no DLRM job we know of is larger (Meta's ZionEX reports 128-2048 GPUs);
# bounds the per-GPU state a cluster replay keeps
MAX_GPUS = 65536


def _range(lo: float, hi: float, *, lo_open: bool = False) -> dict[str, Any]:
    return {"range": (lo, hi, lo_open)}


@dataclass(frozen=True)
class TierSpec:
    """One memory tier. Sizes in bytes, bandwidths in bytes/s, latencies in ns."""

    name: str
    capacity_bytes: float = field(default=0.0, metadata=_range(0, MAX_BYTES, lo_open=True))
    read_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE, lo_open=True))
    write_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE, lo_open=True))
    read_latency_ns: float = field(default=0.0, metadata=_range(0, MAX_NS))
    write_latency_ns: float = field(default=0.0, metadata=_range(0, MAX_NS))
    access_bytes: int = field(default=64, metadata=_range(1, 1 << 30))
    # accesses in flight at once (memory-level parallelism): latency term = n × lat / this
    parallelism: int = field(default=1, metadata=_range(1, 1 << 30))
    energy_read_pj_per_byte: float = field(default=0.0, metadata=_range(0, 1e9))
    energy_write_pj_per_byte: float = field(default=0.0, metadata=_range(0, 1e9))
    static_power_w: float = field(default=0.0, metadata=_range(0, 1e6))
    persistent: bool = False
    # the training device's own memory (GPU HBM): a copy made on the host side (a
    # checkpoint's snapshot of host-resident tables) never lands there
    on_device: bool = False
    # a lookup of a row the previous batch updated waits this long (media write-to-read
    # turnaround), over `parallelism`; 0: no read-after-write stall (replay/engine/raw.py)
    write_to_read_ns: float = field(default=0.0, metadata=_range(0, MAX_NS))
    source: str = ""


@dataclass(frozen=True)
class LinkSpec:
    """A link between the device that trains (GPU) and the host side.

    h2d: toward the training device (fetches, pooled vectors); d2h: back toward the host
    side (write-backs, gradients, checkpoint data).
    """

    name: str
    h2d_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE, lo_open=True))
    d2h_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE, lo_open=True))
    latency_ns: float = field(default=0.0, metadata=_range(0, MAX_NS))
    energy_pj_per_byte: float = field(default=0.0, metadata=_range(0, 1e9))
    # software cost of one host-driven transfer (copy + synchronize); 0 for coherent access
    transfer_cost_ns: float = field(default=0.0, metadata=_range(0, MAX_NS))
    static_power_w: float = field(default=0.0, metadata=_range(0, 1e6))
    source: str = ""


@dataclass(frozen=True)
class LookupSpec:
    """Where embedding lookups (gather and pooling) run, and over which link."""

    location: str = field(default="gpu", metadata={"choices": LOCATIONS})
    link: str = ""  # empty: no link (everything on the training device)
    # prefetch the next batch's rows while this batch computes (pipelined training)
    overlap_with_compute: bool = False
    # TrainingCXL's relaxed lookup: read rows before the previous batch's updates land
    # (no read-after-write stall)
    relaxed: bool = False


@dataclass(frozen=True)
class PolicySpec:
    """Placement policy and its knobs (each knob names the policies it applies to)."""

    name: str = "static"
    tier: str = ""  # static: the tier that holds every table
    fast_tier: str = ""  # caches, hot, chunk
    backing_tier: str = ""
    capacity_bytes: float = field(default=0.0, metadata=_range(0, MAX_BYTES))  # 0: whole tier
    capacity_rows: int = field(default=0, metadata=_range(0, 1 << 62))  # wins when > 0
    warmup_batches: int = field(default=0, metadata=_range(0, 1 << 40))  # hot; 0 = oracle
    bypass: bool = True  # belady: a miss may be served without caching (optimal with bypass)
    chunk_rows: int = field(default=1024, metadata=_range(1, 1 << 40))  # chunk
    chunk_eviction: str = field(default="furthest", metadata={"choices": CHUNK_EVICTIONS})
    # chunk, the "tide": share of the cache budget left to embeddings in each phase
    forward_budget_fraction: float = field(default=1.0, metadata=_range(0, 1, lo_open=True))
    backward_budget_fraction: float = field(default=1.0, metadata=_range(0, 1, lo_open=True))
    optimizer_budget_fraction: float = field(default=1.0, metadata=_range(0, 1, lo_open=True))
    # tbe (FBGEMM's set-associative TBE cache): rows = int(Σ table rows x load factor),
    # rounded up to whole sets; 0: from capacity_rows or the byte budget
    cache_load_factor: float = field(default=0.0, metadata=_range(0, 1))
    # tbe: ways per set, a power of two (32: the CUDA warp; 64: AMD CDNA wavefronts)
    associativity: int = field(default=32, metadata={"choices_int": TBE_ASSOCIATIVITIES})
    cache_algorithm: str = field(default="lru", metadata={"choices": TBE_ALGORITHMS})  # tbe
    # ssd-tbe (FBGEMM's SSD TBE, replay/policies/ssd_tbe.py): L2's host DRAM in the backing
    # tier (TorchRec's l2_cache_size; 0: no L2), the tier of the RocksDB store, and the
    # store's write amplification (drive bytes per byte written; an ASSUMPTION, see there)
    l2_capacity_bytes: float = field(default=0.0, metadata=_range(0, MAX_BYTES))
    store_tier: str = ""
    ssd_write_amplification: float = field(default=4.0, metadata=_range(1, 1000))


@dataclass(frozen=True)
class ComputeSpec:
    """Dense compute per batch: a given time, or FLOPs at a stated rate; and its power."""

    seconds_per_batch: float = field(default=0.0, metadata=_range(0, 1e6))
    flops_per_sample: float = field(default=0.0, metadata=_range(0, 1e18))
    flops_per_s: float = field(default=0.0, metadata=_range(0, 1e21))
    other_seconds_per_batch: float = field(default=0.0, metadata=_range(0, 1e6))
    active_power_w: float = field(default=0.0, metadata=_range(0, 1e6))
    idle_power_w: float = field(default=0.0, metadata=_range(0, 1e6))
    # share of the compute time that is the optimizer step; the rest is forward + backward
    # (what an overlapped checkpoint write can hide behind)
    optimizer_fraction: float = field(default=0.0, metadata=_range(0, 1))
    source: str = ""
    # per GPU (replay/system/gpu_memory.py): TorchRec's train pipeline, and the dense
    # model's activations at their peak, given; at their defaults left out of `to_dict`
    pipeline: str = field(default="sparse-dist", metadata={"choices": PIPELINES})
    activations_bytes: float = field(default=0.0, metadata=_range(0, MAX_BYTES))


@dataclass(frozen=True)
class CheckpointSpec:
    """Checkpoint strategy and its knobs (DESIGN section 6; `replay.checkpoint`)."""

    strategy: str = "none"
    # every k batches; 0: the strategy's own rule (checkfreq) or interval_s
    interval_batches: int = field(default=0, metadata=_range(0, 1 << 40))
    # after this much failure-free training time (batches without stalls) since the last one
    interval_s: float = field(default=0.0, metadata=_range(0, 1e12))
    target: str = ""  # persistent tier written to; "": the first persistent tier
    link: str = ""  # link the data leaves the training device over ("": none)
    writers: int = field(default=1, metadata=_range(1, 1 << 20))
    writer_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))  # 0: no cap
    drives: int = field(default=0, metadata=_range(0, 1 << 20))  # 0: the target tier as is
    drive_write_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))
    # checkfreq, check-n-run: "": the first volatile tier neither the cache's nor on_device
    snapshot_tier: str = ""
    max_overhead_fraction: float = field(default=0.05, metadata=_range(0, 1, lo_open=True))
    increment: str = field(default="consecutive", metadata={"choices": INCREMENTS})
    full_threshold_fraction: float = field(default=0.5, metadata=_range(0, 1, lo_open=True))
    quantize_bits: int = field(default=0, metadata={"choices_int": QUANTIZE_BITS})
    dense_interval_batches: int = field(default=1, metadata=_range(1, 1 << 40))  # trainingcxl K
    # check-n-run: write each increment synchronously to the target (no snapshot)
    synchronous: bool = False
    # trainingcxl: log beside the dense compute (only the excess stalls); false: after
    # the batch, all of it stalls (TrainingCXL's PCIe-NDP and CXL-D steps)
    beside_compute: bool = True
    source: str = ""
    # a cluster's node-local checkpoints: buddy copies on other nodes (0: none; they die
    # with their node); written over the NICs at checkpoint time (`replay.checkpoint.store`)
    replicas: int = field(default=0, metadata=_range(0, MAX_GPUS))
    # where a cluster's checkpoints go ([checkpoint.store]); None: not given (a cluster
    # writes to its nodes' drives, `local-nvme`; one GPU: `target` as before)
    store: CheckpointStoreSpec | None = None


STORE_KINDS = ("local-nvme", "shared-fs", "object-store")
STORE_BANDWIDTHS = (
    "aggregate_write_bw_bytes_per_s",
    "per_client_write_bw_bytes_per_s",
    "aggregate_read_bw_bytes_per_s",
    "per_client_read_bw_bytes_per_s",
)
# Defaults of a store kind where the table does not give a key (each cited; an
# ASSUMPTION where no source gives the number). local-nvme: the cluster's own drives
# ([cluster] drives_per_node x drive_*_bw_bytes_per_s), no shared cap.
STORE_DEFAULTS: dict[str, dict[str, Any]] = {
    "local-nvme": {},
    "shared-fs": {
        # a Lustre/GPFS-class parallel file system: OLCF Summit's Alpine (IBM Spectrum
        # Scale, i.e. GPFS), 2.5 TB/s aggregate sequential I/O (OLCF Summit user guide,
        # "Alpine"); its read and write alike
        "aggregate_write_bw_bytes_per_s": 2.5e12,
        "aggregate_read_bw_bytes_per_s": 2.5e12,
        # ASSUMPTION: one client reaches about one 100 Gb/s EDR port's worth, 12.5 GB/s
        "per_client_write_bw_bytes_per_s": 12.5e9,
        "per_client_read_bw_bytes_per_s": 12.5e9,
        "latency_s": 1e-3,  # ASSUMPTION: a file create/open through the metadata server
        "source": "OLCF Summit user guide (Alpine, IBM Spectrum Scale: 2.5 TB/s aggregate); "
        "per-client caps and latency ASSUMPTIONs",
    },
    "object-store": {
        # Amazon S3 scales with the request rate per partitioned prefix (3,500 PUT and
        # 5,500 GET per second each, "Best practices design patterns: optimizing Amazon S3
        # performance"): no aggregate cap at a training job's scale (0: none)
        "aggregate_write_bw_bytes_per_s": 0.0,
        "aggregate_read_bw_bytes_per_s": 0.0,
        # ASSUMPTION: parallel multipart uploads saturate a 100 Gb/s instance network, as
        # AWS's S3 performance guidelines describe for 100 Gb/s instances: 12.5 GB/s a node
        "per_client_write_bw_bytes_per_s": 12.5e9,
        "per_client_read_bw_bytes_per_s": 12.5e9,
        # first-byte latency of S3 requests, 100-200 ms (same guidelines, "timeouts and
        # retries for latency-sensitive applications"): the low end, once per checkpoint
        "latency_s": 0.1,
        "source": "Amazon S3 performance guidelines (request rates per prefix, first-byte "
        "latency 100-200 ms); per-client throughput an ASSUMPTION (a 100 Gb/s instance)",
    },
}


@dataclass(frozen=True)
class CheckpointStoreSpec:
    """Where a cluster's checkpoints go (`[checkpoint.store]`; `replay.checkpoint.store`).

    `local-nvme`: each node's own drives (`[cluster]` drives_per_node x drive bandwidths);
    they die with their node (copies: `checkpoint.replicas`). `shared-fs` (a Lustre/GPFS
    class parallel file system) and `object-store` (S3 class): reached over each node's
    NICs, each node at most `per_client_*`, all nodes together at most `aggregate_*`
    (0: no such cap); `latency_s` once per checkpoint write or read. Bandwidths in
    bytes/s; the kind's defaults (`STORE_DEFAULTS`, cited) fill the keys not given.
    """

    kind: str = field(default="local-nvme", metadata={"choices": STORE_KINDS})
    aggregate_write_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))
    per_client_write_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))
    aggregate_read_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))
    per_client_read_bw_bytes_per_s: float = field(default=0.0, metadata=_range(0, MAX_RATE))
    latency_s: float = field(default=0.0, metadata=_range(0, 3600))
    capacity_bytes: float = field(default=0.0, metadata=_range(0, MAX_BYTES))  # 0: unbounded
    source: str = ""

    @property
    def shared(self) -> bool:
        """Whether the checkpoint leaves the nodes (survives a node's failure)."""
        return self.kind != "local-nvme"


@dataclass(frozen=True)
class FailureSpec:
    """Failure model: exponential draws with a mean time between failures, or given times."""

    mtbf_s: float = field(default=0.0, metadata=_range(0, 1e15, lo_open=True))  # unset: off
    draws: int = field(default=1000, metadata=_range(1, 10_000_000))
    seed: int = field(default=0, metadata=_range(0, 2**63 - 1))
    times_s: tuple[float, ...] = ()  # explicit failure times on the wall clock
    # ASSUMPTION: a minute to reschedule the job and reload the framework (set yours)
    restart_s: float = field(default=60.0, metadata=_range(0, 1e9))
    horizon_s: float = field(default=0.0, metadata=_range(0, 1e15))  # 0: the replayed time
    source: str = ""

    @property
    def enabled(self) -> bool:
        return self.mtbf_s > 0 or bool(self.times_s)


@dataclass(frozen=True)
class ModelSpec:
    """What one embedding row weighs: fp32 values plus optimizer state."""

    embedding_dim: int = field(default=0, metadata=_range(0, 1 << 16))  # 0: the trace's
    optimizer: str = field(default="sgd", metadata={"choices": OPTIMIZERS})
    dense_params: int = field(default=0, metadata=_range(0, 1 << 50))


@dataclass(frozen=True)
class ClusterSpec:
    """Many GPUs: nodes of GPUs joined by an intra-node fabric, nodes joined by NICs, and
    the drives of each node; the sharding of the tables across the GPUs.

    Bandwidths are peak, per direction, in bytes/s: `intra_node_bw_bytes_per_s` per GPU
    (what one GPU can send while it receives as much), `nic_bw_bytes_per_s` per NIC; the
    drives' per drive. Latencies in seconds per message. `gpu_memory_bytes` is one GPU's
    memory (HBM); the tiers describe one GPU's memory hierarchy as before, each GPU its own.

    The defaults are one NVIDIA DGX H100 node, the `dgx-h100` preset of
    `replay/system/clusters.toml` (sources there): 8 x H100 80 GB, NVLink 4 (900 GB/s per
    GPU both ways, 450 GB/s each way; H100 datasheet, DGX H100 user guide), 8 single-port
    ConnectX-7 at 400 Gb/s (DGX H100 user guide; NVIDIA DGX BasePOD reference architecture),
    8 x 3.84 TB U.2 NVMe drives (same). The drives' bandwidths and both latencies are
    stated ASSUMPTIONs there. `sharding` is TorchRec's sharding type for every table, or
    `auto` (the sharder; `auto-uneven` its replay-only mode); `sharding_file` a plan in
    JSON (`{"tables": [{"table", "type", "ranks"}]}`, or TorchRec's plan in the form of
    `replay export torchrec-plan`), read by the cluster replay, not here.
    """

    nodes: int = field(default=1, metadata=_range(1, MAX_GPUS))
    gpus_per_node: int = field(default=8, metadata=_range(1, MAX_GPUS_PER_NODE))
    gpu_memory_bytes: float = field(default=80e9, metadata=_range(0, MAX_BYTES, lo_open=True))
    intra_node_fabric: str = field(default="nvlink4", metadata={"choices": FABRICS})
    intra_node_bw_bytes_per_s: float = field(
        default=450e9, metadata=_range(0, MAX_RATE, lo_open=True)
    )
    intra_node_latency_s: float = field(default=2e-6, metadata=_range(0, 1))
    nics_per_node: int = field(default=8, metadata=_range(0, MAX_GPUS_PER_NODE))
    nic_bw_bytes_per_s: float = field(default=50e9, metadata=_range(0, MAX_RATE))
    inter_node_latency_s: float = field(default=5e-6, metadata=_range(0, 1))
    drives_per_node: int = field(default=8, metadata=_range(0, 1 << 10))
    drive_capacity_bytes: float = field(default=3.84e12, metadata=_range(0, MAX_BYTES))
    drive_read_bw_bytes_per_s: float = field(default=6.8e9, metadata=_range(0, MAX_RATE))
    drive_write_bw_bytes_per_s: float = field(default=4.0e9, metadata=_range(0, MAX_RATE))
    sharding: str = field(default="auto", metadata={"choices": SHARDINGS})
    sharding_file: str = ""  # a sharding plan (JSON); "": from `sharding`
    # each table's kernel (replay/engine/kernels.py): `auto` chooses per table, or one
    # kernel for every table; a cached kernel's load factor (cache rows / rows, TorchRec's
    # CacheParams.load_factor, 0 < clf < 1), 0: chosen from the trace's curves
    kernel: str = field(default="auto", metadata={"choices": CLUSTER_KERNELS})
    cache_load_factor: float = field(default=0.0, metadata=_range(0, 1))
    # the all-to-all: TorchRec's collectives per sharding type, or the sparse lower bound
    # (replay/engine/collectives.py); the byte widths of the ids and lengths TorchRec's
    # input all-to-all sends (int64 ids, int32 lengths: TorchRec's RandomRecDataset)
    all_to_all_model: str = field(default="torchrec", metadata={"choices": ALL_TO_ALL_MODELS})
    index_bytes: int = field(default=8, metadata={"choices_int": (4, 8)})
    length_bytes: int = field(default=4, metadata={"choices_int": (4, 8)})
    # `replay plan`: TorchRec's planner beside ours, with these proposers (when installed)
    torchrec_proposer: str = field(default="default", metadata={"choices": TORCHREC_PROPOSERS})
    # ... run only where tables x GPUs is at most this: TorchRec's greedy partitioner
    # deep-copies its options per table and GPU, so 856 tables on 128 GPUs (meta-2021)
    # ran over 14 min in its planner without finishing (2-core VM), where the plan takes 2
    torchrec_max_table_gpus: int = field(default=8192, metadata=_range(1, 1 << 40))
    preset: str = ""  # the clusters.toml entry its defaults came from ("": these)
    source: str = ""

    @property
    def world_size(self) -> int:
        """GPUs in all: nodes x GPUs per node (ranks 0 .. world_size - 1, node-major)."""
        return self.nodes * self.gpus_per_node


CLUSTER_KERNEL_DEFAULTS = {"kernel": "auto", "cache_load_factor": 0.0}


@dataclass(frozen=True)
class SystemSpec:
    name: str
    tiers: tuple[TierSpec, ...]
    links: tuple[LinkSpec, ...] = ()
    lookup: LookupSpec = field(default_factory=LookupSpec)
    policy: PolicySpec = field(default_factory=PolicySpec)
    compute: ComputeSpec = field(default_factory=ComputeSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    failures: FailureSpec = field(default_factory=FailureSpec)
    description: str = ""
    source: str = ""
    # None: one GPU, as every system was before [cluster] existed (no key in to_dict)
    cluster: ClusterSpec | None = None

    def tier(self, name: str) -> TierSpec:
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(name)

    def link(self, name: str) -> LinkSpec:
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; `replay.engine.systems.system_from_dict` turns it back into this spec."""
        data = asdict(self)
        data["tiers"] = {
            t["name"]: {k: v for k, v in t.items() if k != "name"} for t in data["tiers"]
        }
        data["links"] = {
            lk["name"]: {k: v for k, v in lk.items() if k != "name"} for lk in data["links"]
        }
        if data["cluster"] is None:  # one GPU: the dict (and every result) as before
            del data["cluster"]
        else:  # the kernel knobs at their defaults: a cluster's results as before them
            for key, default in CLUSTER_KERNEL_DEFAULTS.items():
                if data["cluster"][key] == default:
                    del data["cluster"][key]
        for key, default in COMPUTE_DEFAULTS.items():  # results as before the knobs
            if data["compute"][key] == default:
                del data["compute"][key]
        ck = data["checkpoint"]
        if ck["store"] is None:  # not given: the dict as before [checkpoint.store] existed
            del ck["store"]
        else:  # a cap of 0 is "none": left out, as a bandwidth of 0 given is refused
            ck["store"] = {
                k: v for k, v in ck["store"].items() if not (k in STORE_BANDWIDTHS and v == 0)
            }
        if ck["replicas"] == 0:
            del ck["replicas"]
        if data["policy"]["name"] != "ssd-tbe":  # its knobs: other results as before
            for key in SSD_TBE_KNOBS:
                del data["policy"][key]
        return data


# -- validation -----------------------------------------------------------------------


_TOP_KEYS = {
    "name",
    "description",
    "source",
    "tiers",
    "links",
    "lookup",
    "policy",
    "compute",
    "model",
    "checkpoint",
    "failures",
    "cluster",
}


def build_system(data: Any, where: str = "system") -> SystemSpec:
    """Validate plain data into a SystemSpec, cross-checking the tier and link names it
    refers to. Not the policy's and the checkpoint strategy's names and knobs: their
    registries sit above this layer (`replay.engine.systems.system_from_dict` checks
    them too)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise unknown_key(where, unknown[0], _TOP_KEYS)
    for key in ("name", "description", "source"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{where}.{key}: expected a string, got {data[key]!r}")
    tiers = _named(data.get("tiers", {}), TierSpec, "tiers", f"{where}.tiers")
    if not tiers:
        raise ConfigError(f"{where}: needs at least one [tiers.NAME]")
    links = _named(data.get("links", {}), LinkSpec, "links", f"{where}.links")
    spec = SystemSpec(
        name=data.get("name", "custom"),
        tiers=tiers,
        links=links,
        lookup=_build(LookupSpec, data.get("lookup", {}), f"{where}.lookup"),
        policy=_build(PolicySpec, data.get("policy", {}), f"{where}.policy"),
        compute=_build(ComputeSpec, data.get("compute", {}), f"{where}.compute"),
        model=_build(ModelSpec, data.get("model", {}), f"{where}.model"),
        checkpoint=build_checkpoint(data.get("checkpoint", {}), f"{where}.checkpoint"),
        failures=_build(FailureSpec, data.get("failures", {}), f"{where}.failures"),
        description=data.get("description", ""),
        source=data.get("source", ""),
        cluster=build_cluster(data["cluster"], f"{where}.cluster") if "cluster" in data else None,
    )
    _cross_check(spec, where)
    return spec


def build_checkpoint(data: Any, where: str = "checkpoint") -> CheckpointSpec:
    """Validate `[checkpoint]`, its `[checkpoint.store]` table included (`build_store`)."""
    if not isinstance(data, dict) or "store" not in data:
        return _build(CheckpointSpec, data, where)
    rest = {k: v for k, v in data.items() if k != "store"}
    store = build_store(data["store"], f"{where}.store")
    return dataclasses.replace(_build(CheckpointSpec, rest, where), store=store)


def build_store(data: Any, where: str = "checkpoint.store") -> CheckpointStoreSpec:
    """Validate a `[checkpoint.store]` table: its kind's defaults (`STORE_DEFAULTS`) under
    the keys given; a bandwidth given as 0 is refused (a store that takes no bytes)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys, got {data!r}")
    kind = data.get("kind", "local-nvme")
    if not isinstance(kind, str) or kind not in STORE_KINDS:
        raise ConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(STORE_KINDS)}")
    store = _build(CheckpointStoreSpec, {**STORE_DEFAULTS[kind], **data}, where)
    for key in STORE_BANDWIDTHS:
        if key in data and getattr(store, key) <= 0:
            raise ConfigError(
                f"{where}.{key}: a store with zero bandwidth takes no checkpoint; give a "
                "number of bytes/s above 0 (leave the key out for no such cap)"
            )
    if store.shared and not any(getattr(store, k) > 0 for k in STORE_BANDWIDTHS if "write" in k):
        raise ConfigError(
            f"{where}: a {kind} store needs a write bandwidth "
            "(aggregate_write_bw_bytes_per_s or per_client_write_bw_bytes_per_s above 0)"
        )
    return store


def build_cluster(data: Any, where: str = "cluster") -> ClusterSpec:
    """Validate a `[cluster]` table: its `preset` (if any) from clusters.toml first, the
    table's own keys over it, then the checks no single field's range can make."""
    from replay.system.presets import cluster_preset_data, cluster_presets

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys, got {data!r}")
    preset = data.get("preset", "")
    if not isinstance(preset, str):
        raise ConfigError(f"{where}.preset: expected a preset name, got {preset!r}")
    if preset:
        if preset not in cluster_presets():
            raise ConfigError(
                f"{where}.preset: unknown cluster preset {preset!r}"
                f"{did_you_mean(preset, cluster_presets())} (known: "
                f"{', '.join(cluster_presets())})"
            )
        data = {**cluster_preset_data(preset), **data}
    c = _build(ClusterSpec, data, where)
    if c.world_size > MAX_GPUS:
        raise ConfigError(
            f"{where}: {c.nodes} nodes x {c.gpus_per_node} GPUs = {c.world_size:,} GPUs, "
            f"more than {MAX_GPUS:,}"
        )
    if c.nodes > 1 and c.nics_per_node == 0:
        raise ConfigError(f"{where}.nics_per_node: {c.nodes} nodes need at least one NIC each")
    if c.nics_per_node > 0 and c.nic_bw_bytes_per_s <= 0:
        raise ConfigError(f"{where}.nic_bw_bytes_per_s: must be > 0 with nics_per_node > 0")
    for key in ("drive_read_bw_bytes_per_s", "drive_write_bw_bytes_per_s"):
        if c.drives_per_node > 0 and getattr(c, key) <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0 with drives_per_node > 0")
    if c.cache_load_factor >= 1:
        raise ConfigError(
            f"{where}.cache_load_factor: {c.cache_load_factor:g} caches the whole table; "
            "TorchRec's fused_uvm_caching takes 0 < clf < 1 (use cluster.kernel=hbm), "
            "0 chooses it from the trace's curves"
        )
    if c.sharding_file and c.sharding != "auto":
        raise ConfigError(
            f"{where}: give sharding = {c.sharding!r} or sharding_file, not both "
            "(a sharding plan names each table's sharding)"
        )
    return c


def _cross_check(spec: SystemSpec, where: str) -> None:
    tier_names = {t.name for t in spec.tiers}
    link_names = {lk.name for lk in spec.links}
    if spec.lookup.link and spec.lookup.link not in link_names:
        raise ConfigError(f"{where}.lookup.link: no link named {spec.lookup.link!r}")
    c = spec.compute
    if c.seconds_per_batch > 0 and c.flops_per_sample > 0:
        raise ConfigError(f"{where}.compute: give seconds_per_batch or flops_per_sample, not both")
    if c.flops_per_sample > 0 and c.flops_per_s <= 0:
        raise ConfigError(f"{where}.compute.flops_per_s: must be > 0 with flops_per_sample")
    ck = spec.checkpoint
    # buddy copies are a cluster's (one GPU's plan sections drop cluster.* but keep them)
    nodes = spec.cluster.nodes if spec.cluster is not None else 0
    if spec.cluster is not None and ck.replicas >= nodes and ck.replicas > 0:
        raise ConfigError(
            f"{where}.checkpoint.replicas: {ck.replicas} buddy copies need {ck.replicas} "
            f"other nodes; the job has {nodes} node{'s' if nodes != 1 else ''}, so at most "
            f"{nodes - 1} (more replicas than nodes)"
        )
    if ck.link and ck.link not in link_names:
        raise ConfigError(f"{where}.checkpoint.link: no link named {ck.link!r}")
    for key in ("target", "snapshot_tier"):
        name = getattr(ck, key)
        if name and name not in tier_names:
            raise ConfigError(f"{where}.checkpoint.{key}: no tier named {name!r}")


def embedding_dim(system: SystemSpec, workload: dict[str, Any]) -> int:
    """The rows' width: the system's `model.embedding_dim`, else the trace's workload's. A
    trace ingested from click logs names none, and the message says how to give it."""
    dim = system.model.embedding_dim or int(workload.get("embedding_dim", 0) or 0)
    if dim <= 0:
        raise ConfigError(
            "model.embedding_dim: the trace names no embedding dimension (an ingested "
            "trace has none): give it with --set model.embedding_dim=N or in the "
            "system's [model]"
        )
    return dim


__all__ = [
    "BYTES_PER_VALUE",
    "CLUSTER_KERNELS",
    "KERNELS",
    "STORE_KINDS",
    "CheckpointSpec",
    "CheckpointStoreSpec",
    "ClusterSpec",
    "ComputeSpec",
    "FailureSpec",
    "LinkSpec",
    "LookupSpec",
    "ModelSpec",
    "PolicySpec",
    "SystemSpec",
    "TierSpec",
    "apply_overrides",
    "build_checkpoint",
    "build_cluster",
    "build_store",
    "build_system",
    "embedding_dim",
    "load_system_data",
    "optimizer_bytes_per_row",
    "parse_value",
]
