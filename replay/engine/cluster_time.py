"""A cluster's time and traffic per batch: the one-GPU accounting applied to each GPU, and
the step time the slowest GPU sets.

Placement. Beside `replay/engine/cluster.py` (the cluster replay, which calls
`RankAccount.add` once per batch range) and `replay/engine/account.py` (the one-GPU
model, reused unchanged): pure arithmetic on counters, nothing written.

Per GPU. Each rank's policy counters (hits, misses, fills, write-backs, updates, ...)
go through `account.account` exactly as a one-GPU run's do, with the system's tiers and
links as that GPU's own (every GPU of the cluster has the system's memory hierarchy: its
HBM, its host DRAM or SSD behind its own link -- ASSUMPTION: no two GPUs share a link or
a backing tier's bandwidth; in a DGX node each GPU has its own PCIe switch port, but the
host DRAM and the node's drives are shared). The rank's embedding time
(`rank_time_s`, batches x world) is account's `time_embedding_s`: fast tier + max(backing
tier, link), plus nothing for read-after-write (ASSUMPTION: `write_to_read_ns` stalls are
not counted in a cluster; they are in one GPU's `replay_trace`).

Compute, per GPU. `compute.seconds_per_batch` is taken as each GPU's time per step as
given (the step of a data-parallel rank); `compute.flops_per_sample` is multiplied by the
largest local batch, ceil(B / W) samples (TorchRec's data-parallel input split: each
rank computes the dense part of its own B / W samples), so a per-sample compute model
scales down with the world. `compute.other_seconds_per_batch` is per GPU per step.

The step time (per batch):

    step = compute + max over ranks(exposed embedding) + other + all-to-all + all-reduce

with exposed embedding = the rank's embedding time, or max(0, embedding - compute) with
`lookup.overlap_with_compute` (as for one GPU), the all-to-all forward + backward
(`all_to_all_s`, the slowest rank's collective, `cluster.py`) and the ring all-reduce of
the dense and data-parallel gradients (`allreduce_s`). No overlap between the embedding
lookups, the all-to-all, the compute and the all-reduce: conservative. TorchRec's
`TrainPipelineSparseDist` runs the next batch's input all-to-all and lookups while the
current batch computes, and DLRM's training (Mudigere et al., "Software-hardware co-design
for fast and scalable training of deep learning recommendation models", ISCA 2022)
overlaps the all-reduce with the backward pass; a pipelined job hides part of what this
step time adds, so read it as an upper bound.

Traffic per GPU (`rank_traffic`, each rank's row of account's columns): its HBM bytes
read and written (the fast tier), its PCIe bytes both ways (the lookup link: misses,
write-backs, a `uvm` table's every lookup), its drives' bytes read and written (ssd-tbe's
store tier) -- one table's kernel decides which of these its lookups cost
(`replay.engine.kernels`; `replay.engine.cluster` feeds them).

Cluster columns (one per batch, the names a one-GPU run's `batches.parquet` has, so
reports read them): counts and bytes summed over the GPUs (cluster traffic); tier, link
and embedding times the slowest GPU's (max over ranks); compute and other as one GPU's;
`time_s` the step time; energy the whole cluster's: every GPU's dynamic energy, plus W
times one GPU's static and compute energy over the step (ASSUMPTION: the NVLink and
network energy of the all-to-all is not counted).
"""

from __future__ import annotations

import numpy as np

from replay.engine.account import Shape, account
from replay.policies.base import NUM_COUNTERS
from replay.system.spec import SystemSpec

# account's columns that are the same on every rank (the compute model), and those a
# cluster takes from the slowest rank; `batch`, `time_s` and energies are rebuilt
_SAME = frozenset({"time_compute_s", "time_other_s", "time_checkpoint_s"})
_REBUILT = frozenset({"batch", "time_s", "energy_static_j", "energy_compute_j", "energy_j"})


def _slowest(name: str) -> bool:
    return name.endswith("_time_s") or name in (
        "time_embedding_s",
        "time_embedding_exposed_s",
        "time_raw_stall_s",
    )


RANK_TRAFFIC = ("hbm_bytes", "pcie_bytes", "drive_read_bytes", "drive_write_bytes")


