"""Figures of the papers' scenarios, drawn from `replay.report.analysis` results:

- `ladder_time.png`: TrainingCXL's ladder, steady-state time per batch stacked by term
  (what each step removes is the slice that shrinks);
- `ladder_gain.png`: each step's speedup and energy saving over `pmem-host`, beside the
  paper's 5.2× and 76%;
- `fastpersist.png`: write speedup over `torch-save` against drives (a line per number
  of writers; up to 116× published), and write time per checkpoint against the forward +
  backward time it must hide behind;
- `checknrun.png`: write-bandwidth and capacity reduction against `sync-full` per
  increment mode and bit width, beside the published 6–17× and 2.5–8× bands;
- `sensitivity_<n>.png`: how a comparison's speedup and energy saving move when an
  assumption changes (two sweeps of one grid on two systems).

Like the generic figures, they are written by `figures.save`, which draws every name as
written (never as mathtext or TeX).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from replay._units import format_duration, format_multiple, format_number, format_rate
from replay.report.analysis import PAPER, TERMS, check_n_run_basis
from replay.report.figures import TIME_PARTS, FigureOut, new_figure, save

# the component colours and names of every time figure (TERMS order)
TERM_COLORS = dict(zip(TERMS, (color for _, color in TIME_PARTS), strict=True))
TERM_LABELS = dict(zip(TERMS, (label for label, _ in TIME_PARTS), strict=True))


def _ladder_time(lad: dict[str, Any], out_dir: Path) -> FigureOut:
    steps = lad["steps"]
    names = [s["system"] for s in steps]
    totals = np.array([s["batch_time_s"] * 1e3 for s in steps])
    rest = totals[1:] if names[0] == "ssd" and len(steps) > 2 else totals
    top = float(rest.max()) * 1.25
    fig = new_figure(7.5, 4.2)
    ax = fig.add_subplot()
    x = np.arange(len(steps))
    bottom = np.zeros(len(steps))
    for term in TERMS:
        values = np.array([s["terms_s"][term] * 1e3 for s in steps])
        if not values.any():
            continue
        ax.bar(x, values, bottom=bottom, color=TERM_COLORS[term], label=TERM_LABELS[term])
        bottom += values
    for i, total in enumerate(totals):
        if total > top:
            ax.text(
                i,
                top * 0.97,
                f"{total:.3g} ms\n(off scale)",
                ha="center",
                va="top",
                fontsize=8,
                color="white",
                fontweight="bold",
            )
        else:
            ax.text(i, total, f"{total:.3g}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top)
    ax.set_xticks(x, names)
    ax.set_ylabel("time per batch (ms, steady state)")
    ax.set_title("TrainingCXL ladder: where each batch's time goes")
    ax.legend(fontsize=8, loc="upper right")
    save(fig, out_dir / "ladder_time.png")
    slowest = max(steps, key=lambda s: s["batch_time_s"])
    fastest = min(steps, key=lambda s: s["batch_time_s"])
    return FigureOut(
        "ladder_time.png",
        "TrainingCXL ladder: time per batch by term",
        f"From {slowest['system']} ({format_duration(slowest['batch_time_s'])} per batch) to "
        f"{fastest['system']} ({format_duration(fastest['batch_time_s'])}); each step's gain is "
        "the slice that shrinks.",
        "ladder",
    )


def _ladder_gain(lad: dict[str, Any], out_dir: Path) -> FigureOut | None:
    steps = lad["steps"]
    by = {s["system"]: s for s in steps}
    if "pmem-host" not in by:
        return None
    base = by["pmem-host"]
    shown = [s for s in steps if s["system"] != "ssd"]
    names = [s["system"] for s in shown]
    speed = [base["batch_time_s"] / s["batch_time_s"] for s in shown]
    saving = [100 * (1 - s["batch_energy_j"] / base["batch_energy_j"]) for s in shown]
    fig = new_figure(8.0, 3.8)
    ax1, ax2 = fig.subplots(1, 2)
    x = np.arange(len(shown))
    ax1.bar(x, speed, color="#4c72b0", label="model (steady state)")
    ax1.axhline(PAPER["trainingcxl_speedup"], color="k", ls="--", lw=1, label="paper: cxl 5.2×")
    ax1.set_xticks(x, names, rotation=30, ha="right")
    ax1.set_ylabel("speedup over pmem-host (×)")
    ax1.set_title("Training speedup")
    ax1.legend(fontsize=8, loc="upper left")
    ax2.bar(x, saving, color="#55a868", label="model (steady state)")
    ax2.axhline(
        100 * PAPER["trainingcxl_energy_saving"], color="k", ls="--", lw=1, label="paper: cxl 76%"
    )
    ax2.set_xticks(x, names, rotation=30, ha="right")
    ax2.set_ylabel("energy saved vs pmem-host (%)")
    ax2.set_ylim(min(0.0, *saving) * 1.1, 100)
    ax2.set_title("Energy saving per batch")
    ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle("TrainingCXL: the model beside the paper's headline")
    save(fig, out_dir / "ladder_gain.png")
    return FigureOut(
        "ladder_gain.png",
        "TrainingCXL ladder: speedup and energy saving over pmem-host",
        f"cxl runs {format_multiple(speed[-1])} faster than pmem-host and saves "
        f"{saving[-1]:.0f}% of the energy per batch in steady state (paper: 5.2× and 76%).",
        "ladder",
    )


def _fastpersist(fp: dict[str, Any], out_dir: Path) -> FigureOut:
    runs = [r for r in fp["runs"] if r["speedup"] is not None]
    fig = new_figure(9.5, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    # a line per (writers, drive generation): presets and sweeps may mix drive speeds
    groups = sorted({(r["writers"], r["drive_write_bw_bytes_per_s"]) for r in runs})
    for w, bw in groups:
        pts = {
            r["drives"]: r["speedup"]
            for r in runs
            if (r["writers"], r["drive_write_bw_bytes_per_s"]) == (w, bw)
        }
        xs = sorted(pts)
        drive = f", {format_rate(bw)} drives" if bw else ""
        ax1.plot(xs, [pts[d] for d in xs], marker="o", label=f"{w} writer{'s' * (w > 1)}{drive}")
    ax1.axhline(PAPER["fastpersist_speedup"], color="k", ls="--", lw=1, label="paper: up to 116×")
    ax1.set_yscale("log")
    ax1.set_xlabel("NVMe drives")
    ax1.set_ylabel("write speedup over torch-save (×)")
    ax1.set_title("Checkpoint write speedup")
    ax1.legend(fontsize=7, loc="upper left")
    drives = sorted({r["drives"] for r in runs})
    best = {d: min(r["write_s"] for r in runs if r["drives"] == d) for d in drives}
    ax2.bar(
        [str(d) for d in drives],
        [best[d] * 1e3 for d in drives],
        color="#8172b3",
        label="fastest write per drive count",
    )
    base = fp.get("baseline")
    if base:
        ax2.axhline(
            base["write_s"] * 1e3, color="#c44e52", ls=":", lw=1.2, label="torch-save write"
        )
    ax2.axhline(
        fp["compute_s"] * 1e3, color="k", ls="--", lw=1, label="forward + backward per batch"
    )
    ax2.set_yscale("log")
    ax2.set_xlabel("NVMe drives")
    ax2.set_ylabel("time (ms)")
    ax2.set_title("Write time per checkpoint")
    ax2.legend(fontsize=7, loc="center right")
    fig.suptitle("FastPersist: parallel writes against torch.save")
    save(fig, out_dir / "fastpersist.png")
    free = "is free" if fp["per_batch_free"] else "is not free"
    return FigureOut(
        "fastpersist.png",
        "FastPersist: write speedup and per-batch write time",
        f"Up to {format_multiple(fp['max_speedup'])} faster writes than torch-save ({fp['best']}); "
        f"per-batch checkpointing {free}: {format_duration(fp['per_batch_write_s'])} to write "
        f"against {format_duration(fp['compute_s'])} of forward + backward.",
        "checkpoints",
    )


def _checknrun(cnr: dict[str, Any], out_dir: Path) -> FigureOut:
    # the rows the text lists as not shown (artifacts of the span) are not drawn either
    rows = [r for r in cnr["runs"] if r.get("needs") is None]
    modes = list(dict.fromkeys(r["increment"] for r in rows))
    bits = sorted({r["quantize_bits"] for r in rows})
    fig = new_figure(10.5, 3.8)
    axes = fig.subplots(1, 2)
    width = 0.8 / max(len(bits), 1)
    for ax, key, band, title in (
        (axes[0], "bandwidth_reduction", PAPER["checknrun_bandwidth"], "Write bandwidth"),
        (axes[1], "capacity_reduction", PAPER["checknrun_capacity"], "Capacity"),
    ):
        ax.axhspan(*band, color="0.85", label=f"paper: {band[0]:g}–{band[1]:g}×")
        for j, b in enumerate(bits):
            values = []
            for mode in modes:
                hit = [r[key] for r in rows if r["increment"] == mode and r["quantize_bits"] == b]
                values.append(hit[0] if hit and hit[0] is not None else np.nan)
            label = "fp32" if b == 0 else f"{b}-bit"
            ax.bar(
                np.arange(len(modes)) + (j - (len(bits) - 1) / 2) * width,
                values,
                width,
                label=label,
            )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(modes)), modes)
        ax.set_xlabel("increment mode")
        ax.set_ylabel("reduction against sync-full (×)")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Check-N-Run: incremental and quantized checkpoints")
    save(fig, out_dir / "checknrun.png")
    lo, hi = cnr["bandwidth_reduction_range"]
    clo, chi = cnr["capacity_reduction_range"]
    return FigureOut(
        "checknrun.png",
        "Check-N-Run: bandwidth and capacity reductions",
        f"{format_number(lo)}–{format_multiple(hi)} less write bandwidth and "
        f"{format_number(clo)}–{format_multiple(chi)} less capacity "
        f"than full synchronous checkpoints at the same interval, {check_n_run_basis(cnr)} "
        "(paper: 6–17× and 2.5–8×).",
        "checkpoints",
    )


def _sensitivity(study: dict[str, Any], index: int, out_dir: Path) -> FigureOut | None:
    key = study["keys"][0]
    points = [p for p in study["points"] if p["speedup"] is not None]
    try:
        xs = [float(p["values"][key]) for p in points]
    except (KeyError, TypeError, ValueError):
        return None
    order = np.argsort(xs)
    xs_sorted = [xs[i] for i in order]
    fig = new_figure(7.0, 3.6)
    ax = fig.add_subplot()
    ax.plot(
        xs_sorted,
        [points[i]["speedup"] for i in order],
        marker="o",
        color="#4c72b0",
        label="speedup (×)",
    )
    ax.set_xlabel(key)
    system, baseline = str(study["system"]), str(study["baseline"])
    ax.set_ylabel(f"{system} speedup over {baseline} (×)")
    if min(xs_sorted) > 0 and max(xs_sorted) > 20 * min(xs_sorted):
        ax.set_xscale("log")
    ax2 = ax.twinx()
    ax2.plot(
        xs_sorted,
        [100 * (points[i]["energy_saving"] or 0.0) for i in order],
        marker="s",
        ls="--",
        color="#55a868",
        label="energy saving (%)",
    )
    ax2.set_ylabel("energy saving (%)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="best")
    ax.set_title(f"Sensitivity: {system} vs {baseline} as {key} changes")
    name = f"sensitivity_{index}.png"
    save(fig, out_dir / name)
    speeds = [p["speedup"] for p in points]
    return FigureOut(
        name,
        f"Sensitivity of {study['system']} over {study['baseline']} to {key}",
        f"Over {key} from {min(xs):g} to {max(xs):g}, the speedup ranges "
        f"{format_number(min(speeds))}–{format_multiple(max(speeds))}.",
        "sensitivity",
    )


def scenario_figures(analysis: dict[str, Any], out_dir: Path) -> list[FigureOut]:
    """Every scenario figure the analysis supports, drawn into out_dir."""
    figures: list[FigureOut | None] = []
    lad = analysis.get("ladder")
    if lad:
        figures += [_ladder_time(lad, out_dir), _ladder_gain(lad, out_dir)]
    fp = analysis.get("fastpersist")
    if fp and fp.get("max_speedup") is not None:
        figures.append(_fastpersist(fp, out_dir))
    cnr = analysis.get("check_n_run")
    if cnr and cnr.get("bandwidth_reduction_range"):
        figures.append(_checknrun(cnr, out_dir))
    for i, study in enumerate(analysis.get("sensitivity") or []):
        figures.append(_sensitivity(study, i, out_dir))
    return [f for f in figures if f is not None]


__all__ = ["TERM_COLORS", "TERM_LABELS", "scenario_figures"]
