"""Where a cluster's checkpoints go, and how long writing and restoring them takes (issue 42).

Model. A cluster of N nodes, each with G GPUs, `nics` NICs of `nic` bytes/s each way,
`drives` drives of `drive_write` / `drive_read` bytes/s (`replay.system.spec.ClusterSpec`),
writes a checkpoint the way FastPersist and PyTorch's distributed checkpoint do: every GPU
writes its own shards, all at once. Node n writes B_n bytes: the shards of its GPUs (rows x
(values + optimizer state)) plus its share of what every rank holds alike (the dense
parameters, the data-parallel tables' state and the reader position), written once, split
evenly across the N G data-parallel ranks as FastPersist splits them (`node_bytes`).

Resources work at once, so a node's write takes the longest of the times its bytes need at
each resource it crosses (`node_write_s`):

- `local-nvme` (the node's own drives, D_w = drives x drive_write): drives
  (B_n + in_n) / D_w, where in_n are the buddy copies it receives; with `replicas` r, node n
  sends its B_n to the r nodes after it (ring order, n+1 .. n+r mod N): NIC out r B_n / E,
  NIC in in_n / E with in_n = sum_j=1..r B_(n-j), E = nics x nic. Without replicas a node's
  checkpoint dies with the node.
- `shared-fs`, `object-store`: B_n / min(E, per_client_write, aggregate_write / N) + the
  store's latency: each node its share of the shared cap (all nodes write at once; a cap of
  0 is none). The checkpoint survives any node's failure.
- a per-writer cap (`checkpoint.writer_bw_bytes_per_s` > 0): each GPU writes its own
  bytes at most at the cap, so a node takes at least its busiest GPU's bytes / cap (given
  each rank's bytes; else its bytes / (G x cap), an even split).

The write time is the slowest node's: W = max_n node_write_s[n] (`write_s`). The rank-0
baseline (`torch.save` from data-parallel rank 0, FastPersist's baseline) gathers every
other node's bytes over node 0's NICs, then one writer writes the whole state:
W_0 = (S - B_0) / E + S / w_1 + latency, S = sum_n B_n, w_1 = min(writer cap, D_w) on
local drives or min(writer cap, E, per_client_write, aggregate_write) to a store
(`rank0_write_s`); buddy copies of it add r S / E.

Restore after a node failure (`restore_node_failure_s`, restart excluded), failed node f
uniform over the nodes (the mean over f): local drives with replicas: the replacement node
pulls B_f from its buddy, min(E, D_r) (its NICs, the buddy's drives), while every other
node reads its own B_n from its drives at D_r: max(B_f / min(E, D_r), max_(n != f) B_n /
D_r); a store: every node reads its B_n from the store at min(E, per_client_read,
aggregate_read / N), plus the latency; local drives without replicas: no copy (None: the
job restarts from scratch). Partial recovery (CPR, `partial_restore_s`): only the
replacement node reads, B_f at min(E, D_r) from a buddy or min(E, per_client_read,
aggregate_read) from a store.

ASSUMPTIONS: bandwidths are peak and add no protocol overhead; a node's NICs and drives
serve checkpoint traffic alone while it is written; buddy copies are written at checkpoint
time (durable when the copies are); every node reaches a store through its own NICs; a
single-node job needs no NIC for its own drives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.system.spec import CheckpointStoreSpec, ClusterSpec

LOCAL = "local-nvme"


def node_bytes(
    sharded_per_rank: np.ndarray, replicated_bytes: float, cluster: ClusterSpec
) -> np.ndarray:
    """Bytes each node writes: its GPUs' shards plus its share of the bytes every rank holds
    alike (dense parameters, data-parallel tables, reader position), split over all ranks."""
    per_rank = np.asarray(sharded_per_rank, dtype=np.float64)
    world = cluster.world_size
    if per_rank.shape != (world,):
        raise ConfigError(f"checkpoint store: {per_rank.size} ranks' bytes given for {world} GPUs")
    per_rank = per_rank + float(replicated_bytes) / world
    return per_rank.reshape(cluster.nodes, cluster.gpus_per_node).sum(axis=1)


def _cap(*caps: float) -> float:
    """The least of the caps above 0 (inf when none)."""
    live = [c for c in caps if c > 0]
    return min(live) if live else float("inf")


@dataclass(frozen=True)
class StoreModel:
    """A cluster's checkpoint path: its nodes, where checkpoints go, buddy copies and a
    per-writer cap (module docstring)."""

    cluster: ClusterSpec
    store: CheckpointStoreSpec
    replicas: int = 0
    writer_bw_bytes_per_s: float = 0.0  # per writer (GPU); 0: none

    def __post_init__(self) -> None:
        c = self.cluster
        if self.replicas >= c.nodes and self.replicas > 0:
            raise ConfigError(
                f"checkpoint.replicas: {self.replicas} buddy copies need {self.replicas} other "
                f"nodes; the job has {c.nodes} (more replicas than nodes)"
            )
        if self.local and c.drives_per_node <= 0:
            raise ConfigError(
                "checkpoint.store.kind: local-nvme needs drives in every node "
                "(cluster.drives_per_node > 0), or give a shared-fs or object-store"
            )
        if (not self.local or self.replicas > 0) and self.nic_bw <= 0:
            raise ConfigError(
                "cluster.nics_per_node: checkpoints that leave the node (a store or buddy "
                "copies) need at least one NIC per node"
            )

    @property
    def local(self) -> bool:
        return self.store.kind == LOCAL

    @property
    def nic_bw(self) -> float:
        """E: a node's NICs together, each way."""
        return self.cluster.nics_per_node * self.cluster.nic_bw_bytes_per_s

    @property
    def drive_write_bw(self) -> float:
        return self.cluster.drives_per_node * self.cluster.drive_write_bw_bytes_per_s

    @property
    def drive_read_bw(self) -> float:
        return self.cluster.drives_per_node * self.cluster.drive_read_bw_bytes_per_s

    @property
    def writers_cap(self) -> float:
        w = self.writer_bw_bytes_per_s
        return self.cluster.gpus_per_node * w if w > 0 else float("inf")

    @property
    def survives_node_failure(self) -> bool:
        """Whether a failed node's checkpoint has a copy (a store, or buddy replicas)."""
        return not self.local or self.replicas > 0

    def store_write_bw(self, writers: bool = True) -> float:
        """One node's bandwidth to the store: NICs, per-client cap, its share of the
        aggregate cap, its writers (`writers`)."""
        s = self.store
        agg = s.aggregate_write_bw_bytes_per_s / self.cluster.nodes
        caps = (self.writers_cap,) if writers else ()
        return _cap(self.nic_bw, s.per_client_write_bw_bytes_per_s, agg, *caps)

    def writers_s(self, b: np.ndarray, ranks: np.ndarray | None = None) -> np.ndarray:
        """Per node, its writers' time under the per-writer cap: its busiest GPU's bytes /
        cap given each rank's bytes `ranks`, else its bytes / (G x cap); 0 without a cap."""
        b = np.asarray(b, dtype=np.float64)
        w = self.writer_bw_bytes_per_s
        if w <= 0:
            return np.zeros_like(b)
        if ranks is None:
            return b / self.writers_cap
        c = self.cluster
        per = np.asarray(ranks, dtype=np.float64).reshape(c.nodes, c.gpus_per_node)
        return per.max(axis=1) / w

    def store_read_bw(self, readers: int) -> float:
        s = self.store
        agg = s.aggregate_read_bw_bytes_per_s / max(readers, 1)
        return _cap(self.nic_bw, s.per_client_read_bw_bytes_per_s, agg)

    def node_write_s(self, b: np.ndarray, ranks: np.ndarray | None = None) -> np.ndarray:
        """Seconds each node takes to write its bytes `b` (and its buddy copies); `ranks`:
        each GPU's bytes, for the per-writer cap (`writers_s`)."""
        b = np.asarray(b, dtype=np.float64)
        writers = self.writers_s(b, ranks)
        if not self.local:
            t = np.maximum(b / self.store_write_bw(writers=False), writers)
            return t + self.store.latency_s
        r = self.replicas
        incoming = sum((np.roll(b, j) for j in range(1, r + 1)), np.zeros_like(b))
        t = np.maximum((b + incoming) / self.drive_write_bw, writers)
        if r > 0:
            e = self.nic_bw
            t = np.maximum(t, np.maximum(r * b / e, incoming / e))
        return t + self.store.latency_s

    def write_s(self, b: np.ndarray, ranks: np.ndarray | None = None) -> float:
        """W: the slowest node's write."""
        return float(np.max(self.node_write_s(b, ranks), initial=0.0))

    def rank0_write_s(self, b: np.ndarray) -> float:
        """The rank-0 baseline: gather over node 0's NICs, then one writer."""
        b = np.asarray(b, dtype=np.float64)
        total = float(b.sum())
        gather = (total - float(b[0])) / self.nic_bw if self.cluster.nodes > 1 else 0.0
        one = self.writer_bw_bytes_per_s
        if self.local:
            writer = _cap(one, self.drive_write_bw)
        else:
            s = self.store
            caps = (s.per_client_write_bw_bytes_per_s, s.aggregate_write_bw_bytes_per_s)
            writer = _cap(one, self.nic_bw, *caps)
        copies = self.replicas * total / self.nic_bw if self.local and self.replicas else 0.0
        return gather + total / writer + copies + self.store.latency_s

    def restore_node_failure_s(self, b: np.ndarray) -> float | None:
        """Reads after a node failure when the whole job restores (restart excluded),
        mean over the failed node; None: the failed node's checkpoint has no copy."""
        b = np.asarray(b, dtype=np.float64)
        if not self.survives_node_failure:
            return None
        if not self.local:
            nodes = self.cluster.nodes
            return float(np.max(b) / self.store_read_bw(nodes) + self.store.latency_s)
        d = self.drive_read_bw
        pull = b / min(self.nic_bw, d)
        local = b / d
        n = len(b)
        if n == 1:
            return float(pull[0])
        # the slowest other node when f fails: the largest local read but f's own
        order = np.argsort(local)
        first, second = local[order[-1]], local[order[-2]]
        others = np.where(np.arange(n) == order[-1], second, first)
        return float(np.mean(np.maximum(pull, others)))

    def partial_restore_s(self, b: np.ndarray) -> float | None:
        """CPR: only the replacement node reads its B_f (mean over f); None: no copy."""
        b = np.asarray(b, dtype=np.float64)
        if not self.survives_node_failure:
            return None
        if self.local:
            return float(np.mean(b) / min(self.nic_bw, self.drive_read_bw))
        return float(np.mean(b) / self.store_read_bw(1) + self.store.latency_s)


def store_of(store: CheckpointStoreSpec | None) -> CheckpointStoreSpec:
    """The store given, or a cluster's default: its nodes' own drives."""
    return store if store is not None else CheckpointStoreSpec()


__all__ = ["LOCAL", "StoreModel", "node_bytes", "store_of"]
