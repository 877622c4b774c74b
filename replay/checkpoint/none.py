"""`none`: no checkpoint. Nothing is written; a failure restarts training from scratch."""

from __future__ import annotations

import numpy as np

from replay.checkpoint.base import (
    CheckpointLog,
    CheckpointResult,
    CheckpointStrategy,
    Timing,
    no_points,
    register_strategy,
)
from replay.system.spec import SystemSpec


@register_strategy("none")
class NoCheckpoint(CheckpointStrategy):
    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        return None  # no target needed

    def run(self, timing: Timing) -> CheckpointResult:
        log = CheckpointLog(timing.num_batches)
        log.stall_s = np.zeros(timing.num_batches)
        return CheckpointResult(log, no_points(), self.ctx.system.failures.restart_s, {})
