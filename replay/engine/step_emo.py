"""TorchRec's EMO benchmark as step-model inputs, and the model's runtimes beside the
measured ones.

Placement. Engine arithmetic beside `replay.engine.step_model`, pure: the benchmark's
setup as data (each number with the file it comes from), its per-GPU loads in closed form
(its ids are uniform, so no trace is needed for the expected counts), the four measured
runtimes (and a second run of one of them, `SECOND_RUN_MS`), and `predictions()`.
`docs/step_time.md` prints its table; the tests hold it to the acceptance (order, ratios
to the all-HBM run within 10%).

The benchmark (TorchRec PR #4099, meta-pytorch/torchrec 6a2d4be3,
`torchrec/distributed/benchmark/yaml/prefetch_emo.yml` and
`benchmark_train_pipeline.py`): 2 ranks (`world_size: 2`); local batch 32,768
(`RunOptions.batch_size`, "batch_size=32768" in the PR); `TestSparseNN` with 100 float
features, dense arch [128, 128, 128] -> 128, over arch `TestOverArchLarge`: a linear
layer from 128 + the tables' dims to 1,024 and 5 more of 1,024 x 1,024
(`test_utils/test_model.py`, `TestOverArchLarge.__init__`); 30 unweighted and 40
weighted tables of 100 K x 256 fp32 table-wise, `FP16_table` 100 K x 512 fp16
table-wise, `large_table` 10 M x 512 fp32 row-wise (5 M rows a rank); every feature's
lengths `max(N(30, 3), 1)` cast to int64 (mean 29.5: the cast truncates), ids uniform
(`torch.randint`, `test_utils/model_input.py` `_generate_features`), int64 ids and
lengths, fp32 weights on weighted features; the default fused optimizer; 10 batches
per measured run (`num_batches: 10`, `sync_batch: True`: every batch ends in a device
synchronize). Runs: `sdd_fused` (all in HBM, `TrainPipelineSparseDist`),
`sdd_fused_uvm` (large_table `fused_uvm`, same pipeline), `prefetch_emo_0.4` and
`_0.2` (large_table `fused_uvm_caching` at load factor 0.4 / 0.2, `prefetch_pipeline`,
`PrefetchTrainPipelineSparseDist`). Measured GPU runtime P90 of the 10 batches in ms.

Constants, each cited or marked:

- HBM bandwidth of a TBE lookup 2 TB/s: PR #4099 section 3.2 ("on-HBM embedding lookup
  ... ~2 TB/s (HBM)").
- PCIe 50 GB/s each way: PR #4099 sections 1 and 3.2 ("~50-60 GB/s", "~50 GB/s
  (PCIe)"), the low end.
- NVLink 450 GB/s each way per GPU, 2 us a call: the `dgx-h100` cluster preset
  (`replay/system/clusters.toml`). ASSUMPTION: the PR does not name its GPU; it names
  H100 as the target device class, and its 50-60 GB/s is PCIe 5.
- Dense FLOPs at the H100 SXM's FP32 peak, 67 TFLOP/s (NVIDIA H100 datasheet; PyTorch
  runs fp32 matmuls without TF32 by default): a lower bound on the dense time, and so on
  the window a prefetch hides in.
- Table placement: 36 table-wise tables on rank 0 (15 unweighted, 20 weighted, the FP16
  table), 35 on rank 1. ASSUMPTION: TorchRec's planner balances the 71 equal-cost tables.
- FITTED: `other_s`, everything a step spends that no part above counts (the over
  arch's layer norms and activations, the KJT permutes and bucketization, launches
  under `sync_batch`), set so the all-HBM run's predicted step equals its measured
  2,855.41 ms / 10. The other three runs' ratios are predictions from the constants
  above and this one fitted number; `predictions()` also returns the step without it.
- The cache (FBGEMM `fused_uvm_caching`, `prefetch_pipeline`): load factor x 5 M rows
  per rank, in ceil(x 5 M / 32) sets of 32 ways; a row's set is FBGEMM's `cache_slot`
  (MurmurHash3's finalizer of its index modulo the sets: `set_sizes` counts the rows of
  each set exactly). Uniform ids: each row is in a batch with probability
  p = 1 - exp(-lookups / rows), independently (ASSUMPTION: the Poisson limit of draws
  with replacement). FBGEMM locks the current batch's cached rows while the next batch
  is prefetched, and the next batch's hits as it finds them (`lxu_cache_locking_counter`,
  FBGEMM PR #1883; `lru_cache_insert_kernel` in
  `src/split_embeddings_cache/lru_cache_populate.cu` skips a locked way and stops at one
  of this time step), so the prefetch inserts only into ways neither holds; the rows it
  cannot insert (FBGEMM's conflict misses) are read from host memory in the forward and
  updated there in the backward (`uvm_forward_s`, `uvm_backward_s`). `locked_set` is
  that steady state per set, a Markov chain on the ways the previous batch holds;
  `locked_cache` sums it over the sets. Per rank and batch: 0.879 M unique rows; at 0.2,
  0.372 M inserted and 0.332 M conflict misses (the sets' spread changes the even-fill
  figures, 0.372 and 0.331 M, by under 0.3%), at 0.4, 0.514 M and 0.013 M. ASSUMPTIONS:
  every evicted row is dirty (the backward updated it); a conflict miss that the next
  batch's prefetch inserts is still counted as updated in host memory (FBGEMM
  re-looks-up the batch's rows before its backward; about 5% of them at 0.2).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.engine.step_model import (
    GpuLoad,
    KernelLoad,
    StepConstants,
    overlap,
    step,
    with_overlap,
)

WORLD = 2
LOCAL_BATCH = 32_768
POOLING = 29.5  # int64(max(N(30, 3), 1)): the cast truncates
UNWEIGHTED = 30
WEIGHTED = 40
SMALL_ROWS = 100_000
SMALL_DIM = 256
FP16_DIM = 512
LARGE_ROWS = 10_000_000
LARGE_DIM = 512
FLOAT_FEATURES = 100
DENSE_ARCH = (128, 128, 128, 128)  # hidden [128, 128, 128], out 128
OVER_ARCH_OUT = 1024
OVER_ARCH_HIDDEN = 5
BATCHES = 10  # the measured runtime covers num_batches: 10
INDEX_BYTES = 8
LENGTH_BYTES = 8
WEIGHT_BYTES = 4
ASSOC = 32

HBM_BW = 2e12  # PR #4099 section 3.2
PCIE_BW = 50e9  # PR #4099 sections 1 and 3.2
NVLINK_BW = 450e9  # clusters.toml dgx-h100 (ASSUMPTION: H100 SXM)
NVLINK_LATENCY_S = 2e-6
DENSE_FLOPS = 67e12  # H100 SXM FP32 peak (datasheet)

MEASURED_MS = {
    "sdd_fused": 2855.41,
    "prefetch_emo_0.4": 3122.24,
    "sdd_fused_uvm": 3743.76,
    "prefetch_emo_0.2": 4673.33,
}
# A second run of one configuration: TorchRec PR #4096 (meta-pytorch/torchrec 4bf6987f,
# two days before PR #4099, the same author) measured `prefetch_emo.yml` with
# `prefetch_pipeline: True` and `sync_batch: True` and no `load_factor`, so FBGEMM's
# default cache_load_factor of 0.2 (`SplitTableBatchedEmbeddingBagsCodegen`; TorchRec
# passes `cache_load_factor` only when `cache_params.load_factor` is set,
# `distributed/utils.py` `add_params_from_parameter_sharding`): 3,362.94 ms GPU runtime
# P90 and 26.98 GB reserved, where PR #4099's `prefetch_emo_0.2` (the same file plus
# `load_factor: 0.2`; no change to the benchmark or the prefetch pipeline between the two
# commits) measured 4,673.33 ms and 27.00 GB. PR #4096 ran no all-HBM baseline: its
# ratio is taken to PR #4099's.
SECOND_RUN_MS = {"prefetch_emo_0.2": 3362.94}


@dataclass(frozen=True)
class Run:
    name: str
    kernel: str  # large_table's
    load_factor: float
    pipeline: str
    description: str


RUNS = (
    Run("sdd_fused", "hbm", 0.0, "sparse-dist", "all in HBM (fused)"),
    Run("prefetch_emo_0.4", "uvm-caching", 0.4, "prefetch-sparse-dist", "cache, load factor 0.4"),
    Run("sdd_fused_uvm", "uvm", 0.0, "sparse-dist", "host memory, no cache (fused_uvm)"),
    Run("prefetch_emo_0.2", "uvm-caching", 0.2, "prefetch-sparse-dist", "cache, load factor 0.2"),
)

CONSTANTS = StepConstants(
    hbm_bw_bytes_per_s=HBM_BW,
    h2d_bw_bytes_per_s=PCIE_BW,
    d2h_bw_bytes_per_s=PCIE_BW,
    index_bytes=INDEX_BYTES,
)


def large_lookups() -> float:
    """large_table's lookups on one rank per batch: every rank's samples' ids, half of
    them to each rank's 5 M rows."""
    return WORLD * LOCAL_BATCH * POOLING / WORLD


