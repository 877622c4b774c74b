"""Failure draws of partial recovery (CPR, Maeng et al. MLSys 2021): failures cost time to
restore, never work (issue 42).

Model (the failure simulator's, `replay.checkpoint.failures`, with one change): a run of
failure-free length H (the period's timeline tiled, checkpoint stalls included) and
failures on the wall clock with exponential gaps of mean `mtbf_s` (the cluster's MTBF:
N nodes' independent failures at 1 / node MTBF each). On a failure only the failed node's
shards roll back to their last checkpoint; training resumes where it was (no lost work)
after `restore_s` of wall time (restart and the replacement node's reads), during which a
further failure restarts the restore (one more failure, counted apart as one during a
restore, the time it ran kept). So wall = H + the restores' time, goodput =
(useful_s / period_s) x H / wall. What a failure loses is updates, counted by the plan
(`replay.plan.cluster_checkpoint`: the failed node's rows updated since its last durable
checkpoint).

The draws use the failure simulator's counter-based streams (`failures._draw_key`,
`failures._gap_uniform`): draw d sees the same gaps as draw d of the full-recovery
strategies (common random numbers). A draw stops at `max_wall_factor` x H of wall time
(counted in `draws_capped`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replay._jit import kernel
from replay.checkpoint.failures import (
    FailureDraws,
    FailureStats,
    _draw_key,
    _gap_uniform,
    summarize_draws,
)
from replay.errors import ConfigError


@kernel
def _partial_kernel(
    horizon: float,
    restore: float,
    mtbf: float,
    seed: np.uint64,
    first: np.int64,
    cap: float,
    before: float,
    wall: np.ndarray,
    failures: np.ndarray,
    restore_failures: np.ndarray,
    restore_time: np.ndarray,
    capped: np.ndarray,
) -> None:
    for i in range(len(wall)):
        key = _draw_key(seed, np.int64(first + i))
        k = np.int64(0)
        w = 0.0
        x = 0.0
        nf = 0
        nr = 0
        rt = 0.0
        hit_cap = False
        u = _gap_uniform(key, k)
        if before > 0.0:  # conditioned on a failure (`failures.simulate_draws`)
            t_next = -mtbf * math.log(math.exp(-before / mtbf) - u * math.expm1(-before / mtbf))
        else:
            t_next = mtbf * -math.log(u)
        k += 1
        while True:
            if t_next >= w + (horizon - x):
                w = w + (horizon - x)
                break
            if t_next > cap:
                w = cap
                hit_cap = True
                break
            x += t_next - w
            w = t_next
            nf += 1
            while True:  # restore attempts until one completes before the next failure
                g = mtbf * -math.log(_gap_uniform(key, k))
                k += 1
                if g < restore:
                    rt += g
                    w += g
                    nf += 1
                    nr += 1
                    if w > cap:
                        hit_cap = True
                        break
                    continue
                rt += restore
                t_next = w + g
                w += restore
                break
            if hit_cap:
                w = max(w, cap)
                break
        wall[i] = max(w, horizon)
        failures[i] = nf
        restore_failures[i] = nr
        restore_time[i] = rt
        capped[i] = hit_cap


def simulate_partial(
    period_s: float,
    useful_s: float,
    *,
    restore_s: float,
    horizon_s: float,
    mtbf_s: float,
    draws: int = 1000,
    seed: int = 0,
    max_wall_factor: float = 1000.0,
    given_failure: bool = False,
) -> FailureDraws:
    """Per-draw outcomes of partial recovery (module docstring); `given_failure`: of runs
    that see at least one failure, as `failures.simulate_draws`."""
    for name, v in (("period_s", period_s), ("useful_s", useful_s), ("horizon_s", horizon_s)):
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(f"partial recovery: {name} must be finite and > 0, got {v}")
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ConfigError(f"partial recovery: mtbf_s must be finite and > 0, got {mtbf_s}")
    if not (restore_s >= 0 and math.isfinite(restore_s)):
        raise ConfigError(f"partial recovery: restore_s must be finite and >= 0, got {restore_s}")
    if draws < 1:
        raise ConfigError(f"partial recovery: draws must be >= 1, got {draws}")
    n = int(draws)
    wall = np.empty(n, dtype=np.float64)
    failures = np.empty(n, dtype=np.int64)
    restore_failures = np.empty(n, dtype=np.int64)
    restore = np.empty(n, dtype=np.float64)
    capped = np.empty(n, dtype=np.bool_)
    horizon = float(horizon_s)
    _partial_kernel(
        horizon, float(restore_s), float(mtbf_s), np.uint64(seed), np.int64(0),
        float(max_wall_factor) * horizon, horizon if given_failure else 0.0, wall, failures,
        restore_failures, restore, capped,
    )  # fmt: skip
    return FailureDraws(
        mtbf_s=float(mtbf_s),
        seed=int(seed),
        first_draw=0,
        horizon_s=horizon,
        wall_s=wall,
        failures=failures,
        failures_during_restore=restore_failures,
        lost_s=np.zeros(n),
        restore_s=restore,
        capped=capped,
        goodput=(float(useful_s) / float(period_s)) * (horizon / wall),
    )


def evaluate_partial(period_s: float, useful_s: float, **kw: Any) -> FailureStats:
    """Goodput statistics of partial recovery's draws (`simulate_partial`'s keywords)."""
    return summarize_draws(simulate_partial(period_s, useful_s, **kw))


__all__ = ["evaluate_partial", "simulate_partial"]
