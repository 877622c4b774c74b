"""`none`: no checkpoint. Nothing is written; a failure restarts training from scratch."""

from __future__ import annotations

from replay.checkpoint.base import (
    CheckpointLog,
    CheckpointResult,
    CheckpointStrategy,
    Timing,
    register_strategy,
)
from replay.checkpoint.points import RecoveryPoints
from replay.system.spec import SystemSpec


@register_strategy("none")
class NoCheckpoint(CheckpointStrategy):
    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        return None  # no target needed

    def run(self, timing: Timing) -> CheckpointResult:
        log = CheckpointLog(timing.num_batches)
        return CheckpointResult(log, RecoveryPoints.empty(), self.ctx.system.failures.restart_s, {})
