"""`static`: every table lives in one named tier; nothing moves between tiers.

Every lookup is served by that tier (counted as a hit of it) and every updated row is
updated there. No per-key state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from replay.errors import ConfigError
from replay.policies.base import HITS, NUM_COUNTERS, UPDATES_FAST, Policy, register_policy
from replay.trace.stream import BatchRange

if TYPE_CHECKING:
    from replay.system.spec import SystemSpec


@register_policy("static")
class StaticPolicy(Policy):
    cached = False

    @classmethod
    def check_spec(cls, system: SystemSpec, tier_names: set[str], where: str) -> None:
        if system.policy.tier not in tier_names:
            raise ConfigError(f"{where}.tier: no tier named {system.policy.tier!r}")

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        out[:, HITS] = np.diff(batch_range.bounds)
        out[:, UPDATES_FAST] = np.diff(batch_range.update_bounds)


def reference_static(batches: Sequence[tuple[Sequence[int], Sequence[int]]]) -> np.ndarray:
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    for b, (lookups, updates) in enumerate(batches):
        out[b, HITS] = len(lookups)
        out[b, UPDATES_FAST] = len(updates)
    return out
