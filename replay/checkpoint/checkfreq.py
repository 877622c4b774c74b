"""`checkfreq`: CheckFreq's snapshot-then-persist checkpoints at a tuned frequency
(Mohan et al., FAST 2021).

Every k batches the full state is snapshotted into host memory (training stalls for the
copy, which cannot complete before the previous persist has), then persisted in the
background (`snapshot_persist`). k is `checkpoint.interval_batches` (or `interval_s`) when
given; otherwise CheckFreq's rule from the profiled times:

    k = max(ceil((t_full − t_snapshot) / t_iter), 1)

with t_full the time to persist the full state, t_snapshot the snapshot time and t_iter
the mean failure-free batch time; then k is raised while the steady overhead
t_snapshot / (k × t_iter) exceeds `checkpoint.max_overhead_fraction` (CheckFreq's 5%).
"""

from __future__ import annotations

import math

from replay.checkpoint.base import (
    CheckpointResult,
    CheckpointStrategy,
    Planned,
    Timing,
    register_strategy,
    schedule,
    snapshot_persist,
    snapshot_tier_name,
)
from replay.errors import ConfigError
from replay.system.spec import SystemSpec


def checkfreq_interval(t_full: float, t_snapshot: float, t_iter: float, max_overhead: float) -> int:
    """CheckFreq's k: the persist of one checkpoint ends before the next snapshot, and the
    snapshot stall stays within `max_overhead` of the training time."""
    if t_iter <= 0:
        return 1
    k = max(math.ceil((t_full - t_snapshot) / t_iter), 1)
    return max(k, math.ceil(t_snapshot / (max_overhead * t_iter) * (1 - 1e-12)))


@register_strategy("checkfreq")
class CheckFreq(CheckpointStrategy):
    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        super().check_spec(system, where)
        if not snapshot_tier_name(system):
            raise ConfigError(
                f"{where}.snapshot_tier: the system has no volatile tier off the training "
                "device to snapshot into"
            )
        ck = system.checkpoint
        if ck.interval_batches > 0 and ck.interval_s > 0:
            raise ConfigError(f"{where}: give interval_batches or interval_s, not both")

    def run(self, timing: Timing) -> CheckpointResult:
        ctx = self.ctx
        nbytes = ctx.state_bytes
        t_full = ctx.write_s(nbytes)
        t_snap = ctx.snapshot_s(nbytes)
        t_iter = float(timing.base_s.mean()) if timing.num_batches else 0.0
        rule = checkfreq_interval(t_full, t_snap, t_iter, ctx.spec.max_overhead_fraction)
        batches = schedule(ctx.spec, timing.base_s, default_every=rule)
        planned = [Planned(int(b), "full", ctx.total_rows, nbytes, nbytes) for b in batches]
        result = snapshot_persist(ctx, timing, planned)
        result.summary.update(
            {
                "rule_interval_batches": rule,
                "t_full_s": t_full,
                "t_snapshot_s": t_snap,
                "t_iter_s": t_iter,
            }
        )
        return result
