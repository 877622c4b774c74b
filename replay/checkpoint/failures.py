"""Failure draws on a deterministic checkpoint timeline: goodput, lost work, restore (DESIGN s.6).

A checkpoint model turns one replayed training timeline into *recovery points*
(`RecoveryPoints`). Positions are *failure-free time*: the place on the failure-free
timeline of the replayed batches, checkpoint stalls included, from 0 to the period P
(`period_s`). Point i becomes restorable (durable) at position `durable_s[i]`; restoring
it costs `restore_s[i]` of wall time (restart plus restore reads, chain included) and
training then continues from position `resume_s[i]` <= `durable_s[i]` (the state the
point holds). `durable_s` may exceed P: a persist that ends after the last batch.

Model and assumptions:

- Tiling. The run to simulate has a failure-free length H (`horizon_s`, P when 0). The
  period's timeline repeats: copy q = 0, 1, ... covers positions [q P, (q + 1) P), and
  point i of copy q is durable at q P + durable_s[i] and resumes at q P + resume_s[i]
  (computed in that order, in float64). Re-executed work replays the same timeline,
  checkpoint stalls included: a failure costs only the work lost and the restore.
- Failures arrive on the wall clock, independently of what training is doing: a renewal
  process with exponential gaps of mean `mtbf_s` (memoryless, constant hazard: the
  classical model of Young 1974 and Daly 2006), or an explicit sorted list of times
  (one draw).
- One draw follows the wall clock w and the position x from w = x = 0. Training runs at
  one position per second of wall time. If the next failure comes at or after the time
  the run would finish, w + (H - x), the draw ends there. Otherwise, at the failure's
  position f = x + (t_fail - w), training rolls back to the *recovery point*: among the
  points durable at f (global durable <= f, earlier copies included), the one with the
  most recent state (greatest global resume position; ties -> the later point, by copy
  then index); the point restored last also counts as durable (it is in storage: it was
  just read), so a failure in the re-executed stretch between its resume and durable
  positions rolls back to it, not further. With no point at all, training restarts
  from scratch: position 0 at a cost of `scratch_restore_s`. Lost work = f - resume
  position, x becomes the resume position, and the restore occupies the wall clock
  [t_fail, t_fail + cost). A failure inside a restore window restarts that restore
  from its own time (one more failure, no extra lost work, the full cost again); the
  restore time recorded for the interrupted attempt is the time it ran. So
  wall = H + lost work + restore time for every draw that finishes.
  Where durable and resume order agree across copies (every strategy whose persists
  finish in order), the recovery point is simply the latest durable point.
- Cap: a failure arriving after `max_wall_factor` x H of wall time stops its draw there
  (wall = its time, that failure not counted); such draws are counted in `draws_capped`
  and bias the goodput up (they had not finished). An MTBF giving more than 1e9 expected
  failures per draw before the cap (max_wall_factor x H / mtbf_s) is refused: it bounds
  the work of a hopeless draw and keeps every gap above the rounding of the wall clock.
- Goodput of a draw = useful training time of the horizon (useful_s x H / P, batches
  without checkpoint stalls) over its wall time, computed as (useful_s / P) x (H / wall)
  with the wall time floored at H (rounding), so no failure gives exactly useful_s / P.
  Failures are of two kinds: those that strike training (at a position: they lose the
  work since the recovery point) and those that strike a restore (they lose no work,
  training is not running, but restart it). Lost work is reported per failure that
  strikes training (`lost_work_per_training_failure_s`, over those failures of all
  draws), since averaging it over every failure would count each restore failure as a
  failure that lost nothing and understate it; the failures during restores are counted
  apart (`failures_during_restore`, and per draw). Restore time is per failure of either
  kind (each one starts a restore attempt).

Runs that see a failure (`given_failure`): when failures are rare (an expected 0.007 a
run), a few draws in a thousand see one, too few to say what one costs, and the 5th
percentile is a run without any. So the draws can be conditioned on the first failure
striking before the failure-free run ends (at H, wall time): its gap is drawn from the
exponential truncated to [0, H), -M ln(e^(-H/M) - u expm1(-H/M)) for the same u (the
inverse CDF; -M ln(u) as H grows), the later gaps as usual, so every draw sees at least
one failure and their mean is E[goodput | a failure]. A run sees a failure with
probability 1 - exp(-H / M) exactly (`p_any_failure`): it sees none when its first gap
outlasts it.

Randomness is counter-based: the k-th gap (k = 0, 1, ...) of draw d is
-mtbf_s ln(u), u = (top 52 bits of mix64(key_d + (k + 1) GAMMA) + 1/2) / 2^52, in (0, 1),
key_d = mix64(mix64(seed xor SALT) + (d + 1) GAMMA), with SplitMix64's mixer and
increment (Steele, Lea, Flood, OOPSLA 2014; `replay.workload.sampler.mix64`). Draw d is
the same whatever the number of draws and however draws are split across workers.

The per-draw loop is one numba kernel over all draws; the recovery-point lookup is a
binary search per copy, visiting only the copies that can still hold a later state.
`reference_evaluate_failures` is the slow, obviously correct version (linear scans over
every point of every copy) that the tests compare the kernel with, draw by draw.
`young_daly_interval_s` gives the first-order optimal checkpoint interval
sqrt(2 C M) (Young, CACM 17(9), 1974; Daly, FGCS 22(3), 2006) to report beside the
interval actually used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from replay._jit import kernel
from replay.checkpoint.points import RecoveryPoints
from replay.errors import ConfigError
from replay.workload.sampler import GAMMA, MASK64, mix64

SEED_SALT = 0xFA11ED5EED5A17ED  # seed -> stream root, so failure draws differ from workloads
MAX_FAILURES_AT_CAP = 1e9  # guard: max_wall_factor x H / mtbf_s above this is refused
_SALT64 = np.uint64(SEED_SALT)
_S12 = np.uint64(12)
_INV_2_52 = 1.0 / 4503599627370496.0


# -- inputs and outputs ----------------------------------------------------------------------


@dataclass(frozen=True)
class FailureDraws:
    """Per-draw outcomes (index d = draw first_draw + d)."""

    mtbf_s: float  # 0 with explicit failure times
    seed: int
    first_draw: int
    horizon_s: float
    wall_s: np.ndarray  # float64: wall time of the draw (floored at the horizon)
    failures: np.ndarray  # int64: failures counted (restarted restores included)
    failures_during_restore: np.ndarray  # int64: of those, the ones that struck a restore
    lost_s: np.ndarray  # float64: work lost, summed over the draw's failures
    restore_s: np.ndarray  # float64: wall time spent restoring, summed
    capped: np.ndarray  # bool: stopped at max_wall_factor x horizon
    goodput: np.ndarray  # float64: useful time of the horizon / wall_s


@dataclass(frozen=True)
class FailureStats:
    """Goodput statistics over failure draws on one timeline."""

    mtbf_s: float  # 0 with explicit failure times
    draws: int
    seed: int
    horizon_s: float
    goodput_mean: float
    goodput_p5: float  # 5th percentile over draws (numpy 'linear')
    goodput_min: float
    wall_s_mean: float
    failures_per_draw_mean: float  # every failure: training's and restores'
    failures_during_restore: int  # failures that struck a restore, over all draws
    failures_during_restore_per_draw_mean: float
    # work lost per failure that struck training, over those of all draws (0 if none);
    # failures during restores lose none and are left out (counted above)
    lost_work_per_training_failure_s: float
    restore_s_mean: float  # restore wall time per failure of either kind (0 if none)
    draws_capped: int

    def to_json(self) -> dict[str, Any]:
        return {
            k: int(v) if isinstance(v, int | np.integer) else float(v)
            for k, v in asdict(self).items()
        }


def young_daly_interval_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """First-order optimal checkpoint interval sqrt(2 x cost x MTBF) (Young 1974, Daly 2006)."""
    if not checkpoint_cost_s >= 0 or math.isinf(checkpoint_cost_s):
        raise ConfigError(f"checkpoint_cost_s: must be finite and >= 0, got {checkpoint_cost_s}")
    if not mtbf_s > 0:
        raise ConfigError(f"failures.mtbf_s: must be > 0, got {mtbf_s:g}")
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)


# -- validation ------------------------------------------------------------------------------


def _check_args(
    period_s: float,
    useful_s: float,
    points: RecoveryPoints,
    scratch_restore_s: float,
    horizon_s: float,
    mtbf_s: float,
    draws: int,
    seed: int,
    times_s: Sequence[float],
    max_wall_factor: float,
    first_draw: int,
) -> tuple[float, np.ndarray]:
    """Check the arguments; return the horizon and the sorted explicit failure times."""
    if not isinstance(points, RecoveryPoints):
        raise ConfigError(f"points: must be RecoveryPoints, got {type(points).__name__}")
    if not (period_s > 0 and math.isfinite(period_s)):
        raise ConfigError(f"period_s: must be finite and > 0, got {period_s:g}")
    if not (0 < useful_s <= period_s):
        raise ConfigError(f"useful_s: must be in (0, period_s = {period_s:g}], got {useful_s:g}")
    if not (scratch_restore_s >= 0 and math.isfinite(scratch_restore_s)):
        raise ConfigError(f"scratch_restore_s: must be finite and >= 0, got {scratch_restore_s:g}")
    if not (horizon_s >= 0 and math.isfinite(horizon_s)):
        raise ConfigError(f"failures.horizon_s: must be finite and >= 0, got {horizon_s:g}")
    if not (max_wall_factor >= 1 and math.isfinite(max_wall_factor)):
        raise ConfigError(
            f"failures.max_wall_factor: must be finite and >= 1, got {max_wall_factor:g}"
        )
    for name, value in (("draws", draws), ("seed", seed), ("first_draw", first_draw)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"failures.{name}: must be an integer, got {value!r}")
    if draws < 1:
        raise ConfigError(f"failures.draws: must be >= 1, got {draws}")
    if not 0 <= seed <= MASK64:
        raise ConfigError(f"failures.seed: must be in [0, 2^64), got {seed}")
    if first_draw < 0 or first_draw + draws > 1 << 62:
        raise ConfigError(f"failures.first_draw: must be in [0, 2^62 - draws), got {first_draw}")
    horizon = float(horizon_s) if horizon_s > 0 else float(period_s)
    try:
        raw = np.asarray(times_s, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise ConfigError(f"failures.times_s: must be a list of seconds, got {times_s!r}") from None
    bad = raw[~(np.isfinite(raw) & (raw >= 0))]
    if len(bad):
        raise ConfigError(f"failures.times_s: must be finite and >= 0, got {bad[0]:g}")
    times = np.sort(raw)
    if not len(times):
        if not mtbf_s > 0:  # NaN fails too
            raise ConfigError(f"failures.mtbf_s: must be > 0, got {mtbf_s:g}")
        expected = max_wall_factor * horizon / mtbf_s
        if expected > MAX_FAILURES_AT_CAP:
            raise ConfigError(
                f"failures.mtbf_s: {mtbf_s:g} s allows {expected:.3g} failures per draw before "
                f"the wall cap (max_wall_factor x horizon = {max_wall_factor * horizon:g} s), "
                f"more than {MAX_FAILURES_AT_CAP:g}: raise it or lower failures.max_wall_factor"
            )
    return horizon, times


# -- kernel ----------------------------------------------------------------------------------


@kernel(inline="always")
def _draw_key(seed: np.uint64, draw: np.int64) -> np.uint64:
    """The stream key of draw `draw`."""
    return mix64(mix64(seed ^ _SALT64) + np.uint64(draw + 1) * GAMMA)


@kernel(inline="always")
def _gap_uniform(key: np.uint64, k: np.int64) -> float:
    """The k-th uniform in (0, 1) of the stream `key` (52 random bits, centred)."""
    bits = mix64(key + np.uint64(k + 1) * GAMMA)
    return (np.float64(np.int64(bits >> _S12)) + 0.5) * _INV_2_52


@kernel(inline="always")
def _next_failure(
    t_prev: float, key: np.uint64, k: np.int64, mtbf: float, times: np.ndarray, before: float
) -> float:
    """The k-th failure time (k = 0, 1, ...), t_prev being the (k - 1)-th (0.0 for k = 0).
    `before` > 0: the first one conditioned on coming before it (module docstring)."""
    if len(times) > 0:
        if k < len(times):
            return times[k]
        return np.inf
    u = _gap_uniform(key, k)
    if k == 0 and before > 0.0:
        # inverse CDF of the exponential truncated to [0, before): -M ln(e^(-b/M) + u p)
        # with p = 1 - e^(-b/M), which is -M ln(u) as b grows
        return -mtbf * math.log(math.exp(-before / mtbf) - u * math.expm1(-before / mtbf))
    return t_prev + mtbf * -math.log(u)


@kernel
def _recovery_point(
    durable: np.ndarray, resume: np.ndarray, period: float, f: float
) -> tuple[np.int64, np.int64]:
    """(copy, index) of the durable point at position f with the latest state; (-1, -1) if none.

    Among the points of all copies with q P + durable <= f, the greatest q P + resume,
    ties to the later (copy, index). Within a copy the durable points are a prefix and its
    last point holds the latest state (both arrays are non-decreasing), found by binary
    search; copies are visited downwards from the highest that can hold a durable point
    until none can beat the best found (q P + max resume <= best).
    """
    n = len(durable)
    if n == 0 or durable[0] > f:
        return np.int64(-1), np.int64(-1)
    rmax = resume[n - 1]
    best_q = np.int64(-1)
    best_i = np.int64(-1)
    best_r = 0.0
    q = np.int64(f / period) + 1
    while q >= 0:
        base = q * period
        if best_q >= 0 and base + rmax <= best_r:
            break
        if base + durable[0] <= f:
            lo = 0
            hi = n - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if base + durable[mid] <= f:
                    lo = mid
                else:
                    hi = mid - 1
            r = base + resume[lo]
            if best_q < 0 or r > best_r:
                best_q = q
                best_i = np.int64(lo)
                best_r = r
        q -= 1
    return best_q, best_i


@kernel
def _draws_kernel(
    period: float,
    horizon: float,
    durable: np.ndarray,
    resume: np.ndarray,
    restore: np.ndarray,
    scratch: float,
    mtbf: float,
    seed: np.uint64,
    first_draw: np.int64,
    times: np.ndarray,
    cap: float,
    before: float,
    wall_out: np.ndarray,
    failures_out: np.ndarray,
    restore_failures_out: np.ndarray,
    lost_out: np.ndarray,
    restore_out: np.ndarray,
    capped_out: np.ndarray,
) -> None:
    """Simulate draws first_draw .. first_draw + len(wall_out) - 1 (module docstring)."""
    for dd in range(len(wall_out)):
        key = _draw_key(seed, first_draw + dd)
        k = np.int64(0)
        t = _next_failure(0.0, key, k, mtbf, times, before)
        k += 1
        w = 0.0
        x = 0.0
        nf = np.int64(0)
        nr = np.int64(0)  # of which during a restore
        lost = 0.0
        rest = 0.0
        capped = False
        has_floor = False  # the point restored last (still durable)
        floor_r = 0.0
        floor_c = 0.0
        while True:
            finish = w + (horizon - x)
            if t >= finish:
                w = finish
                break
            if t > cap:
                w = t
                capped = True
                break
            f = x + (t - w)
            q, i = _recovery_point(durable, resume, period, f)
            found = q >= 0
            if found:
                r = q * period + resume[i]
                c = restore[i]
            else:
                r = 0.0
                c = scratch
            if has_floor and (not found or r < floor_r):
                r = floor_r
                c = floor_c
                found = True
            if found:
                has_floor = True
                floor_r = r
                floor_c = c
            nf += 1
            lost += f - r
            x = r
            # the restore occupies [t, t + c); a failure inside restarts it
            while True:
                t_next = _next_failure(t, key, k, mtbf, times, before)
                k += 1
                if t_next >= t + c:
                    break
                rest += t_next - t
                if t_next > cap:
                    capped = True
                    break
                nf += 1
                nr += 1
                t = t_next
            if capped:
                w = t_next
                break
            rest += c
            w = t + c
            t = t_next
        wall_out[dd] = max(w, horizon)
        failures_out[dd] = nf
        restore_failures_out[dd] = nr
        lost_out[dd] = lost
        restore_out[dd] = rest
        capped_out[dd] = capped


# -- entry points ----------------------------------------------------------------------------


def simulate_draws(
    period_s: float,
    useful_s: float,
    points: RecoveryPoints,
    *,
    scratch_restore_s: float,
    horizon_s: float = 0.0,
    mtbf_s: float = 0.0,
    draws: int = 1000,
    seed: int = 0,
    times_s: Sequence[float] = (),
    max_wall_factor: float = 1000.0,
    first_draw: int = 0,
    given_failure: bool = False,
) -> FailureDraws:
    """Per-draw outcomes of draws first_draw .. first_draw + draws - 1 (one with times_s).
    `given_failure`: each draw's first failure conditioned to strike before the run ends
    (the outcomes of the runs that see at least one; module docstring)."""
    horizon, times = _check_args(
        period_s,
        useful_s,
        points,
        scratch_restore_s,
        horizon_s,
        mtbf_s,
        draws,
        seed,
        times_s,
        max_wall_factor,
        first_draw,
    )
    explicit = len(times) > 0
    n = 1 if explicit else int(draws)
    first = 0 if explicit else int(first_draw)
    mtbf = 0.0 if explicit else float(mtbf_s)
    wall = np.empty(n, dtype=np.float64)
    failures = np.empty(n, dtype=np.int64)
    restore_failures = np.empty(n, dtype=np.int64)
    lost = np.empty(n, dtype=np.float64)
    restore = np.empty(n, dtype=np.float64)
    capped = np.empty(n, dtype=np.bool_)
    _draws_kernel(
        float(period_s),
        horizon,
        points.durable_s,
        points.resume_s,
        points.restore_s,
        float(scratch_restore_s),
        mtbf,
        np.uint64(seed),
        np.int64(first),
        times,
        float(max_wall_factor) * horizon,
        _conditioned(given_failure, horizon, times),
        wall,
        failures,
        restore_failures,
        lost,
        restore,
        capped,
    )
    goodput = (float(useful_s) / float(period_s)) * (horizon / wall)
    return FailureDraws(
        mtbf_s=mtbf,
        seed=int(seed),
        first_draw=first,
        horizon_s=horizon,
        wall_s=wall,
        failures=failures,
        failures_during_restore=restore_failures,
        lost_s=lost,
        restore_s=restore,
        capped=capped,
        goodput=goodput,
    )


def summarize_draws(result: FailureDraws) -> FailureStats:
    """Goodput, wall, failure, lost-work and restore statistics over the draws."""
    total_failures = int(result.failures.sum())
    during_restore = int(result.failures_during_restore.sum())
    per_failure = max(total_failures, 1)
    per_training_failure = max(total_failures - during_restore, 1)
    return FailureStats(
        mtbf_s=result.mtbf_s,
        draws=len(result.wall_s),
        seed=result.seed,
        horizon_s=result.horizon_s,
        goodput_mean=float(np.mean(result.goodput)),
        goodput_p5=float(np.percentile(result.goodput, 5)),
        goodput_min=float(np.min(result.goodput)),
        wall_s_mean=float(np.mean(result.wall_s)),
        failures_per_draw_mean=float(np.mean(result.failures)),
        failures_during_restore=during_restore,
        failures_during_restore_per_draw_mean=float(np.mean(result.failures_during_restore)),
        lost_work_per_training_failure_s=float(result.lost_s.sum()) / per_training_failure,
        restore_s_mean=float(result.restore_s.sum()) / per_failure,
        draws_capped=int(result.capped.sum()),
    )


def evaluate_failures(
    period_s: float,
    useful_s: float,
    points: RecoveryPoints,
    *,
    scratch_restore_s: float,
    horizon_s: float = 0.0,
    mtbf_s: float = 0.0,
    draws: int = 1000,
    seed: int = 0,
    times_s: Sequence[float] = (),
    max_wall_factor: float = 1000.0,
    given_failure: bool = False,
) -> FailureStats:
    """Goodput statistics of `draws` failure draws (one with explicit `times_s`);
    `given_failure`: of runs that see at least one failure (`simulate_draws`)."""
    return summarize_draws(
        simulate_draws(
            period_s,
            useful_s,
            points,
            scratch_restore_s=scratch_restore_s,
            horizon_s=horizon_s,
            mtbf_s=mtbf_s,
            draws=draws,
            seed=seed,
            times_s=times_s,
            max_wall_factor=max_wall_factor,
            given_failure=given_failure,
        )
    )


def _conditioned(given_failure: bool, horizon: float, times: np.ndarray) -> float:
    """The kernels' `before`: the failure-free wall time the first failure is conditioned
    to come before, 0.0 for unconditioned draws."""
    if not given_failure:
        return 0.0
    if len(times):
        raise ConfigError("failures: given_failure conditions drawn failures, not explicit times")
    return float(horizon)


def p_any_failure(horizon_s: float, mtbf_s: float) -> float:
    """The chance that a run of `horizon_s` failure-free wall time sees a failure:
    1 - exp(-horizon_s / mtbf_s), exactly (a run sees none when its first exponential
    gap outlasts it); equal to 1 - exp(-expected failures) to first order when they
    are rare."""
    return -math.expm1(-horizon_s / mtbf_s) if mtbf_s > 0 else 0.0


RARE_FAILURES_P = 0.5  # below this chance of a failure, its cost is simulated apart


def goodput_given_failure(
    goodput_mean: float, failure_free_goodput: float, p_any: float, conditioned: Any
) -> float | None:
    """E[goodput | at least one failure]. From the unconditioned mean when most runs see
    a failure (E = (1 - p) g0 + p E[. | failure], its noise amplified at most 1 / p < 2x);
    else `conditioned()`, the mean of draws whose first failure is forced into the run
    (`given_failure`), since the few draws with a failure out of all would leave it to
    a handful. None when a failure cannot happen (p = 0)."""
    if p_any <= 0.0:
        return None
    if p_any >= RARE_FAILURES_P:
        return (goodput_mean - (1.0 - p_any) * failure_free_goodput) / p_any
    return float(conditioned())


# -- reference -------------------------------------------------------------------------------


class DrawResult(NamedTuple):
    wall_s: float
    failures: int
    lost_s: float
    restore_s: float
    capped: bool
    failures_during_restore: int


def _ref_mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _ref_gap_uniform(seed: int, draw: int, k: int) -> float:
    gamma = int(GAMMA)
    root = _ref_mix64(seed ^ SEED_SALT)
    key = _ref_mix64((root + (draw + 1) * gamma) & MASK64)
    bits = _ref_mix64((key + (k + 1) * gamma) & MASK64)
    return (float(bits >> 12) + 0.5) * 2.0**-52


def _reference_recovery_point(
    durable: Sequence[float], resume: Sequence[float], period: float, horizon: float, f: float
) -> tuple[int, int] | None:
    """(copy, index) of the durable point at f with the latest state, by a linear scan."""
    best = None
    best_r = 0.0
    q = 0
    while q * period < horizon:  # every copy that starts before the end
        for i in range(len(durable)):
            if q * period + durable[i] <= f:
                r = q * period + resume[i]
                if best is None or r >= best_r:  # ties: the later (copy, index)
                    best = (q, i)
                    best_r = r
        q += 1
    return best


def reference_evaluate_failures(
    period_s: float,
    useful_s: float,
    points: RecoveryPoints,
    *,
    scratch_restore_s: float,
    horizon_s: float = 0.0,
    mtbf_s: float = 0.0,
    draws: int = 1000,
    seed: int = 0,
    times_s: Sequence[float] = (),
    max_wall_factor: float = 1000.0,
    first_draw: int = 0,
    given_failure: bool = False,
) -> list[DrawResult]:
    """Slow, obviously correct per-draw outcomes (linear scans over every point of every copy)."""
    horizon, times_arr = _check_args(
        period_s,
        useful_s,
        points,
        scratch_restore_s,
        horizon_s,
        mtbf_s,
        draws,
        seed,
        times_s,
        max_wall_factor,
        first_draw,
    )
    times = [float(t) for t in times_arr]
    before = _conditioned(given_failure, horizon, times_arr)
    period = float(period_s)
    cap = float(max_wall_factor) * horizon
    durable = [float(v) for v in points.durable_s]
    resume = [float(v) for v in points.resume_s]
    restore = [float(v) for v in points.restore_s]
    out = []
    draw_ids = [0] if times else range(first_draw, first_draw + draws)
    for d in draw_ids:

        def failure_time(k: int, t_prev: float, d: int = d) -> float:
            if times:
                return times[k] if k < len(times) else math.inf
            u = _ref_gap_uniform(seed, d, k)
            if k == 0 and before > 0:
                # the exponential truncated to [0, before), by its inverse CDF
                # 1 - (1 - u)(1 - e^(-b/M)), written as the kernel rounds it
                return -mtbf_s * math.log(
                    math.exp(-before / mtbf_s) - u * math.expm1(-before / mtbf_s)
                )
            return t_prev + mtbf_s * -math.log(u)

        k = 0
        t = failure_time(k, 0.0)
        k += 1
        w = x = 0.0
        nf = nr = 0
        lost = rest = 0.0
        capped = False
        floor: tuple[float, float] | None = None  # (resume, cost) of the point restored last
        while True:
            if t >= w + (horizon - x):
                w = w + (horizon - x)
                break
            if t > cap:
                w = t
                capped = True
                break
            f = x + (t - w)
            best: tuple[float, float] | None = None
            found = _reference_recovery_point(durable, resume, period, horizon, f)
            if found is not None:
                q, i = found
                best = (q * period + resume[i], restore[i])
            if floor is not None and (best is None or best[0] < floor[0]):
                best = floor
            if best is not None:
                floor = best
                r, c = best
            else:
                r, c = 0.0, scratch_restore_s
            nf += 1
            lost += f - r
            x = r
            while True:
                t_next = failure_time(k, t)
                k += 1
                if t_next >= t + c:
                    break
                rest += t_next - t
                if t_next > cap:
                    capped = True
                    break
                nf += 1
                nr += 1
                t = t_next
            if capped:
                w = t_next
                break
            rest += c
            w = t + c
            t = t_next
        out.append(DrawResult(max(w, horizon), nf, lost, rest, capped, nr))
    return out