def unique_rows(lookups: float, rows: float) -> float:
    """Expected distinct rows of `lookups` uniform draws over `rows`."""
    return rows * -math.expm1(-lookups / rows)


# MurmurHash3's 64-bit finalizer: FBGEMM's `cache_slot` (src/split_embeddings_cache/common.cuh)
_MIX1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def cache_set_of(rows: int, sets: int) -> np.ndarray:
    """The set of each linear index 0..rows-1: FBGEMM's `cache_slot`, the MurmurHash3
    finalizer of the index modulo the sets. large_table is its TBE's only cached table,
    so its linear indices are its rows."""
    h = np.arange(rows, dtype=np.uint64)
    h ^= h >> _S33
    h *= _MIX1  # uint64 arrays wrap modulo 2^64, as the CUDA code does
    h ^= h >> _S33
    h *= _MIX2
    h ^= h >> _S33
    return (h % np.uint64(sets)).astype(np.int64)


def set_sizes(rows: int, sets: int) -> np.ndarray:
    """`out[n]`: how many of the cache's `sets` sets hold `n` of the rows 0..rows-1."""
    return np.bincount(np.bincount(cache_set_of(rows, sets), minlength=sets))


def _binomial(n: int, p: float) -> np.ndarray:
    k = np.arange(n + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_choose = log_factorial[n] - log_factorial - log_factorial[::-1]
    return np.exp(log_choose + k * math.log(p) + (n - k) * math.log1p(-p))


@functools.cache
def _chain_shape(ways: int, p: float) -> tuple[np.ndarray, ...]:
    """What `locked_set`'s chain shares across set sizes: over (L, H_u, H_u + I) the
    inserts I, the free ways, the weights Bin(ways - L, p) of H_u and Bin(L, p) of the
    locked ways' hits."""
    size = ways + 1
    locked = np.arange(size)[:, None, None]
    h_u = np.arange(size)[None, :, None]
    j = np.arange(size)[None, None, :]
    k = np.broadcast_to(j - h_u, (size, size, size))
    free = np.broadcast_to(ways - locked - h_u, (size, size, size))
    valid = (h_u <= ways - locked) & (k >= 0)
    below = valid & (k < free)
    at = valid & (k == free)
    w_other = np.zeros((size, size))
    w_locked = np.zeros((size, size))
    for n in range(size):
        w_other[n, : ways - n + 1] = _binomial(ways - n, p)
        w_locked[n, : n + 1] = _binomial(n, p)
    return k.clip(0, size), free.clip(0, size), below, at, w_other, w_locked


def locked_set(rows_in_set: int, p: float, ways: int = ASSOC) -> tuple[float, float]:
    """One cache set of `ways` ways over `rows_in_set` rows, each row in a batch with
    probability `p` independently, under FBGEMM's prefetch pipeline in its steady state:
    the expected rows a batch's prefetch inserts into the set, and its expected misses.

    The state is L, the ways holding the previous batch's cached rows (its hits and
    inserts, all locked until its backward, which runs after this prefetch). Of the set's
    other ways, the batch's hits H_u ~ Bin(ways - L, p) take this time step
    (`lru_cache_find_uncached`); the misses M ~ Bin(rows_in_set - ways, p) go, in LRU
    order, to the ways neither locked nor used in this step
    (`lru_cache_insert_kernel`: `continue` on a locked way, `break` on one of this time
    step): I = min(M, ways - L - H_u); the rest are conflict misses. The next state is the
    batch's hits, Bin(L, p) + H_u, plus I. The chain's stationary distribution weights
    E[I | L]."""
    if rows_in_set <= ways:  # every row fits: nothing misses once the set is warm
        return 0.0, 0.0
    size = ways + 1
    k, free, below, at, w_other, w_locked = _chain_shape(ways, p)
    m = _binomial(rows_in_set - ways, p)
    pmf_m = np.zeros(size + 1)
    tail_m = np.zeros(size + 1)
    top = min(rows_in_set - ways, size) + 1
    pmf_m[:top] = m[:top]
    tail_m[:top] = np.cumsum(m[::-1])[::-1][:top]  # P(M >= k)
    take = np.where(below, pmf_m[k], 0.0) + np.where(at, tail_m[free], 0.0)
    after = np.einsum("lh,lhj->lj", w_other, take)
    inserted = np.einsum("lh,lhj->l", w_other, take * k)
    moves = np.array([np.convolve(w_locked[n], after[n])[:size] for n in range(size)])
    system = moves.T - np.eye(size)
    system[-1] = 1.0
    rhs = np.zeros(size)
    rhs[-1] = 1.0
    stationary = np.linalg.solve(system, rhs)
    return float(stationary @ inserted), (rows_in_set - ways) * p


@functools.cache
def locked_cache(load_factor: float) -> tuple[float, float, float]:
    """large_table's cache on one rank under the prefetch pipeline: the expected hits,
    inserts and misses of a batch, summed over the sets (`locked_set` for each set's
    rows, `set_sizes` for how many sets hold them)."""
    rows = LARGE_ROWS // WORLD
    sets = math.ceil(load_factor * rows / ASSOC)
    p = -math.expm1(-large_lookups() / rows)
    hits = inserted = misses = 0.0
    for n, count in enumerate(set_sizes(rows, sets)):
        if count:
            ins, miss = locked_set(n, p)
            hits += count * min(n, ASSOC) * p
            inserted += count * ins
            misses += count * miss
    return float(hits), float(inserted), float(misses)


def cache_loads(load_factor: float, locked: bool) -> dict[str, float]:
    """A cached large_table's rows per rank per batch in the steady state (module
    docstring): `fetched` inserted, `evicted` written back, `host_rows` and
    `host_lookups` left in host memory (FBGEMM's conflict misses)."""
    rows = LARGE_ROWS / WORLD
    lookups = large_lookups()
    uniq = unique_rows(lookups, rows)
    if locked:
        hits, fetched, misses = locked_cache(load_factor)
    else:
        slots = math.ceil(load_factor * rows / ASSOC) * ASSOC
        hits = uniq * min(slots / rows, 1.0)
        fetched = misses = uniq - hits
    left = misses - fetched
    return {
        "unique": uniq,
        "hits": hits,
        "fetched": fetched,
        "evicted": fetched,
        "host_rows": left,
        "host_lookups": left * lookups / uniq,
    }


def dense_flops_per_sample() -> float:
    """Forward FLOPs of TestSparseNN's dense and over arches per sample (2 per weight)."""
    dims = (FLOAT_FEATURES, *DENSE_ARCH)
    dense = sum(a * b for a, b in itertools.pairwise(dims))
    over_in = DENSE_ARCH[-1] + (UNWEIGHTED + WEIGHTED) * SMALL_DIM + FP16_DIM + LARGE_DIM
    over = over_in * OVER_ARCH_OUT + OVER_ARCH_HIDDEN * OVER_ARCH_OUT * OVER_ARCH_OUT
    return 2.0 * (dense + over)


def dense_params() -> float:
    dims = (FLOAT_FEATURES, *DENSE_ARCH)
    dense = sum(a * b + b for a, b in itertools.pairwise(dims))
    over_in = DENSE_ARCH[-1] + (UNWEIGHTED + WEIGHTED) * SMALL_DIM + FP16_DIM + LARGE_DIM
    over = (over_in + 1) * OVER_ARCH_OUT + OVER_ARCH_HIDDEN * (OVER_ARCH_OUT + 1) * OVER_ARCH_OUT
    norms = 2 * OVER_ARCH_OUT * (1 + OVER_ARCH_HIDDEN)  # SwishLayerNorm's weight and bias
    return float(dense + over + norms)


def _tables(rank: int) -> tuple[int, int, int]:
    """(unweighted, weighted, fp16) table-wise tables on `rank` (module docstring)."""
    return (UNWEIGHTED // WORLD, WEIGHTED // WORLD, 1 if rank == 0 else 0)


def _a2a(sent: float, received: float) -> float:
    return max(sent, received) / NVLINK_BW + NVLINK_LATENCY_S


def _large_kernel(run: Run) -> KernelLoad:
    lookups = large_lookups()
    base: dict[str, Any] = {
        "lookups": lookups,
        "bags": WORLD * LOCAL_BATCH,  # row-wise: partial sums of every sample
        "dim": LARGE_DIM,
        "row_bytes": LARGE_DIM * 4,
    }
    if run.kernel == "hbm":
        return KernelLoad("hbm", **base)
    if run.kernel == "uvm":
        uniq = unique_rows(lookups, LARGE_ROWS / WORLD)
        return KernelLoad("uvm", host_lookups=lookups, host_rows=uniq, **base)
    c = cache_loads(run.load_factor, locked=run.pipeline == "prefetch-sparse-dist")
    return KernelLoad(
        "uvm-caching", host_lookups=c["host_lookups"], host_rows=c["host_rows"],
        fetched_rows=c["fetched"], evicted_rows=c["evicted"], **base,
    )  # fmt: skip


def gpu_load(run: Run, rank: int, other_s: float = 0.0) -> GpuLoad:
    """Rank `rank`'s loads and stage seconds in `run` (module docstring)."""
    unw, wtd, fp16 = _tables(rank)
    peer = 1 - rank
    p_unw, p_wtd, p_fp16 = _tables(peer)
    global_batch = WORLD * LOCAL_BATCH
    per_table = global_batch * POOLING
    kernels = [
        KernelLoad("hbm", unw * per_table, unw * global_batch, SMALL_DIM, SMALL_DIM * 4),
        KernelLoad(
            "hbm", wtd * per_table, wtd * global_batch, SMALL_DIM, SMALL_DIM * 4, weighted=True
        ),
        _large_kernel(run),
    ]
    if fp16:
        kernels.append(KernelLoad("hbm", per_table, global_batch, FP16_DIM, FP16_DIM * 2))
    features = UNWEIGHTED + WEIGHTED + 2
    ids = LOCAL_BATCH * POOLING
    copy = (
        features * ids * INDEX_BYTES
        + features * LOCAL_BATCH * LENGTH_BYTES
        + WEIGHTED * ids * WEIGHT_BYTES
        + FLOAT_FEATURES * LOCAL_BATCH * 4
    )

    def sent_ids(u: int, w: int, f: int) -> float:  # this rank's ids for a peer's tables
        tables = u + w + f
        return tables * (ids * INDEX_BYTES + LOCAL_BATCH * LENGTH_BYTES) + w * ids * WEIGHT_BYTES

    large_half = ids / 2 * INDEX_BYTES + LOCAL_BATCH * LENGTH_BYTES
    input_dist = _a2a(sent_ids(p_unw, p_wtd, p_fp16) + large_half,
                      sent_ids(unw, wtd, fp16) + large_half)  # fmt: skip
    tw_out = LOCAL_BATCH * 4 * ((unw + wtd) * SMALL_DIM + fp16 * FP16_DIM)
    tw_in = LOCAL_BATCH * 4 * ((p_unw + p_wtd) * SMALL_DIM + p_fp16 * FP16_DIM)
    reduce_scatter = global_batch * LARGE_DIM * 4 * (WORLD - 1) / WORLD
    output = _a2a(tw_out, tw_in) + reduce_scatter / NVLINK_BW + NVLINK_LATENCY_S
    fwd_flops = dense_flops_per_sample() * LOCAL_BATCH
    grad = 4 * dense_params()
    allreduce = 2 * (WORLD - 1) / WORLD * grad / NVLINK_BW + 2 * (WORLD - 1) * NVLINK_LATENCY_S
    return GpuLoad(
        kernels=tuple(kernels),
        input_copy_bytes=copy,
        input_dist_s=input_dist,
        output_dist_forward_s=output,
        output_dist_backward_s=output,
        dense_forward_s=fwd_flops / DENSE_FLOPS,
        dense_backward_s=2 * fwd_flops / DENSE_FLOPS,
        allreduce_s=allreduce,
        other_s=other_s,
    )


def predict(run: Run, other_s: float = 0.0, prefetch_overlap: float = 1.0) -> dict[str, Any]:
    """`run`'s step on every rank (`replay.engine.step_model.step`)."""
    loads = [gpu_load(run, r, other_s) for r in range(WORLD)]
    return step(loads, with_overlap(CONSTANTS, prefetch_overlap), run.pipeline)


def fitted_other_s() -> float:
    """FITTED (module docstring): the seconds per step no part counts, from the
    all-HBM run."""
    base = predict(RUNS[0])
    worst = base["per_gpu"][base["worst_rank"]]
    return MEASURED_MS["sdd_fused"] / 1e3 / BATCHES - worst["step_time_s"]


def predictions(prefetch_overlap: float = 1.0) -> list[dict[str, Any]]:
    """Per run: measured and predicted ms per 10 batches (with the fitted `other_s`, and
    from the cited constants alone), their ratios to the all-HBM run, the ratio's error,
    and the worst rank's parts and overlap. `prefetch_overlap`: the share of the dense
    backward the prefetch hides in (1: as TorchRec and FBGEMM design it; PR #4099's trace
    shows 0 there, docs/step_time.md)."""
    other = fitted_other_s()
    rows = []
    for run in RUNS:
        fitted = predict(run, other, prefetch_overlap)
        alone = predict(run, 0.0, prefetch_overlap)
        w = fitted["per_gpu"][fitted["worst_rank"]]
        rows.append(
            {
                "run": run.name,
                "description": run.description,
                "pipeline": run.pipeline,
                "kernel": run.kernel,
                "measured_ms": MEASURED_MS[run.name],
                "predicted_ms": w["step_time_s"] * 1e3 * BATCHES,
                "unfitted_ms": alone["per_gpu"][alone["worst_rank"]]["step_time_s"] * 1e3 * BATCHES,
                "parts_s": w["parts_s"],
                "hidden_s": w["hidden_s"],
                "exposed_s": w["exposed_s"],
            }
        )
    hbm = rows[0]
    for row in rows:
        row["measured_ratio"] = row["measured_ms"] / hbm["measured_ms"]
        row["predicted_ratio"] = row["predicted_ms"] / hbm["predicted_ms"]
        row["unfitted_ratio"] = row["unfitted_ms"] / hbm["unfitted_ms"]
        row["ratio_error"] = row["predicted_ratio"] / row["measured_ratio"] - 1.0
        row["unfitted_ratio_error"] = row["unfitted_ratio"] / row["measured_ratio"] - 1.0
        second = SECOND_RUN_MS.get(row["run"])
        if second is not None:  # `SECOND_RUN_MS`: the same configuration run again
            row["second_measured_ms"] = second
            row["second_measured_ratio"] = second / hbm["measured_ms"]
            row["second_ratio_error"] = row["predicted_ratio"] / row["second_measured_ratio"] - 1
            row["second_unfitted_ratio_error"] = (
                row["unfitted_ratio"] / row["second_measured_ratio"] - 1
            )
    return rows


__all__ = [
    "CONSTANTS",
    "MEASURED_MS",
    "RUNS",
    "SECOND_RUN_MS",
    "Run",
    "cache_loads",
    "cache_set_of",
    "dense_flops_per_sample",
    "fitted_other_s",
    "gpu_load",
    "locked_cache",
    "locked_set",
    "overlap",
    "predict",
    "predictions",
    "set_sizes",
    "unique_rows",
]
