"""Check-N-Run's plan model (Eisenman et al., "Check-N-Run: a Checkpointing System for
Training Deep Learning Recommendation Models", NSDI 2022): the costs of incremental,
quantized checkpoints at any interval, and the modes `replay plan` searches.

`replay.plan.checkpoint_models` holds the notation and the other strategies,
`replay.plan.checkpoint` the whole-run search; this module holds what is Check-N-Run's
own. Its engine model is `replay/checkpoint/check_n_run.py`; with uniform batches and the
mean touched curve the two agree (tests/test_plan_checkpoint.py replays them side by side).

Model. Rows weigh b_q = quantized_row_bytes(dim, bits) + optimizer bytes (the optimizer
state is stored unquantized; bits 0 is fp32, 4 × dim bytes); F = rows × b_q + dense +
reader position (the baseline, written before batch 0 without a stall); an increment of
u rows weighs u b_q + dense + reader position. Increment i (i = 1, 2, ...) holds
u_i = touched(k) rows (`consecutive`: restore reads F and every increment since, so the
chain grows over the run) or touched(i k) (`one-shot`: F plus the last one).
`intermittent`: one-shot increments while touched(j k) <= full_threshold_fraction × rows,
then a full; the cycle of n* increments and one full repeats (the plan may instead fix
n*, `increments_per_full`: see below). Timing is `snapshot_persist`: stall_i =
max(Snap(n_i), W(n_{i−1}) − τ) (n_0: the baseline or the cycle's full), durable W(n_i)
after the snapshot; synchronous: stall W(n_i) (+ max(0, W(F) − τ) after the baseline).
Restore from checkpoint i: restart + Rd(chain_i), Rd(n) = n / read_bw + read latency
(the target's, capped by checkpoint.link). Storage: the largest "what the last durable
one needs + the new one" (consecutive: the chain before it plus it; one-shot and
intermittent: F + the previous increment + the new one, or two fulls). Consecutive and
one-shot chains are walked over the whole run (`horizon_s`), intermittent over one
full-to-full cycle (tiled over the run); a cycle that does not close within the run is
the one-shot walk.

Modes the plan searches (`modes_for`). The paper keeps increments three ways (its
"one-shot differential", "consecutive incremental" and "intermittent differential"
checkpoints) and quantizes the checkpointed rows to b in {2, 3, 4, 8} bits; its method is
the intermittent one with quantized rows (a new full baseline once the one-shot increment
has grown too large). Its quantizer is asymmetric with a min and scale per row, adaptive
(the range shrunk against outliers) at 4 bits and below; `replay.checkpoint.quantize`
models the plain asymmetric one, the same bytes. The plan evaluates every increment ×
every bit width the spec allows (`QUANTIZE_BITS`: 0 = fp32, 2, 3, 4, 8), each at its own
best interval (Daly's complete model, as for the other strategies), simulates each at
that interval with the same draws, and answers with the paper's method, intermittent
with quantized rows, at the width and refresh of the highest simulated goodput (`ranked`;
ties: lower stall, less storage, faster restore). The other modes are listed with their
numbers (`papers_method: false`): a consecutive chain may do better by goodput (on the
quickstart's 30-hour Terabyte run, consecutive 2-bit 99.937% against intermittent 2-bit
99.930%, at 21x the storage, 0.31 against 0.014 TiB: its chain of increments, and what a
restore reads, grow with the run), which the plan shows and does not answer. For intermittent
the refresh is searched with the interval: n = increments per full (equivalently the
threshold: the full replaces increment n + 1), by `best_cycle` over n with the interval
re-searched coarsely for each n, then fully at the best n. The answer reports n and a
`full_threshold_fraction` that gives n at the chosen interval on the touched curve
(`threshold_for_cycle`), so `--set checkpoint.increment=intermittent
checkpoint.full_threshold_fraction=F checkpoint.quantize_bits=B` replays it. Fewer bytes
per row never cost goodput (every stall and read shrinks), so within an increment mode
the fewest bits allowed win: the ranking is by goodput, the accuracy is the caveat.

Explicit knobs (`--set checkpoint.increment=...`, `quantize_bits=...`,
`full_threshold_fraction=...`). The plan is an answer, not a replay of the spec: it still
evaluates every mode and answers with the best by goodput, since a knob set for a replay
(or a preset's default) is not a statement that other modes are unwanted. The spec's
own mode is always among the listed modes and flagged (`spec: true`): consecutive and
one-shot with the spec's bits are grid points; an intermittent spec is listed as well
with its own threshold rule (label "..., threshold F"), beside the searched cycle. A user
who fixed a mode reads its goodput, storage and restore there, next to the answer.

Accuracy. Quantized rows come back with an error (`quantization_error`, measured on the
sample `replay.checkpoint.quantize.DISTRIBUTION`), and training continues from them
after every restore. Check-N-Run quantizes "without degrading training accuracy" (its
abstract) by choosing the bit width from the restores a run expects: the fewer the bits,
the fewer restores training tolerates within its accuracy budget, 8 bits being the
fallback. The paper's per-width restore counts are not reproduced here: the plan does
not model accuracy, and attaches `caveat` (the source and the run's expected failures,
from the simulator) to the modes of 2 to 4 bits, for a reader to check the width against
the paper's bit-width selection before adopting it.

Sources: the paper (https://www.usenix.org/conference/nsdi22/presentation/eisenman) and
its NSDI talk, whose outline names the three increment modes and the bit-width selection.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from replay._units import format_number
from replay.checkpoint.base import NS, READER_POSITION_BYTES, CheckpointContext, points_from
from replay.checkpoint.failures import RecoveryPoints
from replay.checkpoint.quantize import quantization_error, quantized_row_bytes
from replay.errors import ConfigError, opt
from replay.system.spec import INCREMENTS, QUANTIZE_BITS, SystemSpec, optimizer_bytes_per_row

MAX_CHECKPOINTS = 2_000_000  # walked over a run (consecutive / one-shot chains)
SEARCH_MAX_CHECKPOINTS = 200_000  # the plan's interval search starts at horizon / this
INCREMENT_ORDER = ("consecutive", "one-shot", "intermittent")
LOW_BITS = (2, 3, 4)  # the widths that carry the accuracy caveat (8 bits: the fallback)
SOURCE = (
    'Eisenman et al., "Check-N-Run: a Checkpointing System for Training Deep Learning '
    'Recommendation Models", NSDI 2022 (quantization bit-width selection)'
)
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
assert set(INCREMENT_ORDER) == set(INCREMENTS)


class ModelInputs(Protocol):
    """What the model reads (`replay.plan.checkpoint_models.Inputs` provides it)."""

    @property
    def ctx(self) -> CheckpointContext: ...
    @property
    def tb(self) -> float: ...  # time per batch
    @property
    def horizon_s(self) -> float: ...  # the run's training time without stalls
    @property
    def dim(self) -> int: ...  # embedding dim, for quantized rows
    @property
    def cycle(self) -> int | None: ...  # intermittent: fixed increments per full
    @property
    def restart_s(self) -> float: ...
    def touched_at(self, k: Any) -> np.ndarray: ...  # touched(k), clipped to the rows


In = TypeVar("In", bound=ModelInputs)


@dataclass(frozen=True)
class Walk:
    """The model at one interval: StrategyCost's values (without the strategy and the
    interval), the failure-free period the recovery points cover and its useful time;
    the points are built on demand (the interval search reads the values only)."""

    values: dict[str, float]
    period_s: float
    useful_s: float
    points_of: Callable[[], RecoveryPoints]

    @property
    def points(self) -> RecoveryPoints:
        return self.points_of()


# -- the model --------------------------------------------------------------------------------


def row_bytes(inp: ModelInputs) -> int:
    """b_q: one stored row, its values at the spec's bits plus its optimizer state."""
    bits = inp.ctx.spec.quantize_bits
    opt_bytes = optimizer_bytes_per_row(inp.ctx.system.model.optimizer, inp.dim)
    return quantized_row_bytes(inp.dim, bits) + opt_bytes