def rank_traffic(system: SystemSpec, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per row of `account`'s columns the bytes of each kind of traffic: the fast tier's
    (HBM) reads and writes, the lookup link's (PCIe) both ways, the store tier's (the
    drives: ssd-tbe) reads and writes (zeros where the system has no such tier)."""
    p = system.policy
    zero = np.zeros(len(cols["lookups"]), dtype=np.float64)

    def tier(name: str, key: str) -> np.ndarray:
        return cols[f"{name}_{key}"].astype(np.float64) if name else zero

    fast = p.tier if p.name == "static" else p.fast_tier
    link = system.lookup.link
    pcie = (
        cols[f"{link}_h2d_bytes"].astype(np.float64) + cols[f"{link}_d2h_bytes"] if link else zero
    )
    store = p.store_tier if p.name == "ssd-tbe" else ""
    return {
        "hbm_bytes": tier(fast, "read_bytes") + tier(fast, "write_bytes"),
        "pcie_bytes": pcie,
        "drive_read_bytes": tier(store, "read_bytes"),
        "drive_write_bytes": tier(store, "write_bytes"),
    }


def local_batch(batch_size: int, world: int) -> int:
    """The largest local batch of a rank: ceil(B / W) samples."""
    return -(-batch_size // world)


class RankAccount:
    """Accumulates the cluster's per-batch columns range by range (module docstring)."""

    def __init__(
        self, system: SystemSpec, shape: Shape, world: int, num_batches: int, unit_rows: int
    ) -> None:
        self.system = system
        self.world = world
        self.unit_rows = unit_rows
        self.rank_shape = Shape(
            local_batch(shape.batch_size, world), shape.tables, shape.embedding_dim
        )
        self.nb = num_batches
        self.columns: dict[str, np.ndarray] = {}
        self.rank_time_s = np.zeros((num_batches, world), dtype=np.float64)
        self.rank_exposed_s = np.zeros((num_batches, world), dtype=np.float64)
        # per GPU the bytes each kernel moves (module docstring): HBM read + written, PCIe
        # both ways, the drives read and written
        self.rank_traffic = {
            name: np.zeros((num_batches, world), dtype=np.float64) for name in RANK_TRAFFIC
        }
        self.store_width = 0  # ssd-tbe's store columns per batch (0: none)

    def add(
        self,
        window: slice,
        counters: np.ndarray,
        lookups: np.ndarray,
        updates: np.ndarray,
        distinct: np.ndarray,
        store: np.ndarray | None = None,
    ) -> None:
        """One range: `counters` (world, n, counters), `lookups` and `updates` (world, n)
        per rank, `distinct` (n) the source's distinct rows per batch, `store` (world, n,
        columns) ssd-tbe's L2 and store rows per rank. One `account` call for all ranks
        (its arithmetic is per row, so the ranks' rows are stacked)."""
        world, n = lookups.shape
        if store is not None:
            self.store_width = store.shape[2]
        elif self.store_width:  # a range with no batch: the columns still exist
            store = np.zeros((world, n, self.store_width), dtype=np.int64)
        cols = account(
            self.system,
            self.rank_shape,
            counters.reshape(world * n, -1),
            lookups.reshape(-1),
            np.zeros(world * n, dtype=np.int64),
            updates.reshape(-1),
            self.unit_rows,
            store=None if store is None else store.reshape(world * n, -1),
        )
        self.rank_time_s[window] = cols["time_embedding_s"].reshape(world, n).T
        self.rank_exposed_s[window] = cols["time_embedding_exposed_s"].reshape(world, n).T
        for name, values in rank_traffic(self.system, cols).items():
            self.rank_traffic[name][window] = values.reshape(world, n).T
        for name, values in cols.items():
            if name in _REBUILT:
                continue
            if name not in self.columns:
                self.columns[name] = np.zeros(self.nb, dtype=values.dtype)
            per = values.reshape(world, n)
            if name == "distinct_rows":
                self.columns[name][window] = distinct
            elif name in _SAME:
                self.columns[name][window] = per[0]
            elif _slowest(name):
                self.columns[name][window] = per.max(axis=0)
            else:
                self.columns[name][window] = per.sum(axis=0)

    def finish(self, all_to_all_s: np.ndarray, allreduce_s: np.ndarray) -> dict[str, np.ndarray]:
        """The cluster's per-batch columns in account's order, `time_s` the step time,
        then the network's times."""
        nb = self.nb
        if not self.columns:  # no batch: account's columns, empty
            self.add(
                slice(0, 0),
                np.zeros((self.world, 0, NUM_COUNTERS), dtype=np.int64),
                np.zeros((self.world, 0), dtype=np.int64),
                np.zeros((self.world, 0), dtype=np.int64),
                np.zeros(0, dtype=np.int64),
            )
        c = self.columns
        compute = c["time_compute_s"]
        step = (
            compute
            + c["time_embedding_exposed_s"]
            + c["time_checkpoint_s"]
            + c["time_other_s"]
            + all_to_all_s
            + allreduce_s
        )
        system = self.system
        static_w = sum(t.static_power_w for t in system.tiers) + sum(
            lk.static_power_w for lk in system.links
        )
        comp = system.compute
        e_static = self.world * static_w * step
        e_compute = self.world * (
            comp.active_power_w * compute + comp.idle_power_w * (step - compute)
        )
        out: dict[str, np.ndarray] = {"batch": np.arange(nb, dtype=np.int64)}
        for name, values in c.items():
            if name == "energy_dynamic_j":
                out["time_all_to_all_s"] = np.asarray(all_to_all_s, dtype=np.float64)
                out["time_allreduce_s"] = np.asarray(allreduce_s, dtype=np.float64)
                out["time_s"] = step
            out[name] = values
        out["energy_static_j"] = e_static
        out["energy_compute_j"] = e_compute
        out["energy_j"] = c["energy_dynamic_j"] + e_static + e_compute
        return out


__all__ = ["RANK_TRAFFIC", "RankAccount", "local_batch", "rank_traffic"]
