"""`replay.report.figures`: which figures a set of result folders gets, valid and
deterministic PNGs, captions with the computed numbers, no figure without its data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import replay
import replay.report.figures as figures_module
from replay._units import format_bytes, format_duration
from replay.cli import main
from replay.report.figures import (
    SECTIONS,
    FigureOut,
    new_figure,
    save,
    system_colors,
)
from replay.report.figures_all import generic_figures
from replay.report.figures_time import batch_time, energy_parts, time_parts
from replay.report.load import Results, RunData, load_results

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


def _second_half(run: RunData) -> pl.DataFrame:
    frame = run.batches.sort("batch")
    return frame.tail(frame.height - frame.height // 2)


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
    totals = {r.label: 1e3 * _second_half(r)["time_s"].mean() for r in caches.runs}
    slowest = max(totals, key=totals.__getitem__)
    caption = figures["time_caches.png"].caption
    assert slowest in caption
    # as every duration of the report is written (the axis keeps its own unit)
    assert format_duration(totals[slowest] / 1e3) in caption

    mtbf = next(s for s in results.sweeps if s.path.name == "mtbf")
    first = min(mtbf.runs, key=lambda r: r.values["failures.mtbf_s"])
    goodput = 100 * first.summary["failures"]["goodput_mean"]
    caption = figures["sweep_mtbf.png"].caption
    assert "at mtbf_s=60 " in caption and "at mtbf_s=6,000" in caption
    assert f"{goodput:.0f}%" in caption if goodput >= 10 else f"{goodput:.1f}%" in caption
    assert "interval_batches=2" in figures["sweep_interval.png"].caption
    assert "capacity_rows=100 " in figures["sweep_cap.png"].caption


def test_time_and_energy_parts_are_second_half_means(everything: tuple[Results, Path]) -> None:
    results, _ = everything
    for run in results.all_runs():
        half = _second_half(run)
        parts = time_parts(run)
        assert parts["compute"] == pytest.approx(half["time_compute_s"].mean(), rel=1e-12)
        for tier in run.spec["tiers"]:
            assert parts[f"tier {tier}"] == pytest.approx(half[f"{tier}_time_s"].mean(), rel=1e-12)
        for link in run.spec["links"]:
            assert parts[f"link {link}"] == pytest.approx(half[f"{link}_time_s"].mean(), rel=1e-12)
        assert parts["checkpoint stall"] == pytest.approx(half["time_checkpoint_s"].mean())
        assert min(parts.values()) >= 0.0
        assert batch_time(run) == pytest.approx(half["time_s"].mean(), rel=1e-12)
        energy = energy_parts(run)
        assert sum(energy.values()) == pytest.approx(half["energy_j"].mean(), rel=1e-9)
        assert energy["compute device"] == pytest.approx(half["energy_compute_j"].mean())
        assert "dynamic, unattributed" not in energy  # the spec accounts for every joule


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


# -- issue 26: per-tier time and energy, PatrickStar, bytes on the mrc, checkpoints, names --

BUDGET = 1024  # rows: one chunk of the compared `chunk` (1,024 rows)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 60-batch tiny trace; a comparison of row caches and chunks at one budget, a sweep
    over the chunk size, runs with 6 and 1 checkpoints, a run of the compared hbm-lru
    alone, and a miss-ratio curve."""
    base = tmp_path_factory.mktemp("small")
    trace = str(base / "trace")
    one = ["--workers", "1"]
    assert main(["generate", "--preset", "tiny", "--batches", "60", "--batch-size", "16",
                 *one, "--out", trace]) == 0  # fmt: skip
    res = base / "results"
    budget = f"policy.capacity_rows={BUDGET}"
    commands = [
        ["compare", trace, "--systems", "hbm-lru,hbm-belady,chunk,dram", "--set", budget,
         *one, "--out", str(res / "budget")],
        ["sweep", trace, "--system", "chunk", "--grid", "policy.chunk_rows=16,64,256",
         "--set", budget, *one, "--out", str(res / "chunks")],
        ["run", trace, "--system", "hbm-lru", "--set", budget, "--out", str(res / "lru-alone")],
        ["run", trace, "--system", "hbm-lru", "--set", "checkpoint.strategy=sync-full",
         "--set", "checkpoint.interval_batches=10", "--out", str(res / "ck-often")],
        ["run", trace, "--system", "dram", "--set", "checkpoint.strategy=sync-full",
         "--set", "checkpoint.interval_batches=40", "--out", str(res / "ck-once")],
        ["mrc", trace, "--out", str(res / "mrc")],
    ]  # fmt: skip
    for argv in commands:
        assert main(argv) == 0, argv
    return res


