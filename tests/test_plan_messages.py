"""`replay plan` at the extremes of its inputs (issue 39, item 8): an answer where one
exists, else one line naming the option the user gave and what would work, never an
option plan does not have (`--sizes`, an interval).

- an MTBF no run ever reaches (1e30 s, 1e308 s) or a step of 1e-30 s: failures never
  strike the run, so no checkpoint pays: the best interval is the whole run;
- an MTBF far below the restart (1e-300 s, or 10^29 nodes of 30 days): no strategy makes
  progress, refused with the smallest cluster MTBF that plans, which then plans;
- a run of milliseconds at an MTBF of seconds, shorter than the restart: most runs see
  no failure, so it is planned, not refused;
- 2^62 rows in all: beyond the curves, refused in rows, not as `--sizes`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from replay.analysis.mrc import MAX_SIZE_ROWS, validate_sizes
from replay.cli import main
from replay.engine.systems import resolve_system
from replay.errors import ConfigError, cli_names
from replay.plan.cache import curve_sizes
from replay.plan.checkpoint import MtbfTooShort, plan_checkpoints, plan_strategy, strategy_cost
from replay.plan.daly import (
    best_interval,
    daly_goodput,
    daly_interval_s,
    duration_at_least,
    young_interval_s,
)


def _plan_options() -> set[str]:
    from typer.main import get_command

    import replay.cli.plan  # noqa: F401  (registers the command on the app)
    from replay.cli.app import app

    plan = get_command(app).commands["plan"]  # type: ignore[attr-defined]
    return {o for p in plan.params for o in p.opts if o.startswith("--")}


PLAN_OPTIONS = _plan_options()


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    out = tmp_path / "plan"
    argv = [
        "plan", "--workload", "tiny", "--batches", "60", "--system", "hbm-lru",
        "--cache-budget", "1MiB", "--draws", "50", "--out", str(out), "--force", *extra,
    ]  # fmt: skip
    if "--workload" in extra:  # a spec of its own replaces tiny's
        at = argv.index("--workload")
        del argv[at : at + 4]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _refused(code: int, stdout: str, stderr: str, *phrases: str, option: bool = True) -> str:
    assert code == 2, stdout + stderr
    # no progress lines: they go to a terminal only (issue 39, item 7)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: "), stderr
    message = lines[0]
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    _assert_names_plan_options_only(message, option=option)
    return message


def _assert_names_plan_options_only(message: str, *, option: bool = True) -> None:
    """Every refusal here names options of `replay plan` only: never `--sizes` (the
    curves' limit) nor an interval to plan (plan searches it, it has no such option)."""
    named = set(re.findall(r"--[a-z][a-z-]*", message))
    assert named or not option, message  # the option the user gave
    assert named <= PLAN_OPTIONS, (named - PLAN_OPTIONS, message)
    assert "--sizes" not in message and "longer interval" not in message, message


def _document(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "plan" / "plan.json").read_text())


# -- failures that never strike: no checkpoint pays -------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ("--cluster-mtbf", "1e30s"),
        ("--cluster-mtbf", "1e308s"),
        ("--cluster-mtbf", "6h", "--time-per-batch", "1e-30s"),
    ],
    ids=["mtbf-1e30", "mtbf-1e308", "step-1e-30"],
)
def test_a_run_that_never_fails_needs_no_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]
) -> None:
    """Was "best_interval: empty range [...]": the search's floor, 1e-12 x the MTBF, lay
    above the whole run."""
    code, stdout, stderr = _plan(tmp_path, capsys, *extra)
    assert code == 0, stderr
    assert "no strategy beats running without checkpoints" in stdout
    doc = _document(tmp_path)
    run = doc["horizon"]["training_time_s"]
    strategies = {s["name"]: s for s in doc["checkpoint"]["strategies"]}
    assert doc["checkpoint"]["best"] == "none"
    assert strategies["none"]["goodput"] == pytest.approx(1.0)
    for name in ("checkfreq", "sync-full"):  # searched: the whole run is the interval
        assert strategies[name]["interval_s"] == pytest.approx(run, rel=1e-9)
        assert math.isfinite(strategies[name]["young_daly_interval_s"])
    # its only checkpoint is the run's last batch, whose stall it pays: what the note says
    sync = strategies["sync-full"]
    assert sync["cost_s"] > 0 and sync["goodput"] == pytest.approx(run / (run + sync["cost_s"]))
    (note,) = [n for n in doc["notes"] if "the best interval is the whole run" in n]
    assert "their only checkpoint is the run's last batch" in note and "stall" in note


