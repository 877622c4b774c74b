"""A training step's time by parts, per GPU, and how TorchRec's train pipelines overlap
them.

Placement. Engine arithmetic, pure: numbers in, seconds out, nothing written. The parts
come from the cluster replay's per-GPU columns (`replay.engine.step_cluster`) or from a
benchmark's stated setup (`replay.engine.step_emo`); `plan.json`'s `cluster.step` is
`step_document`'s output.

Parts of one GPU's step (seconds per batch), each from bytes over a bandwidth:

- `input_copy_s`: the batch's ids, lengths and weights copied host to GPU (the pipeline's
  memcpy stream) over PCIe.
- `input_dist_s`: TorchRec's input all-to-all of ids and lengths
  (`replay.engine.collectives`, phase `input`).
- `tbe_forward_s`: the TBE forward of the lookups served from HBM, TorchRec's estimator's
  shape (`torchrec/distributed/planner/estimator/estimator.py` 381-431, torchrec 1.8.0):
  (ids read + rows read + pooled outputs written) / HBM bandwidth, x 1.1 for weighted
  features (`WEIGHTED_KERNEL_MULTIPLIER`, `planner/constants.py` 44).
- `tbe_backward_s`: 2 x the HBM forward (`BWD_COMPUTE_MULTIPLIER`, `constants.py` 42,
  applied at `estimator.py` 466), the fused optimizer's update included.
- `uvm_forward_s`: lookups of rows that stay in host memory (kernel `uvm`; a cached
  kernel's rows that could not be inserted), read over PCIe: lookups x row bytes / h2d.
- `uvm_backward_s`: their unique rows read and written back by the fused backward, both
  directions at once (PCIe is full duplex): unique rows x row bytes / min(h2d, d2h).
- `prefetch_s`: a cached kernel's fills (rows h2d) and the dirty rows they evict (d2h),
  full duplex: max(fills / h2d, evictions / d2h) x row bytes.
- `drive_s`: the SSD kernel's reads from the node's drives and its writes (x the write
  amplification), at the GPU's share of the node's drives.
- `output_dist_forward_s`, `output_dist_backward_s`: the pooled embeddings' collectives
  and their gradients (`replay.engine.collectives`, phases `forward` and `backward`).
- `dense_forward_s`, `dense_backward_s`: `[compute]`, the backward twice the forward
  (2N and 4N FLOPs per parameter and sample: Kaplan et al., "Scaling laws for neural
  language models", 2020, section 2.1), the optimizer step with the backward.
- `allreduce_s`: DDP's all-reduce of the dense gradient.
- `other_s`: `compute.other_seconds_per_batch`.

Overlap (which stage runs beside which), read in torchrec 1.8.0's
`distributed/train_pipeline/train_pipelines.py`:

- `base` (`TrainPipelineBase`, 260-421): the default stream runs the forward (input
  all-to-all, cache fills and lookups inside it), backward and optimizer; only the next
  batch's host-to-GPU copy runs beside it, on the memcpy stream, issued after the
  backward (`progress`, 398-411): hidden behind the backward and optimizer.
- `sparse-dist` (`TrainPipelineSparseDist`, 530-917): batch i+2's copy (memcpy stream)
  and batch i+1's input all-to-all (data-dist stream) run beside batch i's forward and
  backward: hidden behind the whole default stream. The cache fills run inside the TBE
  forward (FBGEMM prefetches in `forward` when nothing was prefetched).
- `prefetch-sparse-dist` (`PrefetchTrainPipelineSparseDist`, 1965-2253): as
  `sparse-dist`, and batch i+1's cache prefetch runs on a prefetch stream issued after
  batch i's forward; FBGEMM makes the TBE backward of batch i wait for it
  (`split_table_batched_embeddings_ops_training.py` `_update_cache_counter_and_locations`,
  FBGEMM PR #1893: "the backward of the rest of the module can still overlap with
  prefetch"), so it hides behind the dense backward and the output all-to-all's backward.
  `prefetch_overlap` (default 1, the design) is the share of that window it may use;
  TorchRec PR #4099's trace of its EMO benchmark shows the TBE backward waiting the whole
  prefetch there (0 in that run: `replay.engine.step_emo`, docs/step_time.md).

In every class DDP's all-reduce runs beside the dense backward (gradient buckets reduced
as they are ready: Li et al., "PyTorch Distributed", VLDB 2020): exposed beyond it only.
A side stream's work is hidden when it ends within its window; the rest is exposed and
added. ASSUMPTIONS: streams that overlap do not slow each other (no shared SMs, HBM or
PCIe between them); stages on one stream add. The step is the slowest GPU's: every
collective waits for its last rank.

Bandwidths: `constants_from_system` takes the HBM from the system's on-device tier, PCIe
from its first link (each direction), the drives from `[cluster]` (a GPU's share:
drives per node x bandwidth / GPUs per node). The EMO benchmark's constants are in
`replay.engine.step_emo`, with theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from replay.errors import ConfigError
from replay.system.gpu_memory import KERNELS, PIPELINES

DEFAULT_PIPELINE = "sparse-dist"
BWD_COMPUTE_MULTIPLIER = 2.0  # torchrec planner/constants.py 42
WEIGHTED_KERNEL_MULTIPLIER = 1.1  # torchrec planner/constants.py 44
BACKWARD_TO_FORWARD_FLOPS = 2.0  # Kaplan et al. 2020, section 2.1: 2N forward, 4N backward
OUTPUT_VALUE_BYTES = 4  # pooled embeddings in fp32 (no quantized comms)

PARTS = (
    "input_copy_s",
    "input_dist_s",
    "prefetch_s",
    "drive_s",
    "tbe_forward_s",
    "uvm_forward_s",
    "output_dist_forward_s",
    "dense_forward_s",
    "dense_backward_s",
    "output_dist_backward_s",
    "tbe_backward_s",
    "uvm_backward_s",
    "allreduce_s",
    "other_s",
)


@dataclass(frozen=True)
class StepConstants:
    """Bandwidths in bytes/s (module docstring for their sources)."""

    hbm_bw_bytes_per_s: float
    h2d_bw_bytes_per_s: float
    d2h_bw_bytes_per_s: float
    drive_read_bw_bytes_per_s: float = 0.0
    drive_write_bw_bytes_per_s: float = 0.0
    drive_write_amplification: float = 1.0
    index_bytes: int = 8
    prefetch_overlap: float = 1.0


@dataclass(frozen=True)
class KernelLoad:
    """One GPU's lookups of one kernel per batch (rows and lookups as counts)."""

    kernel: str
    lookups: float
    bags: float  # pooled outputs the GPU writes (samples x features it serves)
    dim: float  # values a bag's output holds
    row_bytes: float
    host_lookups: float = 0.0  # read from host memory in the forward (not in HBM)
    host_rows: float = 0.0  # unique rows the backward updates in host memory
    fetched_rows: float = 0.0  # rows filled into the HBM cache
    evicted_rows: float = 0.0  # dirty rows written back from it
    drive_read_rows: float = 0.0
    drive_write_rows: float = 0.0
    weighted: bool = False

    def __post_init__(self) -> None:
        if self.kernel not in KERNELS:
            raise ConfigError(f"kernel: {self.kernel!r} is not one of {', '.join(KERNELS)}")


