"""Checkpoint strategies, one registered plug-in per module (see `base` for the contract)."""

from replay.checkpoint import (  # noqa: F401  (registration)
    check_n_run,
    checkfreq,
    cpr,
    fastpersist,
    none,
    sync_full,
    trainingcxl,
)
from replay.checkpoint.base import (
    STRATEGIES,
    CheckpointContext,
    CheckpointResult,
    CheckpointStrategy,
    Timing,
    register_strategy,
)

__all__ = [
    "STRATEGIES",
    "CheckpointContext",
    "CheckpointResult",
    "CheckpointStrategy",
    "Timing",
    "register_strategy",
]
