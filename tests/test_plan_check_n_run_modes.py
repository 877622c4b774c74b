"""Check-N-Run's modes in the plan (`replay.plan.check_n_run`): every increment × bit width
planned, the answer the best by goodput, its storage and restore by hand from the curve."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from replay.checkpoint.base import READER_POSITION_BYTES
from replay.checkpoint.quantize import quantization_error
from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.plan.check_n_run import best_cycle, modes_for
from replay.plan.checkpoint import StrategyPlan, plan_strategy, strategy_cost
from replay.system.spec import INCREMENTS, QUANTIZE_BITS

TOTAL = 5_000_000  # rows
DIM = 32  # sgd: a row is 4 × 32 bytes, no optimizer state
TB = 0.05  # s per batch
HORIZON = 6 * 3600.0  # 432,000 batches
RESTART = 60.0
MTBF = 2 * 3600.0
A = 2e4  # touched(k) = min(rows, A √k)
# a slow target makes the bytes matter; the spec's own mode is intermittent, 8 bits,
# threshold 0.3 (listed beside the searched cycle)
SETS = [
    f"failures.restart_s={RESTART:g}",
    "tiers.nvme.write_bw_bytes_per_s=2e8",
    "tiers.nvme.read_bw_bytes_per_s=4e8",
    "checkpoint.increment=intermittent",
    "checkpoint.quantize_bits=8",
    "checkpoint.full_threshold_fraction=0.3",
]


def touched(k: object) -> np.ndarray:
    return np.minimum(TOTAL, A * np.sqrt(np.asarray(k, dtype=np.float64)))


KW = dict(
    time_per_batch_s=TB, total_rows=TOTAL, row_bytes=4 * DIM, embedding_dim=DIM,
    touched_rows=touched, horizon_s=HORIZON,
)  # fmt: skip


@pytest.fixture(scope="module")
def system() -> object:
    return resolve_system("hbm-lru", SETS)


@pytest.fixture(scope="module")
def plan(system: object) -> StrategyPlan:
    return plan_strategy(
        system,  # type: ignore[arg-type]
        strategy="check-n-run", mtbf_s=MTBF, draws=200, seed=1, mode="best",
        **KW,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("knobs", "label"),
    [
        (
            ["checkpoint.increment=consecutive", "checkpoint.quantize_bits=0"],
            "check-n-run (consecutive, fp32)",
        ),
        (
            ["checkpoint.increment=one-shot", "checkpoint.quantize_bits=4"],
            "check-n-run (one-shot, 4-bit)",
        ),
    ],
)
def test_plan_strategy_answers_the_mode_it_is_given(
    plan: StrategyPlan, knobs: list[str], label: str
) -> None:
    """By default the answer is the system spec's own mode (at its best interval), not the
    best mode: its row of `modes` (which still ranks every mode, the best first)."""
    given = plan_strategy(
        resolve_system("hbm-lru", [*SETS, *knobs]), strategy="check-n-run", mtbf_s=MTBF,
        draws=200, seed=1, **KW,  # type: ignore[arg-type]
    )  # fmt: skip
    assert given.label == label != plan.label
    row = next(r for r in given.modes if r["spec"])
    assert row["label"] == label and given.goodput == row["goodput"]
    assert given.modes[0]["label"] == plan.label  # the best is listed first all the same
    with pytest.raises(ConfigError):
        plan_strategy(
            resolve_system("hbm-lru", SETS), strategy="check-n-run", mtbf_s=MTBF, draws=20,
            mode="cheapest", **KW,  # type: ignore[arg-type]
        )  # fmt: skip


def hand(system: object, row: dict) -> tuple[float, float]:
    """(storage bytes, mean restore seconds) of a mode at its interval, from the module
    docstring's formulas: b_q = ceil(dim × bits / 8) + 8 (4 × dim for fp32), F = rows ×
    b_q + dense + reader position, an increment of u rows u b_q + dense + reader position;
    restore = restart + chain / read_bw + read latency, a mean over the recovery points."""
    ck = system.checkpoint  # type: ignore[attr-defined]
    assert ck.target == "nvme" and not ck.link  # the formulas below read nvme directly
    nvme = system.tier("nvme")  # type: ignore[attr-defined]
    mode, k = row["mode"], row["interval_batches"]
    bits = mode["quantize_bits"]
    b_q = 4 * DIM if bits == 0 else math.ceil(DIM * bits / 8) + 8
    fixed = 4 * system.model.dense_params + READER_POSITION_BYTES  # type: ignore[attr-defined]
    full = TOTAL * b_q + fixed

    def inc(j: int) -> float:  # the one-shot increment after j intervals (j k batches)
        return min(TOTAL, A * math.sqrt(j * k)) * b_q + fixed

    n_run = math.floor(HORIZON / (k * TB) * (1 + 1e-12))
    if mode["increment"] == "consecutive":
        chains = [full + i * inc(1) for i in range(n_run + 1)]  # the baseline, then i
        storage = chains[-1]
    elif mode["increment"] == "one-shot":
        chains = [full] + [full + inc(i) for i in range(1, n_run + 1)]
        storage = max([full + inc(1)] + [full + inc(i - 1) + inc(i) for i in range(2, n_run + 1)])
    else:  # n increments, then a full: the cycle repeats
        n = mode["increments_per_full"]
        chains = [full + inc(j) for j in range(1, n + 1)] + [full]
        storage = max(
            [full + inc(1)]
            + [full + inc(j - 1) + inc(j) for j in range(2, n + 1)]
            + [full + inc(n) + full]  # the last increment's chain is kept until the full
        )
    restores = [
        RESTART + c / nvme.read_bw_bytes_per_s + nvme.read_latency_ns * 1e-9 for c in chains
    ]
    return storage, sum(restores) / len(restores)


# -- (a) golden: storage and restore by hand ---------------------------------------------------


def test_the_answers_storage_and_restore_are_the_hand_computation(
    system: object, plan: StrategyPlan
) -> None:
    storage, restore = hand(system, plan.modes[0])
    assert plan.storage_bytes == pytest.approx(storage, rel=1e-9)
    assert plan.restore_s == pytest.approx(restore, rel=1e-9)
    # here the paper's method wins: intermittent with quantized rows, a full every n + 1
    assert plan.mode is not None and plan.mode["increment"] == "intermittent"
    assert plan.mode["quantize_bits"] > 0 and plan.mode["increments_per_full"] >= 1


def test_every_modes_storage_and_restore_are_the_hand_computation(
    system: object, plan: StrategyPlan
) -> None:
    for row in plan.modes:
        storage, restore = hand(system, row)
        assert row["storage_bytes"] == pytest.approx(storage, rel=1e-9), row["label"]
        assert row["restore_s"] == pytest.approx(restore, rel=1e-9), row["label"]


def test_the_threshold_given_reproduces_the_searched_cycle(plan: StrategyPlan) -> None:
    """int(f × rows) lies between touched(n k) and touched((n + 1) k): the engine's rule
    (a full when the increment would pass it) gives n increments per full."""
    searched = [r for r in plan.modes if r["mode"]["increment"] == "intermittent"]
    assert len(searched) == len(QUANTIZE_BITS) + 1  # and the spec's own threshold rule
    for row in searched:
        mode, k = row["mode"], row["interval_batches"]
        threshold = int(mode["full_threshold_fraction"] * TOTAL)
        n = mode["increments_per_full"]
        assert touched(n * k) <= threshold < touched((n + 1) * k), row["label"]


def test_strategy_cost_in_the_answers_mode_is_the_answers_cost(
    system: object, plan: StrategyPlan
) -> None:
    """What `goodput_curve` needs: the cost at the chosen interval in the chosen mode, and
    the same mode given by its threshold instead of its cycle."""
    cost = strategy_cost(
        system,  # type: ignore[arg-type]
        strategy="check-n-run", interval_batches=plan.interval_batches, mode=plan.mode, **KW,
    )  # fmt: skip
    assert cost == plan.cost
    assert plan.mode is not None
    by_threshold = {**plan.mode, "increments_per_full": None}
    again = strategy_cost(
        system,  # type: ignore[arg-type]
        strategy="check-n-run", interval_batches=plan.interval_batches, mode=by_threshold, **KW,
    )  # fmt: skip
    assert again.storage_bytes == cost.storage_bytes and again.restore_s == cost.restore_s
    # the spec's own mode (consecutive fp32 here would be another cost altogether)
    spec_cost = strategy_cost(
        system,  # type: ignore[arg-type]
        strategy="check-n-run", interval_batches=plan.interval_batches, **KW,
    )  # fmt: skip
    assert spec_cost.storage_bytes != cost.storage_bytes


# -- (b) the answer is the best mode by goodput ------------------------------------------------


def test_the_answer_is_the_best_mode_by_goodput(plan: StrategyPlan) -> None:
    """The answer is the paper's method (intermittent, quantized) of highest goodput; the
    paper's modes come first, each part best first."""
    papers = [r for r in plan.modes if r["papers_method"]]
    assert {r["mode"]["increment"] for r in papers} == {"intermittent"}
    assert {r["mode"]["quantize_bits"] for r in papers} == set(QUANTIZE_BITS) - {0}
    assert not any(r["spec"] for r in papers)  # a spec's threshold rule is not searched
    assert list(plan.modes[: len(papers)]) == papers
    goodputs = [r["goodput"] for r in papers]
    assert plan.goodput == max(goodputs)
    assert goodputs == sorted(goodputs, reverse=True)  # best first
    others = [r["goodput"] for r in plan.modes[len(papers) :]]
    assert others == sorted(others, reverse=True)
    best = plan.modes[0]
    assert (plan.label, plan.mode, plan.interval_s, plan.goodput_p5) == (
        best["label"], best["mode"], best["interval_s"], best["goodput_p5"],
    )  # fmt: skip
    # fewer bytes per row never lose: within an increment mode, Daly's goodput falls with
    # the bits (fp32 last)
    for inc in INCREMENTS:
        rows = {
            r["mode"]["quantize_bits"]: r
            for r in plan.modes
            if r["mode"]["increment"] == inc and not r["spec"]
        }
        model = [rows[b]["goodput_model"] for b in sorted(QUANTIZE_BITS, key=lambda b: b or 99)]
        assert model == sorted(model, reverse=True), inc


