"""Daly's complete checkpoint model, Young's and Daly's optimal intervals, and a numerical
optimizer for checkpoint costs that vary with the interval.

Model (Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3), 2006, eq. (13)): failures arrive as a Poisson process of mean time
between failures M; τ seconds of work are followed by a checkpoint that stalls training
for δ; a failure costs the work since the last checkpoint plus a restart of R (restart and
restore; a failure during it restarts it). The expected wall time per τ of work is

    T(τ) = M e^{R/M} (e^{(τ + δ)/M} − 1),      goodput(τ) = τ / T(τ).

Optima: Young's first order τ = √(2δM) (Young, "A first order approximation to the
optimum checkpoint interval", CACM 17(9), 1974); Daly's higher order (FGCS 2006, eq. (37))

    τ = √(2δM) [1 + √(δ/(2M))/3 + δ/(18M)] − δ   for δ < 2M,   τ = M otherwise.

`best_interval` maximises τ / T(τ) numerically when δ (and R) depend on τ, as the
incremental strategies' do: a log-spaced grid around Daly's optimum at the cost of the
current guess, then golden-section search on the grid's best bracket (in ln τ).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from replay._units import format_duration, format_number, format_percent
from replay.errors import ConfigError, opt

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _check(mtbf_s: float, cost_s: float) -> None:
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ConfigError(f"mtbf_s: must be finite and > 0, got {mtbf_s}")
    if not (cost_s >= 0 and math.isfinite(cost_s)):
        raise ConfigError(f"cost_s: must be finite and >= 0, got {cost_s}")


def daly_wall_s(
    tau_s: float | np.ndarray,
    cost_s: float | np.ndarray,
    restore_s: float | np.ndarray,
    mtbf_s: float,
) -> np.ndarray:
    """Expected wall time per τ of work, M e^{R/M} (e^{(τ+δ)/M} − 1) (arrays broadcast)."""
    m = float(mtbf_s)
    y = np.asarray(tau_s, dtype=np.float64) + np.asarray(cost_s, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = y / m
        # M (e^x − 1) written as y (e^x − 1) / x: the same number, but an MTBF so long that
        # x falls below the smallest normal float (1e308 s) neither loses digits nor gives
        # 0 (a wall time of 0 would read as no goodput at all)
        small = x < 1e-8
        ratio = np.where(small, 1.0 + x / 2.0, np.expm1(x) / np.where(small, 1.0, x))
        wall = np.exp(np.asarray(restore_s, dtype=np.float64) / m) * y * ratio
        return np.where(np.isinf(x), np.inf, wall)


def daly_goodput(
    tau_s: float | np.ndarray,
    cost_s: float | np.ndarray,
    restore_s: float | np.ndarray,
    mtbf_s: float,
) -> float | np.ndarray:
    """Expected goodput τ / (M e^{R/M} (e^{(τ+δ)/M} − 1)) of Daly's complete model."""
    if not mtbf_s > 0:
        raise ConfigError(f"mtbf_s: must be > 0, got {mtbf_s}")
    tau = np.asarray(tau_s, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out = np.where(tau > 0, tau / daly_wall_s(tau, cost_s, restore_s, mtbf_s), 0.0)
    out = np.nan_to_num(out, nan=0.0, posinf=0.0)
    return float(out) if out.ndim == 0 else out


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum √(2δM) (CACM 1974)."""
    _check(mtbf_s, cost_s)
    # two roots: 2δM itself overflows for an MTBF near the largest float
    return math.sqrt(2.0 * cost_s) * math.sqrt(mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: √(2δM)[1 + √(δ/2M)/3 + δ/(18M)] − δ for δ < 2M, else M."""
    _check(mtbf_s, cost_s)
    if cost_s >= 2.0 * mtbf_s:
        return float(mtbf_s)
    r = cost_s / (2.0 * mtbf_s)
    young = math.sqrt(2.0 * cost_s) * math.sqrt(mtbf_s)  # 2δM may overflow, its roots do not
    return young * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - cost_s


def best_interval(
    cost_of_tau: Callable[[float], float],
    restore_s: float | Callable[[float], float],
    mtbf_s: float,
    *,
    lo_s: float = 0.0,
    hi_s: float = math.inf,
    grid: int = 121,
    span: float = 30.0,
    rel_tol: float = 1e-6,
) -> float:
    """The work interval τ in [lo_s, hi_s] that maximises τ / T(τ) with δ = cost_of_tau(τ)
    and R = restore_s (or restore_s(τ)).

    Start: τ0 = Daly's optimum at δ(τ0), by three fixed-point steps from Daly's optimum at
    δ(M). Search: `grid` log-spaced points over [τ0 / span, τ0 × span] ∩ [lo_s, hi_s]
    (moved outwards while the best point sits on an edge that is not a bound), then
    golden-section search in ln τ between the best point's neighbours, to `rel_tol`.
    """
    m = float(mtbf_s)
    if not (m > 0 and math.isfinite(m)):
        raise ConfigError(f"mtbf_s: must be finite and > 0, got {mtbf_s}")
    hi = float(hi_s)
    if not hi >= float(lo_s):
        raise ConfigError(f"best_interval: empty range [{lo_s}, {hi_s}]")
    # the search's floor keeps ln τ finite; an MTBF so long that the floor passes the top
    # (no failure within the range) leaves the top, where goodput τ / (τ + δ) is highest
    lo = max(float(lo_s), min(1e-12 * m, hi))
    rest = restore_s if callable(restore_s) else (lambda _t: float(restore_s))

    def goodput(tau: float) -> float:
        return float(daly_goodput(tau, cost_of_tau(tau), rest(tau), m))

    # δ is read inside [lo, hi] only: below lo a strategy's cost may not exist (an MTBF
    # far below one batch would ask for a fraction of a batch)
    tau0 = min(max(daly_interval_s(max(cost_of_tau(min(max(m, lo), hi)), 0.0), m), lo), hi)
    for _ in range(3):
        tau0 = min(max(daly_interval_s(max(cost_of_tau(tau0), 0.0), m), lo), hi)
    if tau0 <= 0:
        tau0 = lo
    a, b = max(lo, tau0 / span), min(hi, tau0 * span)
    for _ in range(40):
        xs = np.geomspace(a, b, grid) if b > a else np.array([a])
        gs = np.array([goodput(float(x)) for x in xs])
        i = int(np.argmax(gs))
        if i == 0 and a > lo:
            a, b = max(lo, a / span), min(hi, xs[min(1, len(xs) - 1)] * 1.0)
            continue
        if i == len(xs) - 1 and b < hi:
            a, b = max(lo, xs[max(i - 1, 0)]), min(hi, b * span)
            continue
        break
    if len(xs) == 1:
        return float(xs[0])
    left = math.log(xs[max(i - 1, 0)])
    right = math.log(xs[min(i + 1, len(xs) - 1)])
    best_x, best_g = float(xs[i]), float(gs[i])
    # golden-section search for the maximum of goodput(e^u) on [left, right]
    c = right - GOLDEN * (right - left)
    d = left + GOLDEN * (right - left)
    gc, gd = goodput(math.exp(c)), goodput(math.exp(d))
    while right - left > rel_tol:
        if gc >= gd:
            right, d, gd = d, c, gc
            c = right - GOLDEN * (right - left)
            gc = goodput(math.exp(c))
        else:
            left, c, gc = c, d, gd
            d = left + GOLDEN * (right - left)
            gd = goodput(math.exp(d))
    u = (left + right) / 2.0
    g = goodput(math.exp(u))
    return math.exp(u) if g >= best_g else best_x


# -- no progress: an MTBF too short for any interval -------------------------------------------


class MtbfTooShort(ConfigError):
    """No checkpoint strategy makes progress at the cluster's MTBF (`replay.plan.checkpoint`
    says when): the run would take more than `max_wall_factor` times its training time.

    `mtbf_s` is the MTBF planned for and `min_mtbf_s` the smallest one that plans (rounded
    up as `duration_at_least` prints it), None when none up to 1e300 s does. For a caller
    that names its own options (`--nodes` with `--node-mtbf` rather than `--cluster-mtbf`):
    the message is "a cluster MTBF of {mtbf_text} (OPTIONS) is {reason}; REMEDY{batch_note}",
    batch_note naming the time per batch where one batch outlasts the MTBF that would do."""

    def __init__(
        self,
        message: str,
        *,
        mtbf_s: float,
        min_mtbf_s: float | None,
        reason: str,
        batch_note: str = "",
    ) -> None:
        super().__init__(message)
        self.mtbf_s = mtbf_s
        self.min_mtbf_s = min_mtbf_s
        self.mtbf_text = _seconds(mtbf_s)
        self.reason = reason
        self.batch_note = batch_note


_OPTION_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def _round_up(seconds: float) -> tuple[str, float]:
    """(text, its seconds): `seconds` rounded up to 2 significant digits in the largest
    unit of at least 1 (`12s`, `1.3h`, `0.0042s`), as a duration option takes it."""
    s = float(seconds)
    unit, size = next(((u, z) for u, z in _OPTION_UNITS if s >= z), ("s", 1.0))
    value = s / size
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    text = f"{math.ceil(value / step * (1 - 1e-12)) * step:.2g}"
    if float(text) * size < s:  # the decimal text fell below: one step up
        text = f"{float(text) + step:.2g}"
    return f"{text}{unit}", float(text) * size


def duration_at_least(seconds: float) -> str:
    """A duration of at least `seconds`, 2 significant digits, to paste as an option."""
    return _round_up(seconds)[0]


def _seconds(s: float) -> str:
    """A duration for a message: `format_duration`'s units, plain seconds below 1 µs."""
    return format_duration(s) if s >= 1e-6 else f"{s:.3g} s"


def progress_bound(restart_s: float, tb: float, mtbf_s: float) -> float:
    """An upper bound on any strategy's goodput at `mtbf_s`, e^(−restart / M) φ(t_b / M)
    with φ(x) = x / (e^x − 1): R >= the restart and τ >= one batch in τ / T(τ)."""
    x = tb / mtbf_s
    phi = 1.0 if x < 1e-8 else (0.0 if x > 700 else x / math.expm1(x))
    return math.exp(-restart_s / mtbf_s) * phi


def least_mtbf(progresses: Callable[[float], bool], mtbf_s: float) -> float | None:
    """The smallest MTBF above `mtbf_s` (which does not progress) at which `progresses`,
    within 2% and rounded up as `duration_at_least` prints it; None above 1e300 s.
    Goodput rises with the MTBF at every interval: doubling, then bisection in ln M."""
    low, high = mtbf_s, 2.0 * mtbf_s
    while not progresses(high):
        low, high = high, 2.0 * high
        if high > 1e300:
            return None
    while high / low > 1.02:
        mid = math.sqrt(low) * math.sqrt(high)  # low x high may overflow
        low, high = (low, mid) if progresses(mid) else (mid, high)
    return _round_up(high)[1]


def mtbf_too_short(
    *,
    mtbf_s: float,
    least_s: float | None,
    horizon_s: float,
    restart_s: float,
    tb: float,
    system: str,
    which: str,
    best: tuple[str, float],
    max_wall_factor: float,
) -> MtbfTooShort:
    """The refusal: what was given (the MTBF and the option that sets it), why nothing
    progresses (failures expected, the restart, one batch) and the MTBF that would plan."""
    # far enough down every expected goodput underflows to 0: then none is "best"
    # in % as every goodput is; past 6 decimals a figure says nothing more than "none"
    share = format_percent(best[1]) if best[1] >= 1e-6 else "less than 0.0001%"
    best_text = f"; the best expected goodput is {best[0]}'s, {share}" if best[1] else ""
    reason = (
        f"too short for {which} to make progress: the run's {_seconds(horizon_s)} of "
        f"training expects {format_number(horizon_s / mtbf_s)} failures, a restart alone takes "
        f"{_seconds(restart_s)} ({system}'s failures.restart_s) and one batch {_seconds(tb)}, "
        f"so the run would take more than {max_wall_factor:,.0f} times its training time"
        f"{best_text}"
    )
    if least_s is None:
        remedy = (
            "no cluster MTBF up to 1e300 s makes progress: check "
            f"{opt('--time-per-batch', 'time_per_batch_s')}"
        )
    else:
        d = duration_at_least(least_s)
        remedy = opt(
            f"give --cluster-mtbf {d} or more (or --node-mtbf / --nodes of at least {d})",
            f"give mtbf_s >= {least_s:g}",
        )
    note = ""
    if least_s is None or tb > least_s:  # one batch outlasts any MTBF that would do
        note = (
            f", or check {opt('--time-per-batch', 'time_per_batch_s')}: one batch of "
            f"{_seconds(tb)} is longer than the MTBF"
        )
    given = opt("--cluster-mtbf, or --node-mtbf / --nodes", "mtbf_s")
    message = f"a cluster MTBF of {_seconds(mtbf_s)} ({given}) is {reason}; {remedy}{note}"
    return MtbfTooShort(message, mtbf_s=mtbf_s, min_mtbf_s=least_s, reason=reason, batch_note=note)


__all__ = [
    "MtbfTooShort",
    "best_interval",
    "daly_goodput",
    "daly_interval_s",
    "daly_wall_s",
    "duration_at_least",
    "least_mtbf",
    "mtbf_too_short",
    "progress_bound",
    "young_interval_s",
]
