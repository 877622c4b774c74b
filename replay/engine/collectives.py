"""The all-to-all of a sharded cluster, as TorchRec sends it: every collective a training
step of `DistributedModelParallel` issues for the embedding tables, its bytes per rank
and its time; and the sparse lower bound replay reported before, kept as a named
alternative (`cluster.all_to_all_model`: `torchrec`, the default, or `lower-bound`).

Placement. Engine arithmetic beside the cluster replay (`replay/engine/cluster.py`): the
routing kernels (`cluster_route.py`) count, per batch and rank, the ids each rank sends
and receives (the only data-dependent part of TorchRec's collectives) and the lower
bound's pooled embeddings; this module turns them into bytes and seconds. Pure: nothing
written.

What TorchRec sends (torchrec 1.8.0 source, `torchrec/distributed/`). A sharded
`EmbeddingBagCollection` (`embeddingbag.py`) groups its tables by sharding type, in
the order the types first appear in its tables (`create_sharding_infos_by_sharding`),
and each group has its own input distribution and output distribution:

- **Input distribution** (every group but data-parallel; `dist_data.py` `KJTAllToAll`):
  first a splits all-to-all (`KJTAllToAllSplitsAwaitable` via `SplitsAllToAllAwaitable`:
  per peer the lengths split, the values split and the batch size, 3 int64 = 24 B),
  then the KJT's lengths and its ids (`KJTAllToAllTensorsAwaitable`, one
  `all_to_all_single` each). Rank s sends rank r one length per (feature r serves,
  sample of s): ``b_s x F(r) x length_bytes``; and the ids of its samples that r serves,
  ``index_bytes`` each. F(r), the features r serves: table-wise (`tw_sharding.py`
  `TwSparseFeaturesDist`) its tables; column-wise (`cw_sharding.py`, a `TwSparseFeaturesDist`
  over the column shards) its column blocks, each block a copy of its table's feature
  and ids; row-wise (`rw_sharding.py` `RwSparseFeaturesDist`: `bucketize_kjt_before_all2all`
  cuts every feature into one bucket per rank) every row-wise table, on every rank;
  table-row-wise (`twrw_sharding.py` `TwRwSparseFeaturesDist`: buckets per GPU of the
  table's node, one all-to-all over the world) the table-row-wise tables of its node.
  Data-parallel (`dp_sharding.py` `DpSparseFeaturesDist`): nothing.
- **Forward embeddings**: table-wise and column-wise (`TwPooledEmbeddingDist`,
  `PooledEmbeddingsAllToAll` -> `comm_ops.alltoall_pooled`): rank r sends rank s its
  pooled embeddings of s's samples, ``b_s x D(r) x 4 B`` (D(r): the dims, or column
  blocks' columns, r holds in the group). Row-wise (`RwPooledEmbeddingDist`,
  `PooledEmbeddingsReduceScatter` -> `reduce_scatter_base_pooled`,
  `dist.reduce_scatter_tensor`): every rank's whole ``[global batch, D_rw]`` partial
  sums, reduce-scattered over the world, whether or not the rank holds a row of a bag.
  Table-row-wise (`TwRwPooledEmbeddingDist`): a reduce-scatter of ``[global batch,
  D_node]`` inside the node (`comm.py` `intra_and_cross_node_pg`'s intra group), leaving
  each GPU the samples of the GPUs with its local index on every node, then an
  all-to-all among those GPUs (the cross group: one a node) of ``b_s x D_node x 4 B``.
- **Table-column-wise** (`twcw_sharding.py` `TwCwPooledEmbeddingSharding`, a
  `CwPooledEmbeddingSharding`) is sent as column-wise, in a group of its own; **grid**
  (`grid_sharding.py`: `TwRwSparseFeaturesDist` in, `GridPooledEmbeddingDist` out) as
  table-row-wise with each column block a table on its node (an id to its row's rank in
  every column block).
- **Backward gradients**: the same collectives reversed (`comm_ops.py`
  `All2All_Pooled_Wait.backward`: the all-to-all with the splits swapped;
  `ReduceScatterBase_Wait.backward`: `dist.all_gather_into_tensor`).
- **Data-parallel** tables and the dense model: DDP's all-reduce of their gradients
  (`replay.engine.cluster.allreduce_model`, reported as the all-reduce, not here).

A process group of one rank issues nothing (a single node has no cross-node all-to-all;
a world of one nothing at all). fp32 embeddings (no quantized comms codecs). ids
``index_bytes`` (default 8: int64, as TorchRec's `RandomRecDataset` and torch make them;
TorchRec's Criteo pipeline keeps int32, `cluster.index_bytes = 4`), lengths
``length_bytes`` (default 4: int32, both of those pipelines).

Bytes. What a rank sends to another rank and what it receives from one; nothing to or
from itself (an all-to-all's own split is a local copy). Per collective and rank:
intra-node sent, inter-node sent, intra-node received, inter-node received.
An all-to-all is pairwise: a rank's block for a peer goes to that peer. A reduce-scatter
or all-gather is NCCL's ring over the group in rank order (NCCL runs both as rings):
each rank sends all chunks but one to its successor and receives all but one from its
predecessor, ``(n - 1) / n`` of the tensor for even chunks, intra-node or inter-node as
the successor's (predecessor's) node is. Held against a CPU `DistributedModelParallel`
over gloo with 2 and 4 processes (`tests/test_collectives_dmp.py`: every type at once,
grid included): every call's bytes per rank equal, framing included (the splits
all-to-all is modelled; nothing else is sent).

Time, per call: an all-to-all takes its slowest rank's intra-node ``max(sent, received)
/ intra_node_bw + latency`` plus inter-node ``max(sent, received) / (nics_per_node x
nic_bw / gpus_per_node) + latency`` (a fabric's latency only where the rank uses it), as
the lower bound was timed; a ring takes ``max over ranks of sent / the slowest link it
crosses + (n - 1) x that link's latency`` (the inter-node per-GPU bandwidth when the
group spans nodes). A step's all-to-all time is the sum of its calls' times (no overlap
between calls -- ASSUMPTION, conservative: TorchRec issues a group's lengths and ids
all-to-alls back to back, and the groups' output distributions one after another).

The lower bound (`lower-bound`, replay's model before): for each (table, sample) bag,
every rank holding lookups of the bag sends the bag's pooled embedding (its block's
columns) to the sample's rank; table-row-wise reduces inside the node first; no input
distribution; the backward sends the same bytes back (`replay.engine.cluster`'s
docstring). TorchRec's row-wise reduce-scatter moves 7-8x its bytes on criteo-kaggle at
8 GPUs (docs/methods.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.system.sharding import (
    COLUMN_WISE,
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    Placement,
)
from replay.system.spec import ALL_TO_ALL_MODELS, BYTES_PER_VALUE

TORCHREC, LOWER_BOUND = ALL_TO_ALL_MODELS
INPUT, FORWARD, BACKWARD = "input", "forward", "backward"
PHASES = (INPUT, FORWARD, BACKWARD)
ALL_TO_ALL, REDUCE_SCATTER, ALL_GATHER = "all_to_all", "reduce_scatter", "all_gather"
# KJTAllToAllSplitsAwaitable: per peer the lengths' and the values' splits and the batch
# size (`torch.tensor` of Python ints: int64)
SPLITS_BYTES_PER_PEER = 3 * 8
# how a group's pooled embeddings travel: an all-to-all over the world (table-wise,
# column-wise and TorchRec's table-column-wise, `twcw_sharding.py`, a column-wise), a
# reduce-scatter over the world (row-wise), or per node (table-row-wise; grid,
# `grid_sharding.py`: table-row-wise per column block)
PAIRWISE_TYPES = (TABLE_WISE, COLUMN_WISE, "table-column-wise")
NODE_TYPES = (TABLE_ROW_WISE, "grid")
# a traffic array's last axis
SENT_INTRA, SENT_INTER, RECV_INTRA, RECV_INTER = 0, 1, 2, 3

DESCRIPTIONS = {
    TORCHREC: (
        "TorchRec's collectives per sharding type: the KJT all-to-all of ids and lengths, "
        "pooled embeddings all-to-all (table-wise, column-wise), reduce-scatter of whole "
        "[batch, dim] partial sums (row-wise; in the node, then across nodes, for "
        "table-row-wise), and their gradients back"
    ),
    LOWER_BOUND: (
        "lower bound: pooled embeddings of each (table, sample) bag from every shard "
        "holding a lookup of it, and their gradients back; no input distribution"
    ),
}


def sharding_groups(placement: Placement) -> list[str]:
    """The sharding types with collectives, in the order TorchRec makes their groups: as
    they first appear in the tables (data-parallel has none)."""
    out: list[str] = []
    for t in range(len(placement.tables)):
        kind = placement.entry(t).type
        if kind != DATA_PARALLEL and kind not in out:
            out.append(kind)
    return out


def table_groups(placement: Placement) -> np.ndarray:
    """int64 per table: its index in `sharding_groups`, -1 for data-parallel."""
    groups = sharding_groups(placement)
    kinds = [placement.entry(t).type for t in range(len(placement.tables))]
    return np.array([-1 if k == DATA_PARALLEL else groups.index(k) for k in kinds], np.int64)


def local_batches(batch_size: int, world: int) -> np.ndarray:
    """int64 samples per rank: rank r owns [ceil(r B / W), ceil((r + 1) B / W))."""
    bounds = -(-np.arange(world + 1, dtype=np.int64) * batch_size // world)
    return np.diff(bounds)


@dataclass(frozen=True, eq=False)
class Call:
    """One collective of a training step: `traffic` float64 (world, 4), per rank the
    bytes sent intra-node, sent inter-node, received intra-node, received inter-node;
    `size` the process group's ranks; `spans_nodes` whether the group does."""

    phase: str
    sharding: str
    what: str  # splits, lengths, ids, embeddings, gradients
    op: str
    size: int
    spans_nodes: bool
    traffic: np.ndarray

    def sent(self) -> np.ndarray:
        return self.traffic[:, SENT_INTRA] + self.traffic[:, SENT_INTER]

    def received(self) -> np.ndarray:
        return self.traffic[:, RECV_INTRA] + self.traffic[:, RECV_INTER]