def test_the_searched_cycle_beats_the_specs_threshold(plan: StrategyPlan) -> None:
    """The spec's intermittent mode (threshold 0.3) is listed and flagged; the cycle searched
    with the interval does at least as well in Daly's model, at the same bits."""
    spec_rows = [r for r in plan.modes if r["spec"]]
    assert len(spec_rows) == 1
    spec = spec_rows[0]
    assert spec["label"] == "check-n-run (intermittent, 8-bit, threshold 0.3)"
    assert spec["mode"]["full_threshold_fraction"] == 0.3
    k = spec["interval_batches"]
    n = spec["mode"]["increments_per_full"]  # the threshold rule's cycle, by hand
    assert touched(n * k) <= int(0.3 * TOTAL) < touched((n + 1) * k)
    searched = next(r for r in plan.modes if r["label"] == "check-n-run (intermittent, 8-bit)")
    assert searched["goodput_model"] >= spec["goodput_model"]
    assert searched["mode"]["increments_per_full"] != n


# -- (c) every mode with its goodput, storage and restore --------------------------------------


def test_every_mode_is_listed_with_goodput_storage_and_restore(plan: StrategyPlan) -> None:
    grid = {(r["mode"]["increment"], r["mode"]["quantize_bits"]) for r in plan.modes}
    assert grid == set(itertools.product(INCREMENTS, QUANTIZE_BITS))
    assert len(plan.modes) == len(INCREMENTS) * len(QUANTIZE_BITS) + 1  # + the spec's own
    for r in plan.modes:
        assert 0 < r["goodput_p5"] <= r["goodput"] <= 1, r["label"]
        assert r["storage_bytes"] > r["bytes"] > 0 and r["restore_s"] > RESTART, r["label"]
        assert r["interval_s"] == pytest.approx(r["interval_batches"] * TB)
    doc = json.loads(json.dumps(plan.to_json()))  # what plan.json holds
    assert doc["label"] == plan.label and doc["mode"] == plan.mode
    assert [m["label"] for m in doc["modes"]] == [r["label"] for r in plan.modes]
    keys = {"goodput", "goodput_p5", "interval_s", "bytes", "storage_bytes", "restore_s", "mode"}
    assert all(keys <= set(m) for m in doc["modes"])


