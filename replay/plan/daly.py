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

from replay.errors import ConfigError

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
    with np.errstate(over="ignore", invalid="ignore"):
        return (
            m
            * np.exp(np.asarray(restore_s, dtype=np.float64) / m)
            * np.expm1(
                (np.asarray(tau_s, dtype=np.float64) + np.asarray(cost_s, dtype=np.float64)) / m
            )
        )


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
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: √(2δM)[1 + √(δ/2M)/3 + δ/(18M)] − δ for δ < 2M, else M."""
    _check(mtbf_s, cost_s)
    if cost_s >= 2.0 * mtbf_s:
        return float(mtbf_s)
    r = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - cost_s


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
    lo = max(float(lo_s), 1e-12 * m)
    hi = float(hi_s)
    if not hi >= lo:
        raise ConfigError(f"best_interval: empty range [{lo_s}, {hi_s}]")
    rest = restore_s if callable(restore_s) else (lambda _t: float(restore_s))  # type: ignore[misc]

    def goodput(tau: float) -> float:
        return float(daly_goodput(tau, cost_of_tau(tau), rest(tau), m))

    tau0 = min(max(daly_interval_s(max(cost_of_tau(min(m, hi)), 0.0), m), lo), hi)
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


__all__ = [
    "best_interval",
    "daly_goodput",
    "daly_interval_s",
    "daly_wall_s",
    "young_interval_s",
]