@dataclass(frozen=True)
class GpuLoad:
    """One GPU's step inputs: its kernels' loads and the stages' seconds given."""

    kernels: tuple[KernelLoad, ...]
    input_copy_bytes: float = 0.0
    input_dist_s: float = 0.0
    output_dist_forward_s: float = 0.0
    output_dist_backward_s: float = 0.0
    dense_forward_s: float = 0.0
    dense_backward_s: float = 0.0
    allreduce_s: float = 0.0
    other_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def locked_inserts(unique: float, misses: float, slots: float) -> float:
    """Rows a batch's prefetch inserts, on average, under FBGEMM's prefetch pipeline: the
    current batch's cached rows and the next batch's hits are locked while it prefetches
    (`lxu_cache_locking_counter`, FBGEMM PR #1883; `lru_cache_insert_kernel` in
    `src/split_embeddings_cache/lru_cache_populate.cu` skips a locked slot), so it inserts
    at most the slots neither holds; `unique` rows a batch, `misses` of them not cached,
    `slots` the cache's. The steady state is a fixed point or a cycle of two batches (a
    full insert leaves little room for the next): the mean of the last two. ASSUMPTION:
    sets fill evenly (the per-set spread is not modelled)."""
    if slots <= 0 or misses <= 0:
        return 0.0
    hits = max(unique - misses, 0.0)
    held = unique
    seen = []
    for _ in range(64):
        free = slots - held - hits * (1.0 - min(held / slots, 1.0))
        got = min(misses, max(free, 0.0))
        seen.append(got)
        held = hits + got
    return (seen[-1] + seen[-2]) / 2