def test_low_bit_widths_carry_the_papers_caveat(plan: StrategyPlan) -> None:
    for r in plan.modes:
        bits = r["mode"]["quantize_bits"]
        assert r["quantization_error"] == (quantization_error(DIM, bits) if bits else 0.0)
        if bits in (2, 3, 4):
            assert "NSDI 2022" in r["caveat"] and f"{r['failures_per_run']:.3g}" in r["caveat"]
        else:
            assert r["caveat"] is None
    assert plan.caveat == plan.modes[0]["caveat"]


# -- (d) the label names the mode ----------------------------------------------------------------


def test_the_label_names_the_mode(system: object, plan: StrategyPlan) -> None:
    for r in plan.modes:
        mode = r["mode"]
        bits = f"{mode['quantize_bits']}-bit" if mode["quantize_bits"] else "fp32"
        rule = ", threshold 0.3" if r["spec"] else ""
        assert r["label"] == f"check-n-run ({mode['increment']}, {bits}{rule})"
    assert plan.label.startswith("check-n-run (intermittent, ")
    other = plan_strategy(
        system,  # type: ignore[arg-type]
        strategy="sync-full", mtbf_s=MTBF, draws=50, seed=1, **KW,  # type: ignore[arg-type]
    )  # fmt: skip
    assert other.label == "sync-full" and other.to_json()["label"] == "sync-full"
    assert other.mode is None and other.to_json()["modes"] == []


