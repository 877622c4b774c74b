"""`RecoveryPoints`: the points of one period that a failure can roll back to, as the
failure model (`replay.checkpoint.failures`) reads them.

A module apart from the failure model, whose kernels import the workload sampler's mixer
(25 kernels): every checkpoint strategy returns recovery points, and a run without
failures (`[failures]` off) needs nothing else of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.errors import ConfigError


def _as_points_array(name: str, values: Any) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ConfigError(f"recovery points: {name} must be one-dimensional, got {arr.ndim} dims")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"recovery points: {name} must be finite")
    return arr


@dataclass(frozen=True)
class RecoveryPoints:
    """Recovery points of one period, in failure-free seconds (see the docstring of
    `replay.checkpoint.failures`).

    The arrays are converted to contiguous float64 and checked on construction.
    """

    durable_s: np.ndarray  # non-decreasing: position at which the point becomes restorable
    resume_s: np.ndarray  # non-decreasing, 0 <= resume_s <= durable_s: where training resumes
    restore_s: np.ndarray  # >= 0: restart + restore wall time when recovering from it

    def __post_init__(self) -> None:
        durable = _as_points_array("durable_s", self.durable_s)
        resume = _as_points_array("resume_s", self.resume_s)
        restore = _as_points_array("restore_s", self.restore_s)
        if not len(durable) == len(resume) == len(restore):
            raise ConfigError(
                "recovery points: durable_s, resume_s and restore_s must have the same "
                f"length, got {len(durable)}, {len(resume)}, {len(restore)}"
            )
        if np.any(np.diff(durable) < 0):
            raise ConfigError("recovery points: durable_s must be non-decreasing")
        if np.any(np.diff(resume) < 0):
            raise ConfigError("recovery points: resume_s must be non-decreasing")
        if np.any(resume < 0) or np.any(resume > durable):
            raise ConfigError("recovery points: need 0 <= resume_s <= durable_s")
        if np.any(restore < 0):
            raise ConfigError("recovery points: restore_s must be >= 0")
        object.__setattr__(self, "durable_s", durable)
        object.__setattr__(self, "resume_s", resume)
        object.__setattr__(self, "restore_s", restore)

    @classmethod
    def empty(cls) -> RecoveryPoints:
        """No recovery point (no checkpointing): every failure restarts from scratch."""
        return cls(np.empty(0), np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return len(self.durable_s)


__all__ = ["RecoveryPoints"]
