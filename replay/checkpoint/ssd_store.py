"""Checkpoints of an SSD-backed table (`ssd-tbe`, FBGEMM's SSD TBE; issue 45 item 3).

The state lives in the RocksDB store on the SSD (`policy.store_tier`); the newest copies
of some rows are in L1 (beside the GPU) and L2 (host DRAM). FBGEMM's checkpoint path
(fbgemm_gpu/tbe/ssd/training.py: `split_embedding_weights(should_flush=True)` ->
`flush`) first writes L1's resident rows to L2 (`ssd_db.set`, L2's victims to the store)
and then every row of L2 to the store (`EmbeddingKVDB::flush`, RocksdbWriteMode.FLUSH),
synchronously (`torch.cuda.synchronize()`, then the flush waits for its writes); the
checkpoint then reads the table from the store (`KVTensorWrapper`, a RocksDB snapshot):

- a full checkpoint reads every row from the store, sequentially (Σ rows x state bytes)
  and writes the state to the checkpoint target;
- an incremental one reads only the rows updated since the last one, each a point read
  of whole blocks of the store (`CheckpointContext.home_read_bytes`), and writes those.

So the checkpoint models treat the store as the tables' home tier, on the host side
(`home_tier_name`, `tables_on_device`), and add the flush before each checkpoint.

Assumptions (stated, not measured): L1 and L2 are full at a checkpoint (their capacities:
an upper bound once the run has warmed up; a row in both is counted twice); the flush's
L1 rows cross the lookup link device to host, L2's rows are read from the backing tier,
and the store writes all of them times `policy.ssd_write_amplification`; the flush
stalls training for its link time plus its store write time (the two run one after the
other in FBGEMM's `flush`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay.system import cachelib

if TYPE_CHECKING:
    from replay.system.spec import SystemSpec

NS = 1e-9


def ssd_backed(system: SystemSpec) -> bool:
    """Whether the tables live in an SSD store behind two caches (`ssd-tbe`)."""
    return system.policy.name == "ssd-tbe"


@dataclass(frozen=True)
class Flush:
    """The caches' rows written to the store before a checkpoint, and its time."""

    l1_rows: int
    l2_rows: int
    link_bytes: int  # L1's rows, device to host over the lookup link
    l2_read_bytes: int  # L2's rows read from the backing tier
    store_write_bytes: int  # what the drive writes (x the write amplification)
    seconds: float


def cache_flush(system: SystemSpec, total_rows: int, row_state_bytes: int) -> Flush | None:
    """The flush before each checkpoint of an SSD-backed table; None for other systems."""
    if not ssd_backed(system):
        return None
    # the FBGEMM TBE cache's module (5 kernels) for SSD-backed tables only: every
    # checkpoint strategy imports this module (`replay.checkpoint.base`)
    from replay.policies.tbe import TBEPolicy

    p = system.policy
    l1 = min(TBEPolicy.capacity(system, 1, row_state_bytes, total_rows), total_rows)
    l2 = min(cachelib.capacity_rows(p.l2_capacity_bytes, row_state_bytes), total_rows)
    link_bytes = l1 * row_state_bytes
    store_bytes = round((l1 + l2) * row_state_bytes * p.ssd_write_amplification)
    store = system.tier(p.store_tier)
    seconds = store_bytes / store.write_bw_bytes_per_s + store.write_latency_ns * NS
    if system.lookup.link and link_bytes:
        lk = system.link(system.lookup.link)
        seconds += link_bytes / lk.d2h_bw_bytes_per_s + lk.latency_ns * NS
    return Flush(l1, l2, link_bytes, l2 * row_state_bytes, store_bytes, seconds)