# -- the search's pieces -------------------------------------------------------------------------


def test_the_spec_mode_is_flagged_once() -> None:
    default = modes_for(resolve_system("hbm-lru", []))  # consecutive, fp32
    assert [m.label for m in default if m.spec] == ["check-n-run (consecutive, fp32)"]
    one_shot = modes_for(
        resolve_system("hbm-lru", ["checkpoint.increment=one-shot", "checkpoint.quantize_bits=4"])
    )
    assert [m.label for m in one_shot if m.spec] == ["check-n-run (one-shot, 4-bit)"]
    assert len(one_shot) == len(INCREMENTS) * len(QUANTIZE_BITS)


@pytest.mark.parametrize(("peak", "hi"), [(0, 5000), (1, 5000), (137, 5000), (3000, 4000)])
def test_best_cycle_finds_a_unimodal_maximum(peak: int, hi: int) -> None:
    calls: list[int] = []

    def g(n: int) -> float:
        calls.append(n)
        return -abs(math.log1p(n) - math.log1p(peak))

    n = best_cycle(g, hi)
    assert abs(n - peak) <= max(1, 0.02 * peak)
    assert len(set(calls)) < 40  # not a scan


def test_best_cycle_takes_the_shortest_cycle_on_a_plateau() -> None:
    assert best_cycle(lambda n: float(min(n, 100)), 1000) == 100
    assert best_cycle(lambda n: 1.0, 1000) == 0