def check_pipeline(pipeline: str) -> str:
    if pipeline not in PIPELINES:
        raise ConfigError(f"compute.pipeline: {pipeline!r} is not one of {', '.join(PIPELINES)}")
    return pipeline


def kernel_parts(load: KernelLoad, c: StepConstants) -> dict[str, float]:
    """The seconds one kernel's load adds to each part (module docstring)."""
    hbm_lookups = max(load.lookups - load.host_lookups, 0.0)
    weight = WEIGHTED_KERNEL_MULTIPLIER if load.weighted else 1.0
    hbm_bytes = (
        load.lookups * c.index_bytes
        + hbm_lookups * load.row_bytes
        + load.bags * load.dim * OUTPUT_VALUE_BYTES
    )
    fwd = weight * hbm_bytes / c.hbm_bw_bytes_per_s
    duplex = min(c.h2d_bw_bytes_per_s, c.d2h_bw_bytes_per_s)
    drive = 0.0
    if load.drive_read_rows:
        drive += (
            load.drive_read_rows
            * load.row_bytes
            / _positive(c.drive_read_bw_bytes_per_s, "drive read bandwidth")
        )
    if load.drive_write_rows:
        drive += (
            load.drive_write_rows
            * load.row_bytes
            * c.drive_write_amplification
            / _positive(c.drive_write_bw_bytes_per_s, "drive write bandwidth")
        )
    return {
        "tbe_forward_s": fwd,
        "tbe_backward_s": BWD_COMPUTE_MULTIPLIER * fwd,
        "uvm_forward_s": load.host_lookups * load.row_bytes / c.h2d_bw_bytes_per_s,
        "uvm_backward_s": load.host_rows * load.row_bytes / duplex,
        "prefetch_s": max(
            load.fetched_rows * load.row_bytes / c.h2d_bw_bytes_per_s,
            load.evicted_rows * load.row_bytes / c.d2h_bw_bytes_per_s,
        ),
        "drive_s": drive,
    }


def _positive(value: float, what: str) -> float:
    if not value > 0:
        raise ConfigError(f"step time: the SSD kernel reads drives but the {what} is 0")
    return float(value)


def gpu_parts(load: GpuLoad, c: StepConstants) -> dict[str, float]:
    """Every part of `PARTS` for one GPU, before any overlap."""
    parts = dict.fromkeys(PARTS, 0.0)
    for k in load.kernels:
        for name, s in kernel_parts(k, c).items():
            parts[name] += s
    parts["input_copy_s"] = load.input_copy_bytes / c.h2d_bw_bytes_per_s
    for name in ("input_dist_s", "output_dist_forward_s", "output_dist_backward_s",
                 "dense_forward_s", "dense_backward_s", "allreduce_s", "other_s"):  # fmt: skip
        parts[name] = float(getattr(load, name))
    return parts