def test_a_run_of_milliseconds_at_an_mtbf_shorter_than_the_restart_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 s against a 60 s restart: the expected wall time is ruled by the rare draw that
    fails and never restarts, but a run of 1.3 ms almost never sees a failure."""
    code, _, stderr = _plan(tmp_path, capsys, "--cluster-mtbf", "8s")
    assert code == 0, stderr
    assert _document(tmp_path)["checkpoint"]["strategies"][0]["goodput"] > 0.99


# -- failures faster than a restart: refused with what would plan ------------------------------


def _suggested(stderr: str, extra: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(options that plan, a quarter less of the same) from the refusal's remedy: a
    cluster MTBF, or fewer nodes where the CLI words it for --nodes."""
    if match := re.search(r"give --cluster-mtbf (\S+) or more", stderr):
        least = match[1]
        less = f"{float(least.rstrip('s')) / 1.25:.3g}s"  # seconds below 1 s
        return ("--cluster-mtbf", least), ("--cluster-mtbf", less)
    match = re.search(r"--nodes (\d+) or fewer", stderr)
    assert match, stderr
    most = int(match[1])
    node = extra[extra.index("--node-mtbf") :][:2]
    return ("--nodes", str(most), *node), ("--nodes", str(round(most * 1.25)), *node)


@pytest.mark.parametrize(
    ("extra", "phrases"),
    [
        (("--cluster-mtbf", "1e-300s"), ("--cluster-mtbf", "1e-300 s", "a restart alone")),
        (
            ("--nodes", str(10**29), "--node-mtbf", "30d"),
            ("--nodes", "--node-mtbf", "2.59e-23 s", "a restart alone"),
        ),
    ],
    ids=["mtbf-1e-300", "nodes-1e29"],
)
def test_an_mtbf_too_short_to_progress_names_the_option_and_what_plans(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    phrases: tuple[str, ...],
) -> None:
    """Was "check-n-run: 5e+298 checkpoints ... plan a longer interval": the search read
    the cost of an interval of 1e-300 s, below one batch."""
    code, stdout, stderr = _plan(tmp_path, capsys, *extra)
    message = _refused(code, stdout, stderr, *phrases, "too short")
    plans, less = _suggested(message, extra)
    assert not (tmp_path / "plan").exists()
    # what the message asks for plans; a quarter less is refused again
    assert _plan(tmp_path, capsys, *plans)[0] == 0
    _refused(*_plan(tmp_path, capsys, *less), "too short")