def _pairwise(
    x: np.ndarray, y: np.ndarray, members: np.ndarray, gpn: int, world: int
) -> np.ndarray:
    """An all-to-all in the group `members` where member s sends member r ``x[s] x y[r]``
    bytes (r != s): (world, 4) traffic from per-node sums (no world x world matrix)."""
    out = np.zeros((world, 4), dtype=np.float64)
    if len(members) <= 1:
        return out
    node = members // gpn
    nodes = int(node.max()) + 1
    xs = x[members].astype(np.float64)
    ys = y[members].astype(np.float64)
    x_node = np.bincount(node, weights=xs, minlength=nodes)
    y_node = np.bincount(node, weights=ys, minlength=nodes)
    out[members, SENT_INTRA] = xs * (y_node[node] - ys)
    out[members, SENT_INTER] = xs * (ys.sum() - y_node[node])
    out[members, RECV_INTRA] = ys * (x_node[node] - xs)
    out[members, RECV_INTER] = ys * (xs.sum() - x_node[node])
    return out


def _ring(chunk: np.ndarray, members: np.ndarray, width: float, gpn: int, world: int,
          gather: bool) -> np.ndarray:  # fmt: skip
    """A ring reduce-scatter (or all-gather, `gather`) in rank order over `members`:
    member i's chunk is ``chunk[i]`` rows of `width` bytes. Reduce-scatter: a member
    sends every chunk but its own to its successor; all-gather: every chunk but its
    successor's. It receives what its predecessor sends."""
    out = np.zeros((world, 4), dtype=np.float64)
    n = len(members)
    if n <= 1:
        return out
    c = chunk.astype(np.float64) * width
    total = c.sum()
    succ = np.roll(np.arange(n), -1)
    sent = total - (c[succ] if gather else c)
    recv = np.roll(sent, 1)
    node = members // gpn
    cross_out = node != node[succ]
    cross_in = np.roll(cross_out, 1)
    out[members, SENT_INTRA] = np.where(cross_out, 0.0, sent)
    out[members, SENT_INTER] = np.where(cross_out, sent, 0.0)
    out[members, RECV_INTRA] = np.where(cross_in, 0.0, recv)
    out[members, RECV_INTER] = np.where(cross_in, recv, 0.0)
    return out


