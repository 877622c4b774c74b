"""`trainingcxl`: TrainingCXL's batch-aware undo logging in persistent memory
(Kwon et al., IEEE Micro 2023).

The embeddings live in a persistent tier and are updated in place. Before batch n
updates its rows, logic beside the memory copies the U_n distinct rows it will update
(with their optimizer state) from the data region to an undo-log region of the same
tier; every `dense_interval_batches` (K) batches it also logs the dense parameters. The
logging time is the tier's (U_n × state bytes read + written, at its bandwidths, plus
U_n accesses each way × latency / parallelism, plus the dense bytes written) and runs
in the memory's idle time beside the GPU's dense compute: stall = max(0, t_log −
compute of batch n); with `beside_compute = false` the log is written after the batch
and all of it stalls (the ladder's PCIe-NDP and CXL-D steps). Durable at every batch
end: a failure loses only the batch in flight (its undo log rolls it back); the dense
parameters restored may lag by up to K − 1 batches (TrainingCXL's relaxed dense
logging). Restore reads one undo log and the dense log. `checkpoint.target` does not
apply: the log region is in the rows' own tier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from replay.checkpoint.base import (
    NS,
    CheckpointContext,
    CheckpointLog,
    CheckpointResult,
    CheckpointStrategy,
    Timing,
    home_tier_name,
    points_from,
    register_strategy,
)
from replay.errors import ConfigError
from replay.system.spec import SystemSpec
from replay.trace.stream import distinct_bitmap, distinct_kernel

if TYPE_CHECKING:
    from replay.trace.stream import BatchRange


@register_strategy("trainingcxl")
class TrainingCxl(CheckpointStrategy):
    needs_updates = True
    state_bytes_per_key = 0.125  # 1 bit per key for the distinct count per batch

    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        home = home_tier_name(system)
        if not home or not system.tier(home).persistent:
            raise ConfigError(
                f"{where}.strategy: trainingcxl logs in place and needs the embeddings in a "
                f"persistent tier (tier {home!r} is not)"
            )

    @classmethod
    def target_name(cls, system: SystemSpec) -> str:
        return home_tier_name(system)  # logs in place: checkpoint.target does not apply

    def __init__(self, ctx: CheckpointContext) -> None:
        super().__init__(ctx)
        self.updated = np.zeros(ctx.num_batches, dtype=np.int64)
        self._seen = distinct_bitmap(ctx.total_rows)

    def observe(self, batch_range: BatchRange, base_s: Callable[[], np.ndarray]) -> None:
        br = batch_range
        out = self.updated[br.batch_start : br.batch_stop]
        if len(br.update_keys):
            distinct_kernel(br.update_keys, br.update_bounds, self._seen, out)

    def run(self, timing: Timing) -> CheckpointResult:
        ctx = self.ctx
        nb = timing.num_batches
        tier = ctx.system.tier(home_tier_name(ctx.system))
        k = ctx.spec.dense_interval_batches
        state = ctx.row_state_bytes
        granule = tier.access_bytes
        moved = -(-state // granule) * granule  # a row access moves whole lines
        undo = self.updated * state
        dense = np.where((np.arange(nb) + 1) % k == 0, ctx.dense_bytes, 0).astype(np.int64)
        t_log = (
            self.updated * moved / tier.read_bw_bytes_per_s
            + (self.updated * moved + dense) / tier.write_bw_bytes_per_s
            + self.updated * (tier.read_latency_ns + tier.write_latency_ns) * NS / tier.parallelism
        )
        # beside compute only the excess stalls; logged after the batch, all of it does
        beside = ctx.spec.beside_compute
        stall = np.maximum(0.0, t_log - timing.compute_s) if beside else t_log
        log = CheckpointLog(nb)
        log.stall_s = stall
        log.tier_read_bytes[tier.name] = self.updated * moved
        log.tier_write_bytes[tier.name] = self.updated * moved + dense
        starts = np.concatenate([[0.0], np.cumsum(timing.base_s + stall)])
        ends = starts[1:]
        read = (undo + ctx.dense_bytes) / tier.read_bw_bytes_per_s + tier.read_latency_ns * NS
        restore = list(ctx.system.failures.restart_s + read)
        max_undo = int(undo.max()) if nb else 0
        for b in range(nb):
            log.add(
                kind="log",
                batch=b,
                rows=int(self.updated[b]),
                bytes=int(undo[b] + dense[b]),
                dense_bytes=int(dense[b]),
                start_s=float(starts[b]),
                durable_s=float(ends[b]),
                stall_s=float(stall[b]),
                restore_bytes=int(undo[b]) + ctx.dense_bytes,
                # this batch's undo log + the last complete dense log + the one written now
                retained_bytes=int(undo[b]) + ctx.dense_bytes + int(dense[b]),
            )
        points = points_from(list(ends), list(ends), restore)
        return CheckpointResult(
            log,
            points,
            ctx.system.failures.restart_s,
            {"log_tier": tier.name, "dense_lag_batches_max": k - 1, "undo_bytes_max": max_undo},
        )