def test_the_refusals_best_goodput_is_a_percentage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was "the best expected goodput is check-n-run's, 2.37e-261": a fraction with an
    exponent, where every goodput is a percentage."""
    extra = ("--cluster-mtbf", "100ms", "--time-per-batch", "20ms")
    message = _refused(*_plan(tmp_path, capsys, *extra), "too short")
    assert "the best expected goodput is check-n-run's, less than 0.0001%;" in message
    assert not re.search(r"\de[-+]\d", message), message


def test_a_batch_longer_than_any_mtbf_names_the_time_per_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = _plan(
        tmp_path, capsys, "--cluster-mtbf", "6h", "--time-per-batch", "1e300s"
    )
    _refused(code, stdout, stderr, "--time-per-batch", "longer than the MTBF")


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        (("--cluster-mtbf", "1e308d"), "--cluster-mtbf"),
        (("--cluster-mtbf", "6h", "--time-per-batch", "1e308d"), "--time-per-batch"),
    ],
    ids=["mtbf-inf", "step-inf"],
)
def test_durations_past_the_largest_float_name_their_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], phrase: str
) -> None:
    """1e308 days is inf seconds: was "mtbf_s: must be finite ..." or "horizon_s: ..."."""
    code, stdout, stderr = _plan(tmp_path, capsys, *extra)
    _refused(code, stdout, stderr, phrase, "finite")


# -- a row space beyond the curves ---------------------------------------------------------------


def test_2_to_the_62_rows_in_all_are_refused_in_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """512 tables of 2^53 rows (each at the generator's limit) add up to 2^62: was
    "--sizes: cache size 4611686018427387904 must be a positive number of rows"."""
    lines = ['name = "wide"', "batch_size = 64", "batches = 100", "seed = 1", "embedding_dim = 16"]
    for t in range(512):
        lines += ["[[tables]]", f'name = "t{t}"', f"rows = {2**53}"]
    spec = tmp_path / "wide.toml"
    spec.write_text("\n".join(lines) + "\n")
    code, stdout, stderr = _plan(tmp_path, capsys, "--workload", str(spec), "--cluster-mtbf", "6h")
    # no option to name: the rows are the spec's (or a trace's)
    _refused(code, stdout, stderr, f"{2**62:,} rows in all", "2^62 - 1", option=False)


def test_curve_sizes_stop_at_the_largest_size_a_curve_takes() -> None:
    """2^62 - 1 rows in all: float64 rounded the top size up to 2^62, which the curves
    refused as "--sizes: ...". Every size is at most the top, and valid."""
    sizes = curve_sizes(MAX_SIZE_ROWS)
    assert sizes[-1] == MAX_SIZE_ROWS and np.all(np.diff(sizes) > 0)
    assert validate_sizes(sizes).tolist() == sizes.tolist()
    with pytest.raises(ConfigError, match="rows in all") as raised:
        curve_sizes(2**62)
    assert "--sizes" not in str(raised.value) and "sizes" not in str(raised.value)


def test_a_cache_size_too_large_says_the_limit() -> None:
    """`replay mrc --sizes 2^62` said "must be a positive number of rows"."""
    with cli_names(), pytest.raises(ConfigError, match=r"--sizes: .* up to 2\^62 - 1"):
        validate_sizes([2**62])


# -- the library under the plan -------------------------------------------------------------------


def test_best_interval_with_no_failure_in_range_is_the_top() -> None:
    assert best_interval(lambda _t: 1.0, 60.0, 1e30, lo_s=1e-3, hi_s=10.0) == 10.0


def test_best_interval_reads_costs_inside_its_range_only() -> None:
    asked: list[float] = []

    def cost(tau: float) -> float:
        asked.append(tau)
        return 0.5

    best_interval(cost, 60.0, 1e-300, lo_s=1.0, hi_s=100.0)
    assert min(asked) >= 1.0 and max(asked) <= 100.0


def test_dalys_model_holds_at_an_mtbf_near_the_largest_float() -> None:
    # (τ + δ) / M below the smallest subnormal: M (e^x - 1) was 0, so goodput 0
    assert daly_goodput(1e-20, 0.0, 0.0, 1e308) == pytest.approx(1.0)
    assert daly_goodput(3600.0, 60.0, 120.0, 1e308) == pytest.approx(3600.0 / 3660.0)
    assert math.isfinite(young_interval_s(10.0, 1e308))  # √(2δM): 2δM overflowed
    assert math.isfinite(daly_interval_s(10.0, 1e308))


def _common(horizon_s: float, tb: float = 1.0) -> dict:
    return {
        "time_per_batch_s": tb,
        "total_rows": 100_000,
        "row_bytes": 64,
        "touched_rows": lambda k: np.minimum(np.asarray(k, dtype=np.float64) * 100.0, 1e5),
        "horizon_s": horizon_s,
        "batch_size": 256,
        "embedding_dim": 16,
    }


def test_the_refusal_carries_the_smallest_mtbf_that_plans() -> None:
    system = resolve_system("hbm-lru", [])
    common = _common(3600.0)
    with pytest.raises(MtbfTooShort) as raised:
        plan_checkpoints(system, mtbf_s=1.0, draws=20, **common)
    least = raised.value.min_mtbf_s
    assert least is not None and least > 1.0
    assert raised.value.mtbf_s == 1.0 and "restart alone" in raised.value.reason
    # the parts a caller rewords with its own options (the CLI's --nodes and --node-mtbf)
    head = f"a cluster MTBF of {raised.value.mtbf_text} (mtbf_s) is {raised.value.reason}; "
    assert str(raised.value).startswith(head)
    assert "give mtbf_s >= " in str(raised.value)  # the API names its parameter
    assert plan_checkpoints(system, mtbf_s=least, draws=20, **common)
    with pytest.raises(MtbfTooShort):  # a single strategy is refused too, not simulated
        plan_strategy(system, strategy="checkfreq", mtbf_s=1e-300, draws=20, **common)


def test_running_without_checkpoints_far_past_the_mtbf_is_not_an_overflow() -> None:
    """`none` over 1,000 MTBFs: e^1000 expected failures was math.expm1's OverflowError."""
    system = resolve_system("hbm-lru", [])
    plans = plan_checkpoints(
        system, strategies=["none", "sync-full"], mtbf_s=2000.0, draws=20,
        **_common(2_000_000.0),
    )  # fmt: skip
    none = next(p for p in plans if p.name == "none")
    assert none.goodput == 0.0 and math.isinf(none.failures_per_run)
    assert plans[0].name == "sync-full" and plans[0].goodput > 0.5


def test_a_chain_too_long_to_walk_names_the_parameter_not_a_plan_option() -> None:
    system = resolve_system("hbm-lru", [])
    kw = _common(1e7, tb=1.0)
    kw.pop("batch_size")
    with pytest.raises(ConfigError) as raised:
        strategy_cost(system, strategy="check-n-run", interval_batches=1.0, **kw)
    assert "give a larger interval_batches" in str(raised.value)
    with cli_names():
        message = str(raised.value)
    assert "interval_batches" not in message and "plan a longer" not in message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (8.71, "8.8s"),
        (0.000187, "0.00019s"),
        (126.0, "2.1min"),
        (3600.0, "1h"),
        (1e299, "1.2e+294d"),
    ],
)
def test_durations_are_rounded_up_to_paste(seconds: float, text: str) -> None:
    assert duration_at_least(seconds) == text