def overlap(
    parts: dict[str, float], pipeline: str, prefetch_overlap: float = 1.0
) -> dict[str, Any]:
    """The step of one GPU under `pipeline` (module docstring): the default stream's
    stages added, each side stream's work past its window exposed. Returns
    `step_time_s`, `critical_s` (the default stream alone), `hidden_s` and `exposed_s`
    per overlapped part, and the windows."""
    check_pipeline(pipeline)
    p = parts
    fills = p["prefetch_s"] + p["drive_s"]
    forward = p["tbe_forward_s"] + p["uvm_forward_s"] + p["output_dist_forward_s"]
    forward += p["dense_forward_s"]
    rest_backward = p["dense_backward_s"] + p["output_dist_backward_s"]
    backward = rest_backward + p["tbe_backward_s"] + p["uvm_backward_s"]
    allreduce_exposed = max(0.0, p["allreduce_s"] - p["dense_backward_s"])
    hidden = {"allreduce_s": p["allreduce_s"] - allreduce_exposed}
    exposed = {"allreduce_s": allreduce_exposed}
    critical = forward + backward + p["other_s"] + allreduce_exposed
    windows: dict[str, float] = {}
    if pipeline == "base":
        critical += p["input_dist_s"] + fills
        windows["input_copy_s"] = backward + p["other_s"]
        side = {"input_copy_s": p["input_copy_s"]}
    else:
        side = {"input_copy_s": p["input_copy_s"], "input_dist_s": p["input_dist_s"]}
        if pipeline == "prefetch-sparse-dist":
            windows["prefetch_s"] = max(0.0, min(prefetch_overlap, 1.0)) * rest_backward
            # the TBE backward waits for the prefetch: what outlasts its window delays
            # the default stream
            pre_exposed = max(0.0, fills - windows["prefetch_s"])
            critical += pre_exposed
            hidden["prefetch_s"], exposed["prefetch_s"] = fills - pre_exposed, pre_exposed
        else:
            critical += fills
        for name in ("input_copy_s", "input_dist_s"):
            windows[name] = critical
    step = critical
    for name in ("input_copy_s", "input_dist_s"):
        if name not in side:
            continue
        over = max(0.0, side[name] - windows[name])
        hidden[name], exposed[name] = side[name] - over, over
        step = max(step, critical + over)
    return {
        "step_time_s": float(step),
        "critical_s": float(critical),
        "hidden_s": {k: float(v) for k, v in hidden.items()},
        "exposed_s": {k: float(v) for k, v in exposed.items()},
        "windows_s": {k: float(v) for k, v in windows.items()},
    }


OVERLAP_RULES = {
    "base": "TrainPipelineBase: the input all-to-all and cache fills in the forward; only "
    "the next batch's host-to-GPU copy runs beside the backward and optimizer",
    "sparse-dist": "TrainPipelineSparseDist: batch i+2's copy and batch i+1's input "
    "all-to-all run beside batch i's forward and backward; cache fills in the forward",
    "prefetch-sparse-dist": "PrefetchTrainPipelineSparseDist: as sparse-dist, and batch "
    "i+1's cache prefetch beside batch i's dense backward and output all-to-all backward "
    "(FBGEMM's TBE backward waits for it)",
}


def step(loads: Sequence[GpuLoad], c: StepConstants, pipeline: str) -> dict[str, Any]:
    """Every GPU's parts and step; the step is the slowest GPU's."""
    check_pipeline(pipeline)
    per_gpu = []
    for rank, load in enumerate(loads):
        parts = gpu_parts(load, c)
        out = overlap(parts, pipeline, c.prefetch_overlap)
        per_gpu.append({"rank": rank, "parts_s": parts, **out, **load.extra})
    worst = max(range(len(per_gpu)), key=lambda r: per_gpu[r]["step_time_s"], default=None)
    return {"per_gpu": per_gpu, "worst_rank": worst}