def full_bytes(inp: ModelInputs) -> float:
    """F = rows × b_q + dense + reader position."""
    ctx = inp.ctx
    return float(ctx.total_rows * row_bytes(inp) + ctx.dense_bytes + READER_POSITION_BYTES)


def _affine(per_byte: float, fixed: float, nbytes: np.ndarray) -> np.ndarray:
    return np.where(nbytes > 0, nbytes * per_byte + fixed, 0.0)


def rates(ctx: CheckpointContext) -> tuple[float, float, float, float, float, float]:
    """(per byte, fixed) seconds of a write to the target, a snapshot and a read: the
    formulas of `CheckpointContext.write_s`, `snapshot_s` and `read_s`, for arrays."""
    spec, system = ctx.spec, ctx.system
    target = ctx.target()
    snap = ctx.snapshot_tier()
    snap_bw = snap.write_bw_bytes_per_s
    read_bw = target.read_bw_bytes_per_s
    if spec.link:
        snap_bw = min(snap_bw, system.link(spec.link).d2h_bw_bytes_per_s)
        read_bw = min(read_bw, system.link(spec.link).h2d_bw_bytes_per_s)
    return (
        1.0 / ctx.write_bw(),
        target.write_latency_ns * NS,
        1.0 / snap_bw,
        snap.write_latency_ns * NS,
        1.0 / read_bw,
        target.read_latency_ns * NS,
    )