def _draw(folders: list[Path], out: Path) -> tuple[dict[str, FigureOut], dict[str, Any]]:
    """The figures of `folders`, and the matplotlib figure each was drawn as."""
    drawn: dict[str, Any] = {}
    real = figures_module.save

    def keep(fig: Any, path: Path) -> None:
        real(fig, path)
        drawn[Path(path).name] = fig

    out.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figures_module, "save", keep)
        made = generic_figures(load_results(folders), out)
    return {f.name: f for f in made}, drawn


def test_time_and_energy_by_tier_and_link(small: Path, tmp_path: Path) -> None:
    made, drawn = _draw([small / "budget"], tmp_path)
    runs = load_results([small / "budget"]).compares[0].runs
    for kind in ("time", "energy"):
        figure = made[f"{kind}_budget.png"]
        assert figure.section == kind
        assert "steady state" in figure.title
        assert figure.caption.startswith("Steady state (batches 30–59)")
        fig = drawn[figure.name]
        legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
        for run in runs:
            parts = time_parts(run) if kind == "time" else energy_parts(run)
            largest = max(parts, key=lambda k: parts[k])
            total = batch_time(run) if kind == "time" else sum(parts.values())
            share = parts[largest] / total
            # each system is named by its own label, with its own largest part
            assert f"{run.label} " in figure.caption
            item = figure.caption.split(f"{run.label} ", 1)[1].split(";")[0]
            assert f"largest part: {largest}, " in item, (run.label, item)
            assert f"{100 * share:.0f}%" in item or f"{100 * share:.1f}%" in item, item
            for tier in run.spec["tiers"]:
                if parts[f"tier {tier}"] > 0:
                    assert f"tier {tier}" in legend
            for link in run.spec["links"]:
                if parts[f"link {link}"] > 0:
                    assert f"link {link}" in legend
    # the bars are the second-half means: the stack of each bar is its parts' sum
    fig = drawn["time_budget.png"]
    ax = fig.axes[0]
    tops: dict[float, float] = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    scale = 1e3 if "(ms)" in ax.get_ylabel() else 1e6 if "(µs)" in ax.get_ylabel() else 1.0
    for i, run in enumerate(runs):
        assert tops[float(i)] == pytest.approx(scale * sum(time_parts(run).values()), rel=1e-9)


def test_patrickstar_chunk_size_figure(small: Path, tmp_path: Path) -> None:
    made, drawn = _draw([small / "budget", small / "chunks"], tmp_path)
    figure = made["sweep_chunks.png"]
    assert figure.section == "hierarchy"
    sweep = load_results([small / "chunks"]).sweeps[0]
    first = min(sweep.runs, key=lambda r: r.values["policy.chunk_rows"])
    half = _second_half(first)
    hit = half["hits"].sum() / (half["hits"].sum() + half["misses"].sum())
    assert f"from 16 to 256 rows per chunk the hit ratio goes from {_pct_text(hit)}" in (
        figure.caption
    )
    assert f"budget of {BUDGET:,} rows" in figure.caption
    # the row caches of the same budget beside it, by their own labels; not dram (static)
    assert "hbm-lru caches rows" in figure.caption and "hbm-belady caches rows" in figure.caption
    assert "dram" not in figure.caption
    fig = drawn["sweep_chunks.png"]
    assert len(fig.axes) == 3
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert labels == ["chunk", "hbm-lru (rows)", "hbm-belady (rows)"]
    ys = fig.axes[0].get_lines()[0].get_ydata()
    assert ys[0] == pytest.approx(100 * hit)
    moved = fig.axes[1].get_lines()[0].get_ydata()
    link_bytes = sum(
        half[c].mean() for c in half.columns if c.endswith(("_h2d_bytes", "_d2h_bytes"))
    )
    unit = fig.axes[1].get_ylabel().split()[1]
    # memory sizes in binary units (`replay._units.format_bytes`'s)
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    assert moved[0] * scale == pytest.approx(link_bytes)