def step_document(
    loads: Sequence[GpuLoad], c: StepConstants, pipeline: str, basis: str
) -> dict[str, Any]:
    """plan.json's `cluster.step`: the slowest GPU's `parts_s`, its `overlap` (pipeline,
    rule, hidden and exposed seconds), `step_time_s`, `worst_rank`, `per_gpu` (rank,
    step_time_s, critical_s, parts_s) and `basis`."""
    out = step(loads, c, pipeline)
    worst = out["worst_rank"]
    if worst is None:
        return {"parts_s": dict.fromkeys(PARTS, 0.0), "overlap": {"pipeline": pipeline,
                "rule": OVERLAP_RULES[pipeline], "hidden_s": {}, "exposed_s": {}},
                "step_time_s": 0.0, "worst_rank": None, "per_gpu": [], "basis": basis}  # fmt: skip
    w = out["per_gpu"][worst]
    return {
        "parts_s": w["parts_s"],
        "overlap": {
            "pipeline": pipeline,
            "rule": OVERLAP_RULES[pipeline],
            "hidden_s": w["hidden_s"],
            "exposed_s": w["exposed_s"],
            "windows_s": w["windows_s"],
        },
        "step_time_s": w["step_time_s"],
        "worst_rank": worst,
        "per_gpu": [
            {
                "rank": g["rank"],
                "step_time_s": g["step_time_s"],
                "critical_s": g["critical_s"],
                "parts_s": g["parts_s"],
            }
            for g in out["per_gpu"]
        ],
        "constants": {
            "hbm_bw_bytes_per_s": c.hbm_bw_bytes_per_s,
            "h2d_bw_bytes_per_s": c.h2d_bw_bytes_per_s,
            "d2h_bw_bytes_per_s": c.d2h_bw_bytes_per_s,
            "drive_read_bw_bytes_per_s": c.drive_read_bw_bytes_per_s,
            "drive_write_bw_bytes_per_s": c.drive_write_bw_bytes_per_s,
            "bwd_compute_multiplier": BWD_COMPUTE_MULTIPLIER,
            "weighted_kernel_multiplier": WEIGHTED_KERNEL_MULTIPLIER,
            "prefetch_overlap": c.prefetch_overlap,
        },
        "basis": basis,
    }


def constants_from_system(system: Any) -> StepConstants:
    """`StepConstants` from a system spec (module docstring: which tier, link and drives)."""
    tiers = list(system.tiers)
    hbm = next((t for t in tiers if getattr(t, "on_device", False)), tiers[0])
    links = list(system.links)
    if links:
        h2d, d2h = links[0].h2d_bw_bytes_per_s, links[0].d2h_bw_bytes_per_s
    else:  # everything on the device: nothing crosses a link (a stand-in bandwidth)
        h2d = d2h = hbm.read_bw_bytes_per_s
    cluster = getattr(system, "cluster", None)
    read_bw = write_bw = 0.0
    index_bytes = 8
    if cluster is not None:
        share = cluster.drives_per_node / max(cluster.gpus_per_node, 1)
        read_bw = share * cluster.drive_read_bw_bytes_per_s
        write_bw = share * cluster.drive_write_bw_bytes_per_s
        index_bytes = int(cluster.index_bytes)
    return StepConstants(
        hbm_bw_bytes_per_s=float(hbm.read_bw_bytes_per_s),
        h2d_bw_bytes_per_s=float(h2d),
        d2h_bw_bytes_per_s=float(d2h),
        drive_read_bw_bytes_per_s=float(read_bw),
        drive_write_bw_bytes_per_s=float(write_bw),
        drive_write_amplification=float(system.policy.ssd_write_amplification),
        index_bytes=index_bytes,
    )


def with_overlap(c: StepConstants, prefetch_overlap: float) -> StepConstants:
    return replace(c, prefetch_overlap=float(prefetch_overlap))


__all__ = [
    "BWD_COMPUTE_MULTIPLIER",
    "DEFAULT_PIPELINE",
    "OVERLAP_RULES",
    "PARTS",
    "WEIGHTED_KERNEL_MULTIPLIER",
    "GpuLoad",
    "KernelLoad",
    "StepConstants",
    "check_pipeline",
    "constants_from_system",
    "gpu_parts",
    "kernel_parts",
    "locked_inserts",
    "overlap",
    "step",
    "step_document",
    "with_overlap",
]