def _snapshot_walk(
    inp: ModelInputs, tau: float, nbytes: np.ndarray, first_excess: float
) -> tuple[np.ndarray, np.ndarray]:
    """`snapshot_persist` with uniform batches: checkpoint i (1-based) is ready τ after the
    previous snapshot ended. Returns (stall, lag): each one's stall and the time from its
    resume to its being durable (`_timeline` places them)."""
    wb, wl, sb, sl, _, _ = rates(inp.ctx)
    w = _affine(wb, wl, nbytes)
    if inp.ctx.spec.synchronous:
        excess = np.full(len(nbytes), -tau)
        if len(excess):
            excess[0] = first_excess
        return np.maximum(0.0, excess) + w, np.zeros_like(w)
    prev = np.concatenate([[first_excess + tau], w[:-1]])
    return np.maximum(_affine(sb, sl, nbytes), prev - tau), w


def _timeline(tau: float, stall: np.ndarray, lag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(resume, durable) of each checkpoint, from the end of the snapshot before the first
    one (its start is τ after the previous resume)."""
    start = tau * np.arange(1, len(stall) + 1) + np.concatenate([[0.0], np.cumsum(stall)[:-1]])
    return start + stall, start + stall + lag


def model(inp: ModelInputs, k: float) -> Walk:
    """Check-N-Run every k batches in the spec's mode (module docstring). Means are taken
    over the arrays' sums, the timeline and the recovery points only when asked for."""
    ctx = inp.ctx
    spec = ctx.spec
    tau = k * inp.tb
    b_q = row_bytes(inp)
    fixed = ctx.dense_bytes + READER_POSITION_BYTES
    full = full_bytes(inp)
    wb, wl, _, _, rb, rl = rates(ctx)
    w_full = full * wb + wl
    restart = inp.restart_s

    def restore(nbytes: np.ndarray) -> np.ndarray:
        return restart + _affine(rb, rl, nbytes)

    def values(
        stall: np.ndarray, lag: np.ndarray, nbytes: np.ndarray, chain: np.ndarray, storage: float
    ) -> dict[str, float]:
        restore_bytes = float(chain.mean())  # every chain > 0: restore is affine in it
        return {
            "cost_s": float(stall.mean()), "bytes": float(nbytes.mean()),
            "restore_s": restart + restore_bytes * rb + rl, "storage_bytes": storage,
            "durable_lag_s": float(stall.mean() + lag.mean()),
            "rollback_lag_s": float(lag.mean()), "restore_bytes": restore_bytes,
        }  # fmt: skip

    if spec.increment == "intermittent":
        cycle = intermittent_cycle(inp, k)
        if cycle is not None:  # n* increments then a full, repeated
            u = inp.touched_at(k * np.arange(1, cycle + 1))
            nbytes = np.concatenate([u * b_q + fixed, [full]])
            chain = np.concatenate([full + nbytes[:-1], [full]])
            prev_needed = np.concatenate([[full], chain[:-1]])
            first = (-tau) if spec.synchronous else (w_full - tau)
            stall, lag = _snapshot_walk(inp, tau, nbytes, first)

            def points() -> RecoveryPoints:
                resume, durable = _timeline(tau, stall, lag)
                return points_from(durable.tolist(), resume.tolist(), restore(chain).tolist())

            storage = float((prev_needed + nbytes).max())
            period = tau * len(nbytes) + float(stall.sum())
            return Walk(
                values(stall, lag, nbytes, chain, storage), period, tau * len(nbytes), points
            )
    # consecutive and one-shot (and an intermittent cycle longer than the run): the run
    n = checkpoints_in_run(inp, tau)
    if spec.increment == "consecutive":
        nbytes = np.full(n, float(inp.touched_at(k)) * b_q + fixed)
        chain = full + np.cumsum(nbytes)
        storage = float(chain[-1])  # the chain before the last increment, and it
    else:
        nbytes = inp.touched_at(k * np.arange(1, n + 1, dtype=np.float64)) * b_q + fixed
        chain = full + nbytes
        storage = float(max(full, full + nbytes[0], (chain[:-1] + nbytes[1:]).max(initial=0.0)))
    first = w_full - tau  # the baseline persists from time 0, asynchronously
    stall, lag = _snapshot_walk(inp, tau, nbytes, first)
    work = max(inp.horizon_s, n * tau)
    period = work + float(stall.sum())
    all_chain = np.concatenate([[full], chain])

    def run_points() -> RecoveryPoints:
        resume, durable = _timeline(tau, stall, lag)
        return points_from(
            [w_full, *durable.tolist()], [0.0, *resume.tolist()], restore(all_chain).tolist()
        )

    return Walk(values(stall, lag, nbytes, all_chain, storage), period, work, run_points)


def checkpoints_in_run(inp: ModelInputs, tau: float) -> int:
    """Checkpoints at τ, 2τ, ... up to the run's work (at least one)."""
    n = max(1, math.floor(inp.horizon_s / tau * (1 + 1e-12)))
    if n > MAX_CHECKPOINTS:
        # a plan never asks for this (its search starts at horizon / 200,000); the remedy
        # names strategy_cost's own parameter, which only the Python API gives
        raise ConfigError(
            f"check-n-run: an interval of {tau:.3g} s over {inp.horizon_s:.3g} s of training "
            f"is {n:,} checkpoints, more than the {MAX_CHECKPOINTS:,} a chain walk holds"
            + opt("", "; give a larger interval_batches")
        )
    return n


def _cycle_limit(inp: ModelInputs, k: float) -> int:
    """The most increments before a full that still closes within the run."""
    return min(max(1, math.floor(inp.horizon_s / (k * inp.tb) * (1 + 1e-12))), MAX_CHECKPOINTS)


def intermittent_cycle(inp: ModelInputs, k: float) -> int | None:
    """n*: one-shot increments before the full (written as the n* + 1-th): the fixed
    `inp.cycle`, else the threshold rule, the last j with touched(j k) <= the threshold;
    None when no full comes within the run."""
    limit = _cycle_limit(inp, k)
    if inp.cycle is not None:
        return inp.cycle if inp.cycle <= limit else None
    threshold = int(inp.ctx.spec.full_threshold_fraction * inp.ctx.total_rows)

    def over(j: int) -> bool:
        return float(inp.touched_at(k * j)) > threshold

    if not over(limit + 1):
        return None
    lo, hi = 0, 1  # over(lo) is False (j = 0: nothing), over(hi) to be found
    while not over(hi):
        lo, hi = hi, min(2 * hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if over(mid):
            hi = mid
        else:
            lo = mid
    return lo


def threshold_for_cycle(inp: ModelInputs, k: float, cycle: int) -> float | None:
    """A full_threshold_fraction under which the threshold rule gives `cycle` increments
    per full at k batches: int(f × rows) in [touched(cycle k), touched((cycle + 1) k)),
    the roundest such f. None when no full comes within the run or no whole row count
    lies in that range (a flat curve)."""
    if cycle > _cycle_limit(inp, k):
        return None
    rows = inp.ctx.total_rows
    low = float(inp.touched_at(k * cycle)) if cycle > 0 else 0.0
    high = float(inp.touched_at(k * (cycle + 1)))
    first = math.ceil(low)
    if not first < high:
        return None
    for digits in range(1, 10):  # the fewest significant digits that give the cycle
        scale = 10.0 ** (digits - 1 - math.floor(math.log10((first + 0.5) / rows)))
        f = math.ceil((first + 0.5) / rows * scale) / scale
        if 0 < f <= 1 and first <= int(f * rows) < high:
            return f
    return (first + 0.5) / rows


# -- the modes the plan searches ---------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """An increment mode and bit width. Intermittent: `increments_per_full` fixed (the
    searched cycle; None before the search), or the spec's own threshold rule
    (`full_threshold_fraction` set, `increments_per_full` None)."""

    increment: str
    quantize_bits: int
    increments_per_full: int | None = None
    full_threshold_fraction: float | None = None
    spec: bool = False  # the system spec's own mode

    @property
    def threshold_rule(self) -> bool:
        return self.increment == "intermittent" and self.full_threshold_fraction is not None

    @property
    def label(self) -> str:
        bits = f"{self.quantize_bits}-bit" if self.quantize_bits else "fp32"
        rule = f", threshold {self.full_threshold_fraction:g}" if self.threshold_rule else ""
        return f"check-n-run ({self.increment}, {bits}{rule})"


def modes_for(system: SystemSpec) -> list[Mode]:
    """Every increment × every bit width (intermittent: its cycle to be searched), and an
    intermittent spec's own threshold rule; the spec's own mode flagged."""
    ck = system.checkpoint
    out = [
        Mode(inc, bits, spec=(inc == ck.increment != "intermittent" and bits == ck.quantize_bits))
        for inc in INCREMENT_ORDER
        for bits in QUANTIZE_BITS
    ]
    if ck.increment == "intermittent":
        out.append(Mode("intermittent", ck.quantize_bits, None, ck.full_threshold_fraction, True))
    return out


def with_mode(system: SystemSpec, mode: Mode) -> SystemSpec:
    """The system with the mode's knobs in its checkpoint spec."""
    knobs: dict[str, Any] = {"increment": mode.increment, "quantize_bits": mode.quantize_bits}
    if mode.threshold_rule:
        knobs["full_threshold_fraction"] = mode.full_threshold_fraction
    ck = dataclasses.replace(system.checkpoint, **knobs)
    return dataclasses.replace(system, checkpoint=ck)


def mode_from(knobs: dict[str, Any] | None, system: SystemSpec) -> Mode:
    """A Mode from a StrategyPlan's `mode` (missing knobs: the spec's); an intermittent
    mode with `increments_per_full` keeps that cycle, else its threshold rule."""
    ck = system.checkpoint
    knobs = dict(knobs or {})
    increment = knobs.get("increment") or ck.increment
    bits = ck.quantize_bits if knobs.get("quantize_bits") is None else knobs["quantize_bits"]
    if increment not in INCREMENTS or bits not in QUANTIZE_BITS:
        raise ConfigError(
            f"check-n-run mode: increment must be one of {', '.join(INCREMENTS)} and "
            f"quantize_bits one of {QUANTIZE_BITS}, got {increment!r}, {bits!r}"
        )
    cycle = knobs.get("increments_per_full")
    if increment != "intermittent":
        return Mode(increment, int(bits))
    if cycle is not None:
        return Mode(increment, int(bits), increments_per_full=int(cycle))
    f = knobs.get("full_threshold_fraction")
    return Mode(increment, int(bits), None, ck.full_threshold_fraction if f is None else float(f))


def knobs(mode: Mode, inp: ModelInputs, k: float) -> dict[str, Any]:
    """The mode as checkpoint knobs at the chosen k: increment, quantize_bits and, for
    intermittent, increments_per_full and a full_threshold_fraction that gives it (None
    when no full comes within the run)."""
    out: dict[str, Any] = {
        "increment": mode.increment,
        "quantize_bits": mode.quantize_bits,
        "full_threshold_fraction": None,
        "increments_per_full": None,
    }
    if mode.increment != "intermittent":
        return out
    cycle = intermittent_cycle(inp, k)
    out["increments_per_full"] = cycle
    if mode.threshold_rule:
        out["full_threshold_fraction"] = mode.full_threshold_fraction
    elif cycle is not None:
        out["full_threshold_fraction"] = threshold_for_cycle(inp, k, cycle)
    return out


def caveat(bits: int, failures_per_run: float) -> str | None:
    """The paper's accuracy caveat for the low bit widths (None for fp32 and 8 bits)."""
    if bits not in LOW_BITS:
        return None
    return (
        f"{bits}-bit rows are lossy: training continues from the restored rows after every "
        "failure, and Check-N-Run picks the bit width from the restores a run expects, "
        "fewer bits tolerating fewer restores within its accuracy budget (8 bits is the "
        f"fallback). This run expects {format_number(failures_per_run)} failures (simulated): "
        f"check that against the paper's bit-width selection before adopting {bits} bits. "
        f"Source: {SOURCE}"
    )


def describe(mode: Mode, inp: ModelInputs, k: float, failures_per_run: float) -> dict[str, Any]:
    """StrategyPlan's check-n-run fields for a mode simulated at k: `mode` (its knobs),
    `label`, `caveat` and `quantization_error` (of a restored row, on the stated sample)."""
    bits = mode.quantize_bits
    return {
        "mode": knobs(mode, inp, k),
        "label": mode.label,
        "caveat": caveat(bits, failures_per_run),
        "quantization_error": quantization_error(inp.dim, bits) if bits else 0.0,
    }


ROW_FIELDS = (
    "label", "mode", "goodput", "goodput_p5", "goodput_model", "interval_s",
    "interval_batches", "cost_s", "bytes", "storage_bytes", "restore_s", "durable_lag_s",
    "failures_per_run", "quantization_error", "caveat",
)  # fmt: skip


def papers_method(mode: Mode) -> bool:
    """Check-N-Run's own method: intermittent increments, the refresh chosen by the plan
    (not a spec's threshold rule), rows quantized to a width the paper evaluates."""
    return mode.increment == "intermittent" and not mode.threshold_rule and mode.quantize_bits > 0


def ranked(plans: Sequence[Any], modes: Sequence[Mode]) -> tuple[int, tuple[dict[str, Any], ...]]:
    """(the index of the answer, every plan's row): the answer is the paper's method
    (`papers_method`) of highest mean goodput; ties: lower stall, less storage, faster
    restore, then the order of `modes_for`. Rows: the paper's modes best first, then the
    others best first, each holding `ROW_FIELDS`, `spec` (the system spec's own mode) and
    `papers_method`. Another mode may do better by goodput (consecutive chains, with
    storage and restores that grow with the run): it is listed, not answered."""
    order = sorted(
        range(len(plans)),
        key=lambda i: (
            not papers_method(modes[i]), -plans[i].goodput, plans[i].cost_s,
            plans[i].storage_bytes, plans[i].restore_s, i,
        ),
    )  # fmt: skip
    rows = tuple(
        {
            **{f: getattr(plans[i], f) for f in ROW_FIELDS},
            "spec": modes[i].spec,
            "papers_method": papers_method(modes[i]),
        }
        for i in order
    )
    return order[0], rows


def best_cycle(
    goodput: Callable[[int], float], hi: int, *, start: int = 16, rel: float = 0.02
) -> int:
    """The n in [0, hi] of highest goodput(n), for a goodput unimodal in n: on the lattice
    0, 1, 2, 4, ..., hi, a climb from `start` to the point both neighbours do not beat,
    then golden-section search on whole n between those neighbours, to within `rel` of n
    (the goodput is flat near its optimum). Ties: the shorter cycle (a plateau is
    descended)."""
    seen: dict[int, float] = {}

    def g(n: int) -> float:
        if n not in seen:
            seen[n] = goodput(n)
        return seen[n]

    hi = max(0, int(hi))
    grid = sorted({0, hi, *(1 << j for j in range(max(hi, 1).bit_length()) if (1 << j) < hi)})
    i = min(range(len(grid)), key=lambda j: abs(grid[j] - start))
    while i + 1 < len(grid) and g(grid[i + 1]) > g(grid[i]):  # up while it improves
        i += 1
    while i > 0 and g(grid[i - 1]) >= g(grid[i]):  # down while it is no worse
        i -= 1
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    while b - a > max(3, rel * a):
        c = b - round(GOLDEN * (b - a))
        d = a + round(GOLDEN * (b - a))
        if g(c) >= g(d):
            b = d
        else:
            a = c
    near = range(a, b + 1) if b - a <= 3 else [n for n in seen if a <= n <= b]
    return max(near, key=lambda n: (g(n), -n))


@dataclass(frozen=True)
class Found:
    """A mode at its chosen interval (before the failure simulator)."""

    mode: Mode  # intermittent: with its searched cycle
    inp: Any  # the caller's inputs for this mode (`inputs_for`)
    k: float
    goodput_model: float


def search_modes(
    modes: Sequence[Mode],
    inputs_for: Callable[[Mode], In],
    choose: Callable[[In, bool], tuple[float, float]],
    max_cycle: int,
) -> list[Found]:
    """Each mode at the interval `choose(inputs, coarse)` gives (k, Daly's goodput);
    a searched intermittent mode over its cycle n in [0, max_cycle] (`best_cycle`, the
    interval chosen coarsely per n), then at its best n with the full search."""
    out = []
    for mode in modes:
        if mode.increment == "intermittent" and not mode.threshold_rule:

            def goodput(n: int, mode: Mode = mode) -> float:
                inp = inputs_for(dataclasses.replace(mode, increments_per_full=n))
                return choose(inp, True)[1]

            mode = dataclasses.replace(mode, increments_per_full=best_cycle(goodput, max_cycle))
        inp = inputs_for(mode)
        k, g = choose(inp, False)
        out.append(Found(mode, inp, k, g))
    return out


__all__ = [
    "MAX_CHECKPOINTS",
    "SEARCH_MAX_CHECKPOINTS",
    "Found",
    "Mode",
    "ModelInputs",
    "Walk",
    "best_cycle",
    "caveat",
    "checkpoints_in_run",
    "describe",
    "full_bytes",
    "intermittent_cycle",
    "knobs",
    "mode_from",
    "model",
    "modes_for",
    "papers_method",
    "ranked",
    "rates",
    "row_bytes",
    "search_modes",
    "threshold_for_cycle",
    "with_mode",
]
