"""PatrickStar across data-parallel GPUs: its chunks partitioned over the ranks, each
batch's chunk groups all-gathered before use and their gradients reduce-scattered back,
as a model over the trace (one pass, nothing written).

Sources.

- J. Fang, Z. Zhu, S. Li, H. Su, Y. Yu, J. Zhou, Y. You, "PatrickStar: Parallel Training
  of Pre-trained Models via Chunk-based Memory Management", arXiv 2108.05818 (2021); IEEE
  TPDS 2022 ("Parallel Training of Pre-Trained Models via Chunk-Based Dynamic Memory
  Management"). Its v1 abstract claims: "Symbiosis with the Zero Redundancy Optimizer,
  PatrickStar scales to multiple GPUs using data parallelism, with the lowest
  communication bandwidth requirements and more efficient bandwidth utilization."
  (`PAPER_CLAIM`). The paper's full text was not available here; its numbers for the
  volume are not quoted.
- Tencent/PatrickStar (github, commit 2384535), which the volumes below follow:
  `INSIDE.md` ("When a parameter in a remote chunk is visited, all process will do a
  allgather operation to communicate the neighboring N chunks to each other [...] all
  process together will only have 1 copy of the model"); `patrickstar/core/chunk_list.py`
  `new_chunk` (chunk i of a type is in communication group i // N at offset i % N);
  `core/client.py` `access_dist` (`local_chunk_id = chunk_id_list[rank]`: rank r owns
  offset r), `_fetch_remote_chunks` (`torch.distributed.all_gather` of the group's N
  chunks, `async_op=False`, counted as "half = 2 bytes" per element), `release_dist`
  (after forward the remote chunks' payloads are released; after backward the group is
  `reduce_scatter`ed to the owners, then released); `core/hook.py` (`access_dist` in the
  pre-forward and again in the pre-backward hook, `release_dist(do_allreduce=True)` only
  in the post-backward hook); `core/preprocess.py` (dummy chunks pad the chunk list to a
  multiple of N); `core/client.py` `param_fp16_chunks_max_mem_usage` (per process: the
  fp16 chunks / N + (N - 1) chunks of one gathered group).
- Ring collectives (NCCL's ring; Patarasuk & Yuan 2009): an all-gather or a
  reduce-scatter of S bytes moves (W - 1) / W x S per rank in W - 1 steps; an
  all-reduce 2 (W - 1) / W x S in 2 (W - 1) steps. ZeRO (Rajbhandari et al., SC'20,
  arXiv 1910.02054, section 7.2.2) states the same volumes for partitioned parameters:
  1.5x baseline data parallelism's (not re-read in this session).

Model (W = nodes x gpus_per_node data-parallel ranks, node-major):

- Chunks are the `chunk` policy's (`replay/policies/chunk.py`): the flat key space cut
  into chunks of `chunk_rows` consecutive keys, chunk c = key // chunk_rows (a chunk may
  hold the tail of one table and the head of the next). Group g holds chunks
  [g W, (g + 1) W); chunk c is owned by rank c mod W. Chunks have a fixed size,
  ``chunk_bytes = chunk_rows x embedding_dim x bytes_per_value`` (PatrickStar allocates
  every chunk at its capacity and all-gathers equal-sized payloads; the last, partial
  chunk and the dummy chunks padding the last group count in full).
- Precision: `bytes_per_value` = 2 by default (ASSUMPTION stated as PatrickStar's: fp16
  parameter and gradient chunks are what it communicates; the fp32 master copy and the
  optimizer state stay with the owner). The rest of replay counts fp32 rows (4 B a
  value); pass 4 for that.
- Each rank runs its own B / W samples of every batch (rank r owns samples
  [ceil(r B / W), ceil((r + 1) B / W)); the lookup at position p of a (batch, table)
  group of n lookups is sample p B // n, the rule of `engine/cluster.py`'s docstring).
  A collective needs every rank, so a group is gathered in a batch when any rank's
  samples look up a row of it (`groups`: the distinct groups of the batch's lookups; a
  dense model's every group). `rank_groups_*` say how many of those each rank's own
  samples use (the rest it receives without needing them).
- Per batch, per rank: forward all-gather ``groups x (W - 1) x chunk_bytes`` received
  (and as much sent); the backward gathers the same groups again (`regather_backward`,
  True as PatrickStar's code: the remote chunks are released after forward); the
  reduce-scatter of their gradients ``groups x (W - 1) x chunk_bytes``. Backward touches
  the rows forward looked up, so its groups are forward's. In all ranks: W times these.
- Intra- and inter-node bytes: of a ring's W links, `nodes` cross nodes when nodes > 1
  and every link carries the same bytes, so nodes / W of the bytes are inter-node (the
  convention of `engine/cluster.py`'s all-reduce).
- Time: PatrickStar issues one blocking collective per group (`async_op=False`, no
  overlap with compute -- as its code). A collective of one group takes
  ``(W - 1) x chunk_bytes / bw + (W - 1) x latency`` with bw the NVLink bandwidth per
  GPU in one node, else min(NVLink, the node's NICs shared by its GPUs:
  nics_per_node x nic_bw / gpus_per_node) and the larger of the two latencies; a batch's
  communication is the sum over its collectives (two gathers and one reduce-scatter per
  group used).
- Against data parallelism (every rank holds every chunk; ASSUMPTION: it all-reduces
  the gradients of the chunks the batch used, one ring all-reduce, fp16 as above):
  ``2 (W - 1) / W x chunks_used x chunk_bytes`` per rank, and `dense`: of every chunk
  (DDP's whole gradient). In a dense model (every chunk used every step, W dividing the
  chunks) PatrickStar's 3 (W - 1) / W against 2 (W - 1) / W is 1.5x; with sparse
  embedding lookups, each used chunk drags its group's W - 1 others along, so the ratio
  is 3 W groups / (2 chunks used).
- Memory per GPU: its own chunks (one of every group, dummies included:
  num_groups x chunk_bytes) plus the gathered working set, the largest batch's
  groups x (W - 1) x chunk_bytes (ASSUMPTION, an upper bound: a batch's groups held at
  once, as one embedding operator over all its tables would; PatrickStar's own estimate,
  one group at a time, is `gathered_one_group_bytes`). The CPU-GPU movement of each
  rank's own chunks (the tide, the `chunk` policy's fills) is not modelled here.

Kernel: one pass over the lookups; per lookup its chunk, group, sample and rank, marked
in per-chunk, per-group and per-(group, rank) stamps (int64, the global batch + 1).
State: 8 B per chunk + 8 B per group x (W + 1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.engine.replay import workload_shape
from replay.errors import ConfigError
from replay.system.spec import ClusterSpec, SystemSpec
from replay.trace.keys import table_of, table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.source import Source

PAPER_CLAIM = (
    "Symbiosis with the Zero Redundancy Optimizer, PatrickStar scales to multiple GPUs "
    "using data parallelism, with the lowest communication bandwidth requirements and "
    "more efficient bandwidth utilization."
)
PAPER_SOURCE = (
    "Fang et al., PatrickStar, arXiv 2108.05818v1 (2021), abstract; volumes from "
    "Tencent/PatrickStar patrickstar/core/client.py (_fetch_remote_chunks all_gather in "
    "forward and backward, release_dist reduce_scatter after backward, fp16 'half = 2 "
    "bytes') and core/hook.py"
)
#: what the code's collectives give in a dense model (every chunk used every step):
#: 3 (W - 1) / W of the fp16 chunks per rank against data parallelism's 2 (W - 1) / W
DENSE_RATIO = 1.5
FP16_BYTES = 2

# per-batch counter columns of the kernel
_GROUPS, _CHUNKS, _RANK_MAX, _RANK_SUM = 0, 1, 2, 3
_NUM = 4


@dataclass(frozen=True, eq=False)
class PatrickStarResult:
    """The model's answer. `columns`: per batch (length batches): `lookups`, `groups`,
    `chunks`, `rank_groups_max`, `rank_groups_sum` (int64), and per rank (float64
    bytes, seconds): `all_gather_bytes` (forward + backward), `reduce_scatter_bytes`,
    `comm_s` (of which `comm_latency_s`: the collectives' latencies), `data_parallel_bytes`,
    `data_parallel_s`; in all ranks: `intra_node_bytes`,
    `inter_node_bytes`. `summary`: `{"patrickstar": {...}}` for a run's summary.json."""

    world: int
    nodes: int
    gpus_per_node: int
    chunk_rows: int
    chunk_bytes: int
    bytes_per_value: int
    num_chunks: int
    num_groups: int
    columns: dict[str, np.ndarray]
    summary: dict[str, Any]
    elapsed_s: float


@kernel
def _group_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    offsets: np.ndarray,
    batch_size: int,
    world: int,
    chunk_rows: int,
    first_batch: int,
    cstamp: np.ndarray,
    gstamp: np.ndarray,
    rstamp: np.ndarray,
    rank_groups: np.ndarray,
    out: np.ndarray,
) -> None:
    """out[b] = (groups, chunks, max over ranks of the groups its samples use, their sum)
    for each batch of the range; lookups of a batch in (table, sample) order."""
    for b in range(len(bounds) - 1):
        tag = np.int64(first_batch + b + 1)
        lo = bounds[b]
        hi = bounds[b + 1]
        rank_groups[:] = 0
        groups = 0
        chunks = 0
        i = lo
        while i < hi:
            t = table_of(offsets, np.int64(keys[ix(i)]))
            tlo = offsets[ix(t)]
            tend = offsets[ix(t + 1)]
            j = i + 1
            while j < hi and tlo <= np.int64(keys[ix(j)]) < tend:
                j += 1
            n = j - i
            for p in range(n):
                c = np.int64(keys[ix(i + p)]) // chunk_rows
                g = c // world
                if cstamp[ix(c)] != tag:
                    cstamp[ix(c)] = tag
                    chunks += 1
                if gstamp[ix(g)] != tag:
                    gstamp[ix(g)] = tag
                    groups += 1
                r = ((np.int64(p) * batch_size) // n) * world // batch_size
                q = g * world + r
                if rstamp[ix(q)] != tag:
                    rstamp[ix(q)] = tag
                    rank_groups[ix(r)] += 1
            i = j
        out[b, _GROUPS] = groups
        out[b, _CHUNKS] = chunks
        out[b, _RANK_MAX] = rank_groups.max()
        out[b, _RANK_SUM] = rank_groups.sum()


def ring_link(cluster: ClusterSpec) -> tuple[float, float]:
    """(bandwidth per GPU in bytes/s, latency in s) of a ring over the cluster's ranks: the
    per-GPU NVLink in one node, else the slower of it and the node's NICs shared by its
    GPUs, with the larger latency (a ring step waits for its slowest link)."""
    intra_bw, intra_lat = cluster.intra_node_bw_bytes_per_s, cluster.intra_node_latency_s
    if cluster.nodes <= 1:
        return intra_bw, intra_lat
    inter_bw = cluster.nics_per_node * cluster.nic_bw_bytes_per_s / cluster.gpus_per_node
    if inter_bw <= 0:
        raise ConfigError("patrickstar: more than one node needs NICs (nics_per_node, nic_bw)")
    return min(intra_bw, inter_bw), max(intra_lat, cluster.inter_node_latency_s)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def patrickstar_cluster(
    source: Source,
    system: SystemSpec,
    cluster: ClusterSpec | None = None,
    *,
    bytes_per_value: int = FP16_BYTES,
    regather_backward: bool = True,
) -> PatrickStarResult:
    """PatrickStar's chunk partitioning of `system`'s chunks (`policy.chunk_rows`) over the
    data-parallel ranks of `cluster` (default: `system.cluster`; none: one GPU), replayed
    over every batch of `source` in one pass. Pure: nothing printed or written.

    `bytes_per_value`: bytes a communicated value takes (2: PatrickStar's fp16 chunks;
    4: fp32). `regather_backward`: the backward all-gathers the groups again (True, as
    PatrickStar's code) or finds them still resident (False: one gather per step)."""
    started = time.perf_counter()
    cl = cluster if cluster is not None else system.cluster
    nodes, gpn = (cl.nodes, cl.gpus_per_node) if cl is not None else (1, 1)
    world = nodes * gpn
    if world < 1:
        raise ConfigError("patrickstar: the cluster has no GPUs")
    if bytes_per_value < 1:
        raise ConfigError("patrickstar: bytes_per_value must be at least 1")
    shape = workload_shape(source, system)
    batch = shape.batch_size
    if batch <= 0:
        raise ConfigError("patrickstar: the source names no batch size (samples per batch)")
    rows = int(system.policy.chunk_rows)
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    total = int(offsets[-1])
    num_chunks = max(1, -(-total // rows))
    num_groups = -(-num_chunks // world)
    chunk_bytes = rows * shape.embedding_dim * bytes_per_value

    nb = source.num_batches
    counts = np.zeros((nb, _NUM), dtype=np.int64)
    lookups = np.zeros(nb, dtype=np.int64)
    cstamp = np.zeros(num_chunks, dtype=np.int64)
    gstamp = np.zeros(num_groups, dtype=np.int64)
    rstamp = np.zeros(num_groups * world, dtype=np.int64)
    rank_groups = np.zeros(world, dtype=np.int64)
    for br in iter_batch_ranges(source, with_updates=False):
        window = slice(br.batch_start, br.batch_stop)
        _group_kernel(
            br.keys, br.bounds, offsets, batch, world, rows, br.batch_start,
            cstamp, gstamp, rstamp, rank_groups, counts[window],
        )  # fmt: skip
        lookups[window] = np.diff(br.bounds)
    replay_s = time.perf_counter() - started

    groups = counts[:, _GROUPS]
    chunks = counts[:, _CHUNKS]
    gathers = 2 if regather_backward else 1
    per_group = float((world - 1) * chunk_bytes)  # received (and sent) per rank
    ag = gathers * groups * per_group
    rs = groups * per_group
    if world > 1 and cl is not None:
        bw, lat = ring_link(cl)
        collectives = (gathers + 1) * groups
        latency_s = collectives * (world - 1) * lat
        comm_s = (ag + rs) / bw + latency_s
        dp = 2.0 * (world - 1) / world * chunks * chunk_bytes
        dp_s = np.where(chunks > 0, dp / bw + 2 * (world - 1) * lat, 0.0)
        dp_dense = 2.0 * (world - 1) / world * num_chunks * chunk_bytes
        inter_share = nodes / world if nodes > 1 else 0.0
    else:
        comm_s = np.zeros(nb)
        latency_s = np.zeros(nb)
        dp = np.zeros(nb)
        dp_s = np.zeros(nb)
        dp_dense = 0.0
        inter_share = 0.0
    all_bytes = world * (ag + rs)
    columns = {
        "lookups": lookups,
        "groups": groups.copy(),
        "chunks": chunks.copy(),
        "rank_groups_max": counts[:, _RANK_MAX].copy(),
        "rank_groups_sum": counts[:, _RANK_SUM].copy(),
        "all_gather_bytes": np.asarray(ag, dtype=np.float64),
        "reduce_scatter_bytes": np.asarray(rs, dtype=np.float64),
        "comm_s": np.asarray(comm_s, dtype=np.float64),
        "comm_latency_s": np.asarray(latency_s, dtype=np.float64),
        "data_parallel_bytes": np.asarray(dp, dtype=np.float64),
        "data_parallel_s": np.asarray(dp_s, dtype=np.float64),
        "intra_node_bytes": all_bytes * (1.0 - inter_share),
        "inter_node_bytes": all_bytes * inter_share,
    }
    elapsed = time.perf_counter() - started
    summary = _summary(
        columns, world=world, nodes=nodes, gpn=gpn, rows=rows, chunk_bytes=chunk_bytes,
        bytes_per_value=bytes_per_value, num_chunks=num_chunks, num_groups=num_groups,
        gathers=gathers, dp_dense=dp_dense, replay_s=replay_s, elapsed=elapsed,
    )  # fmt: skip
    return PatrickStarResult(
        world=world,
        nodes=nodes,
        gpus_per_node=gpn,
        chunk_rows=rows,
        chunk_bytes=chunk_bytes,
        bytes_per_value=bytes_per_value,
        num_chunks=num_chunks,
        num_groups=num_groups,
        columns=columns,
        summary={"patrickstar": summary},
        elapsed_s=elapsed,
    )


def _mean(a: np.ndarray) -> float:
    return float(a.mean()) if len(a) else 0.0


def _summary(
    c: dict[str, np.ndarray],
    *,
    world: int,
    nodes: int,
    gpn: int,
    rows: int,
    chunk_bytes: int,
    bytes_per_value: int,
    num_chunks: int,
    num_groups: int,
    gathers: int,
    dp_dense: float,
    replay_s: float,
    elapsed: float,
) -> dict[str, Any]:
    """The `patrickstar` block: per-step (per-batch) means, bytes per rank unless `_all`."""
    groups = c["groups"]
    ag = _mean(c["all_gather_bytes"])
    rs = _mean(c["reduce_scatter_bytes"])
    ps = ag + rs
    dp = _mean(c["data_parallel_bytes"])
    gathered_max = int(groups.max()) * (world - 1) * chunk_bytes if len(groups) else 0
    own = num_groups * chunk_bytes
    total_groups = float(groups.sum())
    lookups = int(c["lookups"].sum())
    return {
        "world": world,
        "nodes": nodes,
        "gpus_per_node": gpn,
        "chunk_rows": rows,
        "bytes_per_value": bytes_per_value,
        "chunk_bytes": chunk_bytes,
        "num_chunks": num_chunks,
        "num_groups": num_groups,
        "gathers_per_step": gathers,
        "groups_per_batch": _mean(groups.astype(np.float64)),
        "groups_per_batch_max": int(groups.max()) if len(groups) else 0,
        "chunks_per_batch": _mean(c["chunks"].astype(np.float64)),
        "rank_groups_per_batch_max": _mean(c["rank_groups_max"].astype(np.float64)),
        "rank_groups_per_batch_mean": _mean(c["rank_groups_sum"] / world),
        "rank_group_share": (
            float(c["rank_groups_sum"].sum()) / (world * total_groups) if total_groups else None
        ),
        "all_gather_bytes_per_step": ag,
        "all_gather_bytes_per_step_all": ag * world,
        "reduce_scatter_bytes_per_step": rs,
        "reduce_scatter_bytes_per_step_all": rs * world,
        "intra_node_bytes_per_step": _mean(c["intra_node_bytes"]),
        "inter_node_bytes_per_step": _mean(c["inter_node_bytes"]),
        "comm_s_per_step": _mean(c["comm_s"]),
        "comm_latency_s_per_step": _mean(c["comm_latency_s"]),
        "comm_s_per_step_max": float(c["comm_s"].max()) if len(groups) else 0.0,
        "chunk_bytes_per_gpu": own + gathered_max,
        "chunk_bytes_own": own,
        "gathered_bytes_max": gathered_max,
        "gathered_one_group_bytes": (world - 1) * chunk_bytes,
        "chunk_bytes_one_gpu": num_chunks * chunk_bytes,
        "data_parallel_bytes_per_step": dp,
        "data_parallel_s_per_step": _mean(c["data_parallel_s"]),
        "vs_data_parallel": _ratio(ps, dp),
        "data_parallel_dense_bytes_per_step": dp_dense,
        "vs_data_parallel_dense": _ratio(ps, dp_dense),
        "dense_model_ratio": (gathers + 1) * num_groups * world / (2 * num_chunks),
        "claim": {
            "text": PAPER_CLAIM,
            "source": PAPER_SOURCE,
            "volume_in_a_dense_model": f"{gathers + 1} (W - 1) / W of the chunk bytes per "
            f"rank per step against data parallelism's 2 (W - 1) / W: {(gathers + 1) / 2:g}×",
        },
        "lookups": lookups,
        "lookups_per_s": lookups / replay_s if replay_s > 0 else None,
        "elapsed_s": elapsed,
    }