def _widths(placement: Placement, groups: list[str]) -> tuple[dict, dict]:
    """Per group: F, the features each rank serves (world), and D, the bytes of a
    sample's pooled embeddings each rank returns (world) (module docstring); a per-node
    group (table-row-wise, grid) counts each (table, column block) on the rank's node."""
    world, gpn = placement.world, placement.gpus_per_node
    nodes = placement.nodes
    features = {g: np.zeros(world, dtype=np.float64) for g in groups}
    dims = {g: np.zeros(world, dtype=np.float64) for g in groups}
    node_f = {g: np.zeros(nodes, dtype=np.float64) for g in groups if g in NODE_TYPES}
    node_d = {g: np.zeros(nodes, dtype=np.float64) for g in groups if g in NODE_TYPES}
    for t, shape in enumerate(placement.tables):
        if placement.entry(t).type == ROW_WISE:
            features[ROW_WISE] += 1
            dims[ROW_WISE] += BYTES_PER_VALUE * shape.dim
    seen: set[tuple[int, int, int]] = set()
    for s in placement.shards:
        kind = placement.entry(s.table).type
        if kind in PAIRWISE_TYPES:
            features[kind][s.rank] += 1
            dims[kind][s.rank] += BYTES_PER_VALUE * s.cols
        elif kind in NODE_TYPES:
            key = (s.table, s.col_start, s.rank // gpn)
            if key not in seen:
                seen.add(key)
                node_f[kind][key[2]] += 1
                node_d[kind][key[2]] += BYTES_PER_VALUE * s.cols
    node_of = np.arange(world) // gpn
    for kind in node_f:
        features[kind] = node_f[kind][node_of]
        dims[kind] = node_d[kind][node_of]
    return features, dims


def torchrec_calls(
    placement: Placement, batch_size: int, index_bytes: int = 8, length_bytes: int = 4
) -> list[Call]:
    """The collectives TorchRec issues for the embedding tables in one step, in order
    (module docstring), leaving out those of one-rank groups. The ids all-to-alls are
    placeholders (zero traffic, `what` "ids"): their bytes depend on the batch
    (`CollectiveModel.batch_calls`)."""
    world, gpn = placement.world, placement.gpus_per_node
    nodes = placement.nodes
    if world <= 1:
        return []
    b = local_batches(batch_size, world).astype(np.float64)
    everyone = np.arange(world, dtype=np.int64)
    groups = sharding_groups(placement)
    features, dims = _widths(placement, groups)

    def call(phase: str, kind: str, what: str, op: str, members: np.ndarray,
             traffic: np.ndarray) -> Call:  # fmt: skip
        crosses = bool(members[0] // gpn != members[-1] // gpn)
        return Call(phase, kind, what, op, len(members), crosses, traffic)

    calls: list[Call] = []
    ones = np.ones(world, dtype=np.float64)
    for kind in groups:  # every group's splits go out before any group's tensors
        splits = _pairwise(ones * SPLITS_BYTES_PER_PEER, ones, everyone, gpn, world)
        calls.append(call(INPUT, kind, "splits", ALL_TO_ALL, everyone, splits))
    for kind in groups:
        lengths = _pairwise(b * length_bytes, features[kind], everyone, gpn, world)
        calls.append(call(INPUT, kind, "lengths", ALL_TO_ALL, everyone, lengths))
        calls.append(call(INPUT, kind, "ids", ALL_TO_ALL, everyone, np.zeros((world, 4))))
    backward: list[Call] = []
    for kind in groups:
        d = dims[kind]
        if kind in PAIRWISE_TYPES:
            fwd = _pairwise(d, b, everyone, gpn, world)
            calls.append(call(FORWARD, kind, "embeddings", ALL_TO_ALL, everyone, fwd))
            bwd = _pairwise(b, d, everyone, gpn, world)
            backward.append(call(BACKWARD, kind, "gradients", ALL_TO_ALL, everyone, bwd))
        elif kind == ROW_WISE:
            width = float(d[0])
            fwd = _ring(b, everyone, width, gpn, world, gather=False)
            calls.append(call(FORWARD, kind, "embeddings", REDUCE_SCATTER, everyone, fwd))
            bwd = _ring(b, everyone, width, gpn, world, gather=True)
            backward.append(call(BACKWARD, kind, "gradients", ALL_GATHER, everyone, bwd))
        else:  # per node: a reduce-scatter in the node, then an all-to-all across nodes
            intra_f = np.zeros((world, 4))
            intra_b = np.zeros((world, 4))
            # local index l's chunk: the samples of the GPUs with local index l
            chunk = b.reshape(nodes, gpn).sum(axis=0)
            for n in range(nodes):
                members = everyone[n * gpn : (n + 1) * gpn]
                width = float(d[n * gpn])
                intra_f += _ring(chunk, members, width, gpn, world, gather=False)
                intra_b += _ring(chunk, members, width, gpn, world, gather=True)
            cross_f = np.zeros((world, 4))
            cross_b = np.zeros((world, 4))
            for local in range(gpn):
                members = everyone[local::gpn]
                cross_f += _pairwise(d, b, members, gpn, world)
                cross_b += _pairwise(b, d, members, gpn, world)
            calls.append(call(FORWARD, kind, "embeddings", REDUCE_SCATTER, everyone[:gpn],
                              intra_f))  # fmt: skip
            calls.append(call(FORWARD, kind, "embeddings", ALL_TO_ALL, everyone[::gpn],
                              cross_f))  # fmt: skip
            backward.append(call(BACKWARD, kind, "gradients", ALL_TO_ALL, everyone[::gpn],
                                 cross_b))  # fmt: skip
            backward.append(call(BACKWARD, kind, "gradients", ALL_GATHER, everyone[:gpn],
                                 intra_b))  # fmt: skip
    return [c for c in calls + backward if c.size > 1]


def all_to_all_seconds(traffic: np.ndarray, link: np.ndarray) -> np.ndarray:
    """Seconds of all-to-alls: `traffic` (..., world, 4) -> (...), the slowest rank's
    intra-node max(sent, received) / bw + latency plus inter-node likewise (a fabric's
    latency only where the rank moves bytes over it)."""
    ti = np.maximum(traffic[..., SENT_INTRA], traffic[..., RECV_INTRA])
    te = np.maximum(traffic[..., SENT_INTER], traffic[..., RECV_INTER])
    rank = np.where(ti > 0, ti / link[0] + link[1], 0.0) + np.where(
        te > 0, te / link[2] + link[3], 0.0
    )
    return rank.max(axis=-1) if rank.shape[-1] else np.zeros(rank.shape[:-1])


def ring_seconds(call: Call, link: np.ndarray) -> float:
    """A ring's time: the most any rank sends over the slowest link the ring crosses,
    plus (n - 1) steps of that link's latency."""
    sent = call.sent()
    if call.size <= 1 or not (sent > 0).any():
        return 0.0
    bw, lat = (link[2], link[3]) if call.spans_nodes else (link[0], link[1])
    return float(sent.max() / bw + (call.size - 1) * lat)


def call_seconds(call: Call, link: np.ndarray) -> float:
    if call.op == ALL_TO_ALL:
        return float(all_to_all_seconds(call.traffic, link))
    return ring_seconds(call, link)


class CollectiveModel:
    """A placement's all-to-all per batch (module docstring), from the routing kernels'
    per-batch counts: `buffers(n)` gives the kernels' arrays for n batches (`lower`: the
    lower bound's pooled bytes per rank, (n, world, 4) int64; `ids`: ids per sharding
    group and rank, (n, groups, world, 4) int64), `columns` turns them into the results'
    columns."""

    def __init__(
        self,
        placement: Placement,
        batch_size: int,
        link: np.ndarray,
        *,
        model: str = TORCHREC,
        index_bytes: int = 8,
        length_bytes: int = 4,
    ) -> None:
        if model not in ALL_TO_ALL_MODELS:
            raise ConfigError(
                f"cluster.all_to_all_model: {model!r} is not one of {', '.join(ALL_TO_ALL_MODELS)}"
            )
        self.placement = placement
        self.world = placement.world
        self.model = model
        self.link = np.asarray(link, dtype=np.float64)
        self.index_bytes = int(index_bytes)
        self.groups = sharding_groups(placement)
        self.table_group = table_groups(placement)
        self.calls = (
            torchrec_calls(placement, batch_size, index_bytes, length_bytes)
            if model == TORCHREC
            else []
        )
        static = [c for c in self.calls if c.what != "ids"]
        world = self.world
        self.static_sent = np.zeros(world)
        self.static_received = np.zeros(world)
        self.static_phase = dict.fromkeys(PHASES, 0.0)
        self.static_intra = 0.0
        self.static_inter = 0.0
        self.static_s = 0.0
        for c in static:
            self.static_sent += c.sent()
            self.static_received += c.received()
            self.static_phase[c.phase] += float(c.sent().sum())
            self.static_intra += float(c.traffic[:, SENT_INTRA].sum())
            self.static_inter += float(c.traffic[:, SENT_INTER].sum())
            self.static_s += call_seconds(c, self.link)

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.model]

    def buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(lower, ids) zeroed for n batches (class docstring)."""
        return (
            np.zeros((n, self.world, 4), dtype=np.int64),
            np.zeros((n, max(len(self.groups), 1), self.world, 4), dtype=np.int64),
        )

    def batch_calls(self, ids: np.ndarray) -> list[Call]:
        """The TorchRec calls of one batch, the ids all-to-alls with that batch's ids
        (`ids`: (groups, world, 4) counts)."""
        out = []
        for c in self.calls:
            if c.what == "ids":
                g = self.groups.index(c.sharding)
                c = Call(c.phase, c.sharding, c.what, c.op, c.size, c.spans_nodes,
                         ids[g].astype(np.float64) * self.index_bytes)  # fmt: skip
            out.append(c)
        return out

    def columns(self, lower: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per batch: `all_to_all_bytes` (bytes the ranks send, every phase), its
        `_intra_bytes` and `_inter_bytes`, `all_to_all_s`, `all_to_all_input_bytes`,
        `all_to_all_forward_bytes`, `all_to_all_backward_bytes`; per batch and rank
        (n, world): `rank_all_to_all_sent_bytes`, `rank_all_to_all_received_bytes`."""
        n = lower.shape[0]
        if self.model == LOWER_BOUND:
            fwd = lower.astype(np.float64)
            intra = fwd[:, :, SENT_INTRA].sum(axis=1)
            inter = fwd[:, :, SENT_INTER].sum(axis=1)
            both = fwd.sum(axis=2)  # a rank's forward sent + received = its backward's too
            return {
                "all_to_all_bytes": 2 * (intra + inter),
                "all_to_all_intra_bytes": 2 * intra,
                "all_to_all_inter_bytes": 2 * inter,
                "all_to_all_s": 2 * all_to_all_seconds(lower, self.link),
                "all_to_all_input_bytes": np.zeros(n),
                "all_to_all_forward_bytes": intra + inter,
                "all_to_all_backward_bytes": intra + inter,
                "rank_all_to_all_sent_bytes": both,
                "rank_all_to_all_received_bytes": both.copy(),
            }
        traffic = ids[:, : len(self.groups)].astype(np.float64) * self.index_bytes
        sent = traffic[..., SENT_INTRA] + traffic[..., SENT_INTER]  # (n, groups, world)
        received = traffic[..., RECV_INTRA] + traffic[..., RECV_INTER]
        id_bytes = sent.sum(axis=(1, 2))
        intra = self.static_intra + traffic[..., SENT_INTRA].sum(axis=(1, 2))
        inter = self.static_inter + traffic[..., SENT_INTER].sum(axis=(1, 2))
        seconds = self.static_s + (
            all_to_all_seconds(traffic, self.link).sum(axis=1) if self.groups else 0.0
        )
        return {
            "all_to_all_bytes": intra + inter,
            "all_to_all_intra_bytes": intra,
            "all_to_all_inter_bytes": inter,
            "all_to_all_s": np.broadcast_to(seconds, (n,)).astype(np.float64),
            "all_to_all_input_bytes": self.static_phase[INPUT] + id_bytes,
            "all_to_all_forward_bytes": np.full(n, self.static_phase[FORWARD]),
            "all_to_all_backward_bytes": np.full(n, self.static_phase[BACKWARD]),
            "rank_all_to_all_sent_bytes": self.static_sent + sent.sum(axis=1),
            "rank_all_to_all_received_bytes": self.static_received + received.sum(axis=1),
        }


__all__ = [
    "ALL_TO_ALL_MODELS",
    "BACKWARD",
    "DESCRIPTIONS",
    "FORWARD",
    "INPUT",
    "LOWER_BOUND",
    "TORCHREC",
    "Call",
    "CollectiveModel",
    "all_to_all_seconds",
    "local_batches",
    "sharding_groups",
    "table_groups",
    "torchrec_calls",
]
