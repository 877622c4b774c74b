"""`replay.report.figures`: which figures a set of result folders gets, valid and
deterministic PNGs, captions with the computed numbers, no figure without its data."""

from __future__ import annotations

from pathlib import Path

import pytest

import replay
from replay.cli import main
from replay.report.figures import (
    SECTIONS,
    FigureOut,
    new_figure,
    save,
    system_colors,
)
from replay.report.figures_all import generic_figures
from replay.report.figures_time import time_parts
from replay.report.load import Results, load_results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace and every kind of result folder, made once (about 5 s)."""
    base = tmp_path_factory.mktemp("figs")
    trace = str(replay.generate("tiny", base / "trace", batches=40, seed=3))
    results = base / "results"
    commands = [
        ["run", trace, "--system", "hbm-lfu", "--out", str(results / "lfu")],
        ["compare", trace, "--systems", "hbm-lru,hbm-belady,dram", "--workers", "1",
         "--out", str(results / "caches")],
        ["sweep", trace, "--system", "hbm-lru", "--grid", "checkpoint.strategy=sync-full",
         "--grid", "checkpoint.interval_batches=2,5,10", "--set", "failures.mtbf_s=3600",
         "--workers", "1", "--out", str(results / "interval")],
        ["sweep", trace, "--system", "hbm-lru", "--grid", "failures.mtbf_s=60,600,6000",
         "--grid", "checkpoint.strategy=sync-full", "--set", "checkpoint.interval_batches=5",
         "--workers", "1", "--out", str(results / "mtbf")],
        ["sweep", trace, "--system", "hbm-lru", "--grid", "policy.capacity_rows=100,1000,5000",
         "--workers", "1", "--out", str(results / "cap")],
        ["mrc", trace, "--out", str(results / "mrc")],
    ]  # fmt: skip
    for argv in commands:
        assert main(argv) == 0, argv
    return results


@pytest.fixture(scope="module")
def everything(root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Results, Path]:
    results = load_results([root])
    out = tmp_path_factory.mktemp("out")
    return results, out


@pytest.fixture(scope="module")
def figures(everything: tuple[Results, Path]) -> dict[str, FigureOut]:
    results, out = everything
    drawn = generic_figures(results, out)
    names = [f.name for f in drawn]
    assert len(names) == len(set(names)), names
    return {f.name: f for f in drawn}


def _png(path: Path) -> bytes:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), path
    return data


def test_every_figure_the_results_support(
    figures: dict[str, FigureOut], everything: tuple[Results, Path]
) -> None:
    _, out = everything
    assert set(figures) == {
        "workload_skew.png",
        "workload_reuse.png",
        "workload_distinct.png",
        "workload_touched.png",
        "hierarchy_hits.png",
        "hierarchy_traffic.png",
        "mrc.png",
        "time_runs.png",
        "time_caches.png",
        "energy_runs.png",
        "energy_caches.png",
        "checkpoint_bytes.png",
        "sweep_cap.png",
        "sweep_interval.png",
        "sweep_mtbf.png",
    }
    assert {p.name for p in out.iterdir()} == set(figures)
    for figure in figures.values():
        assert figure.section in SECTIONS
        assert figure.title and figure.caption.endswith(".")
        _png(out / figure.name)
    sections = {name: f.section for name, f in figures.items()}
    assert sections["sweep_interval.png"] == "checkpoints"
    assert sections["sweep_mtbf.png"] == "failures"
    assert sections["sweep_cap.png"] == "hierarchy"
    assert sections["time_caches.png"] == "time"
    assert sections["energy_caches.png"] == "energy"


def test_same_inputs_same_bytes(everything: tuple[Results, Path], tmp_path: Path) -> None:
    results, out = everything
    again = generic_figures(results, tmp_path)
    assert again, "no figures"
    for figure in again:
        assert (tmp_path / figure.name).read_bytes() == _png(out / figure.name), figure.name
        assert b"Software" not in (tmp_path / figure.name).read_bytes()[:4096]


def test_captions_state_the_computed_numbers(
    figures: dict[str, FigureOut], everything: tuple[Results, Path]
) -> None:
    results, _ = everything
    workload = results.workload()
    assert workload is not None
    share = 100 * workload["top1pct_share"]
    assert f"{share:.0f}%" in figures["workload_skew.png"].caption
    tables = len(workload["tables"])
    assert f"across {tables} tables" in figures["workload_skew.png"].caption
    assert "80% TrainingCXL" in figures["workload_reuse.png"].caption

    caches = results.compares[0]
    totals = {
        r.label: 1e3 * float(r.batches["time_s"].sum()) / r.batches.height for r in caches.runs
    }
    slowest = max(totals, key=totals.__getitem__)
    scale, unit = (1.0, "ms") if totals[slowest] >= 0.1 else (1e3, "µs")
    caption = figures["time_caches.png"].caption
    assert slowest in caption
    assert f"{totals[slowest] * scale:.3g} {unit}" in caption

    mtbf = next(s for s in results.sweeps if s.path.name == "mtbf")
    first = min(mtbf.runs, key=lambda r: r.values["failures.mtbf_s"])
    goodput = 100 * first.summary["failures"]["goodput_mean"]
    caption = figures["sweep_mtbf.png"].caption
    assert "at mtbf_s=60 " in caption and "at mtbf_s=6,000" in caption
    assert f"{goodput:.0f}%" in caption if goodput >= 10 else f"{goodput:.1f}%" in caption
    assert "interval_batches=2" in figures["sweep_interval.png"].caption
    assert "capacity_rows=100 " in figures["sweep_cap.png"].caption


def test_time_parts_add_up_to_the_batch_time(everything: tuple[Results, Path]) -> None:
    results, _ = everything
    for run in results.all_runs():
        mean = float(run.batches["time_s"].sum()) / run.batches.height
        assert sum(time_parts(run)) == pytest.approx(mean, rel=1e-9)
        assert min(time_parts(run)) >= 0.0


def test_no_figure_without_its_data(root: Path, tmp_path: Path) -> None:
    # a comparison of systems without checkpoints: no curve, no cache sweep, no sweeps
    results = load_results([root / "caches"])
    names = {f.name for f in generic_figures(results, tmp_path)}
    assert "mrc.png" not in names
    assert "checkpoint_bytes.png" not in names
    assert "time_runs.png" not in names
    assert not any(n.startswith("sweep_") for n in names)
    assert {"time_caches.png", "energy_caches.png", "hierarchy_hits.png"} <= names
    assert {p.name for p in tmp_path.iterdir()} == names

    # nothing at all: no figure, no file
    empty = tmp_path / "empty"
    empty.mkdir()
    assert generic_figures(Results(), empty) == []
    assert list(empty.iterdir()) == []


def test_a_capacity_sweep_alone_draws_the_miss_ratio_figure(root: Path, tmp_path: Path) -> None:
    results = load_results([root / "cap"])
    figures = {f.name: f for f in generic_figures(results, tmp_path)}
    assert "mrc.png" in figures
    assert "lru runs" in figures["mrc.png"].caption
    _png(tmp_path / "mrc.png")
    # a curve alone (no run) draws it too, and nothing that needs runs
    alone = tmp_path / "alone"
    alone.mkdir()
    figures = {f.name: f for f in generic_figures(load_results([root / "mrc"]), alone)}
    assert set(figures) == {"mrc.png"}
    assert "LRU miss ratio falls from" in figures["mrc.png"].caption


def test_system_colors_are_stable() -> None:
    colors = system_colors(["a", "b", "a", "c"])
    assert list(colors) == ["a", "b", "c"]
    assert len(set(colors.values())) == 3
    assert system_colors(["a", "b", "c"]) == colors
    many = system_colors([f"s{i}" for i in range(15)])
    few = system_colors([f"s{i}" for i in range(10)])
    assert len(set(many.values())) == 15
    assert all(many[k] == few[k] for k in few)  # more labels keep the first ones' colours


def test_save_writes_a_png_without_version_text(tmp_path: Path) -> None:
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [1, 0])
    save(fig, tmp_path / "a.png")
    save(fig, tmp_path / "b.png")
    data = _png(tmp_path / "a.png")
    assert data == (tmp_path / "b.png").read_bytes()
    assert b"Software" not in data and b"matplotlib" not in data