def _pct_text(fraction: float) -> str:
    value = 100 * fraction
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def test_mrc_has_a_bytes_axis_and_the_budget(small: Path, tmp_path: Path) -> None:
    made, drawn = _draw([small / "budget", small / "mrc"], tmp_path)
    figure = made["mrc.png"]
    row_bytes = load_results([small / "budget"]).compares[0].runs[0].summary["row_bytes"]
    fig = drawn["mrc.png"]
    ax = fig.axes[0]
    tops = [c for c in ax.child_axes if "bytes" in c.get_xlabel()]
    assert tops and f"{row_bytes} B per row" in tops[0].get_xlabel()
    budget = [ln for ln in ax.get_lines() if ln.get_label().startswith("budget ")]
    assert budget and budget[0].get_xdata()[0] == BUDGET
    # memory sizes in binary units, as `replay._units.format_bytes` writes them
    assert f"budget of {BUDGET:,} rows ({format_bytes(BUDGET * row_bytes)})" in figure.caption
    # a curve alone: no run, so no budget; the row size is the curve's own, if it says
    alone, drawn = _draw([small / "mrc"], tmp_path / "alone")
    ax = drawn["mrc.png"].axes[0]
    assert "budget" not in alone["mrc.png"].caption
    assert not any(ln.get_label().startswith("budget ") for ln in ax.get_lines())
    own = load_results([small / "mrc"]).mrcs[0].document.get("row_bytes")
    labels = [c.get_xlabel() for c in ax.child_axes]
    assert labels == ([f"cache size (bytes, {own} B per row)"] if own else [])


def test_checkpoint_figure_needs_three_checkpoints(small: Path, tmp_path: Path) -> None:
    made, _ = _draw([small / "ck-once"], tmp_path / "once")
    assert "checkpoint_bytes.png" not in made
    made, drawn = _draw([small / "ck-often", small / "ck-once"], tmp_path / "both")
    figure = made["checkpoint_bytes.png"]
    assert "Left out with fewer than 3 writes during training: dram (ck-once)." in figure.caption
    run = load_results([small / "ck-often"]).runs[0]
    writes = run.checkpoints.filter((pl.col("batch") >= 0) & (pl.col("bytes") > 0))
    assert writes.height == 6
    assert f"{run.label} writes {writes.height:,} writes during training" in figure.caption
    ax = drawn["checkpoint_bytes.png"].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [run.label]


def test_captions_name_each_series_by_its_own_run(small: Path, tmp_path: Path) -> None:
    # lru-alone and the comparison's hbm-lru have identical data: drawn once, and the
    # caption says which run stands for which, never "a = b"
    made, drawn = _draw([small / "lru-alone", small / "budget"], tmp_path)
    for figure in made.values():
        assert " = " not in figure.caption, figure.name
    hits = made["hierarchy_hits.png"]
    assert "hbm-lru (lru-alone) also stands for hbm-lru." in hits.caption
    fig = drawn["hierarchy_hits.png"]
    boxes = [*fig.legends, fig.axes[0].get_legend()]
    legend = [t.get_text() for box in boxes if box is not None for t in box.get_texts()]
    assert legend == ["hbm-lru (lru-alone) (+1 identical)", "hbm-belady", "chunk"]


def test_log_axes_are_labelled_in_plain_numbers(tmp_path: Path) -> None:
    """Every log axis `save` writes reads 0.01, 1,000, 10 k (or 4, 8, 16 in base 2), not
    matplotlib's powers (10^-2, 10^3, 2^4)."""
    assert [figures_module.plain_number(x) for x in (2e-5, 0.01, 0.5, 3.0, 1000.0, 1e4, 2.5e6)] == [
        "0.00002", "0.01", "0.5", "3", "1,000", "10 k", "2.5 M",
    ]  # fmt: skip
    fig = figures_module.new_figure()
    tens, twos = fig.subplots(1, 2)
    tens.plot([0.01, 1000.0], [1, 2])
    tens.set_xscale("log")
    twos.plot([4, 32], [1, 2])
    twos.set_xscale("log", base=2)
    figures_module.save(fig, tmp_path / "f.png")
    labels = [
        [t.get_text() for t in a.xaxis.get_ticklabels() if t.get_text()] for a in (tens, twos)
    ]
    assert {"0.01", "1", "1,000"} <= set(labels[0]) and {"4", "8", "16", "32"} <= set(labels[1])
    assert not any("$" in text for text in labels[0] + labels[1])
