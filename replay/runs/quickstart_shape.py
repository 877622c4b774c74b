"""The quick start's trace: its workload, shape and checkpoint interval (`replay.runs.
quickstart` runs it). Standard library only, so that `replay quickstart --help` shows the
defaults without loading the replay.
"""

from __future__ import annotations

# the workload the plan covers: the replayed studies read its first batches
DEFAULT_WORKLOAD = "criteo-terabyte"
DEFAULT_BATCHES = 200
DEFAULT_BATCH_SIZE = 2048
DEFAULT_SEED = 0
CHECKPOINT_INTERVAL_BATCHES = 20
MIN_BATCHES = 100  # 5 checkpoints at that interval; a steady-state half of 50 batches

__all__ = [
    "CHECKPOINT_INTERVAL_BATCHES",
    "DEFAULT_BATCHES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SEED",
    "DEFAULT_WORKLOAD",
    "MIN_BATCHES",
]
