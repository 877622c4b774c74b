"""`replay report`: result folders in, a report folder out (DESIGN section 8).

It reads result folders only (`replay.report.load`), never re-runs a model. The report
folder holds `report.md`, a self-contained `report.html` (figures embedded),
`figures/*.png` and `summary.json` (every number the text quotes, for pipelines). It is
built beside its final place and renamed when complete. Output is deterministic: the
same result folders give the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from replay._output import atomic_folder, write_json
from replay._version import __version__
from replay.errors import OutputError
from replay.report.analysis import LADDER, PAPER, analyse, energy_per_batch, time_terms
from replay.report.document import (
    Block,
    Bullets,
    Heading,
    Image,
    Paragraph,
    Table,
    to_html,
    to_markdown,
)
from replay.report.figures import FigureOut, sweep_figure_names
from replay.report.figures_all import generic_figures
from replay.report.load import Results, RunData, load_results
from replay.report.scenario_figures import scenario_figures

REPORT_FILES = frozenset({"report.md", "report.html", "summary.json", "figures"})
TITLE = "replay report"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4g} ms"


def _x(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3g}×"


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.{digits}f}%"


def _bytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value:.3g} B"


def _images(figures: list[FigureOut], section: str) -> list[Block]:
    return [Image(f.name, f.title, f.caption) for f in figures if f.section == section]


def _workload_blocks(results: Results, figures: list[FigureOut]) -> list[Block]:
    work = results.workload()
    blocks: list[Block] = [Heading("Workload")]
    if work is None:
        blocks.append(Paragraph("No workload.json in the results (runs made with --no-inspect)."))
        return blocks
    tables = work.get("tables", [])
    blocks.append(
        Paragraph(
            f"{work['lookups']:,} lookups in {work['batches']:,} batches over "
            f"{len(tables)} tables ({work['rows']:,} rows, {_pct(work['touched_fraction'])} "
            f"of them touched). The hottest 1% of rows take {_pct(work['top1pct_share'])} of "
            f"the lookups; a batch's distinct rows are {_pct(work['distinct_per_batch_mean'])} "
            f"of its lookups; {_pct(work['consecutive_reuse_mean'])} of a batch's distinct "
            f"rows were also in the batch before (TrainingCXL cites about "
            f"{_pct(PAPER['consecutive_reuse'], 0)})."
        )
    )
    blocks += _images(figures, "workload")
    return blocks


def _compare_table(runs: tuple[RunData, ...]) -> Table:
    base = time_terms(runs[0])["total"]
    rows = []
    for run in runs:
        terms = time_terms(run)
        s = run.summary
        ck = s.get("checkpoint") or {}
        rows.append(
            (
                run.label,
                _ms(terms["total"]),
                _x(base / terms["total"] if terms["total"] > 0 else None),
                f"{energy_per_batch(run):.4g} J",
                f"{s['policy']['hit_ratio']:.4f}",
                str(ck.get("strategy", "none")),
                _pct(ck.get("overhead", 0.0)),
            )
        )
    return Table(
        (
            "system",
            "time per batch (steady)",
            "speedup",
            "energy per batch",
            "hit ratio",
            "checkpoint",
            "checkpoint overhead",
        ),
        tuple(rows),
    )


def _hierarchy_blocks(analysis: dict[str, Any], figures: list[FigureOut]) -> list[Block]:
    blocks: list[Block] = [Heading("Memory hierarchy")]
    caches = analysis.get("caches")
    if caches:
        blocks.append(
            Paragraph(
                "PatrickStar's chunk placement against row caches of the same budget "
                f"(comparison {caches['compare']}): chunks move whole chunks of contiguous "
                "rows, so their hit ratio and traffic show the cost of chunk granularity "
                "(amplification = bytes moved / bytes of the rows needed)."
            )
        )
        blocks.append(
            Table(
                (
                    "system",
                    "policy",
                    "capacity (rows)",
                    "hit ratio",
                    "amplification",
                    "link bytes per batch",
                    "time per batch",
                ),
                tuple(
                    (
                        r["system"],
                        r["policy"],
                        f"{r['capacity_rows']:,}",
                        f"{r['hit_ratio']:.4f}",
                        f"{r['amplification']:.3g}",
                        _bytes(r["link_bytes_per_batch"]),
                        _ms(r["batch_time_s"]),
                    )
                    for r in caches["runs"]
                ),
            )
        )
    blocks += _images(figures, "hierarchy")
    if len(blocks) == 1:
        blocks.append(Paragraph("No cached runs or miss-ratio curves in the results."))
    return blocks


def _time_blocks(results: Results, figures: list[FigureOut]) -> list[Block]:
    blocks: list[Block] = [
        Heading("Time per batch"),
        Paragraph(
            "Steady state leaves out batch 0, which pays one-time costs (an initial full "
            "checkpoint, cold caches); speedups are against the first system of each "
            "comparison."
        ),
    ]
    for compare in results.compares:
        blocks.append(Heading(f"Comparison {compare.path.name}", 3))
        if compare.overrides:
            blocks.append(Paragraph("with --set " + " ".join(compare.overrides)))
        blocks.append(_compare_table(compare.runs))
    if results.runs:
        blocks.append(Heading("Runs given alone", 3))
        blocks.append(_compare_table(tuple(results.runs)))
    blocks += _images(figures, "time")
    return blocks


def _ladder_blocks(analysis: dict[str, Any], figures: list[FigureOut]) -> list[Block]:
    lad = analysis.get("ladder")
    if not lad:
        return []
    blocks: list[Block] = [
        Heading("TrainingCXL ladder"),
        Paragraph(
            "Each step of "
            + " → ".join(s["system"] for s in lad["steps"])
            + (
                " is no slower than the one before."
                if lad["monotone"]
                else " — NOT monotone: a step is slower than the one before."
            )
            + " What each step changes, and the terms of the time per batch that moved:"
        ),
    ]
    items = []
    prev = None
    for step in lad["steps"]:
        if prev is not None:
            moved = "; ".join(
                f"{c['phrase']} {'−' if c['delta_s'] < 0 else '+'}{abs(c['delta_s']) * 1e3:.3g} ms"
                for c in step.get("changes", [])
            )
            items.append(
                f"{prev} → {step['system']}: {_x(step['speedup_over_previous'])} "
                f"({_ms(step['batch_time_s'])} per batch, "
                f"{_pct(step['time_saved_fraction'])} less time). {step['change']}. "
                f"Terms: {moved or 'none changed by 1% or more'}."
                + (
                    f" {step['raw_lookups']:,} lookups read a row the previous batch wrote."
                    if step["raw_lookups"]
                    else ""
                )
            )
        prev = step["system"]
    blocks.append(Bullets(tuple(items)))
    head = lad.get("cxl_over_pmem_host")
    if head:
        blocks.append(
            Paragraph(
                f"Overall, cxl over pmem-host: {_x(head['speedup'])} faster and "
                f"{_pct(head['energy_saving'])} less energy per batch in steady state "
                f"({_x(head['speedup_whole_trace'])} and "
                f"{_pct(head['energy_saving_whole_trace'])} over the whole trace, which "
                "includes pmem-host's initial full checkpoint); the paper reports 5.2× and "
                "76%."
            )
        )
    blocks += _images(figures, "ladder")
    return blocks


def _checkpoint_blocks(analysis: dict[str, Any], figures: list[FigureOut]) -> list[Block]:
    blocks: list[Block] = [Heading("Checkpoints")]
    fp = analysis.get("fastpersist")
    if fp and fp.get("max_speedup") is not None:
        base = fp.get("baseline") or {}
        blocks += [
            Heading("FastPersist against torch.save", 3),
            Paragraph(
                f"torch-save writes {_bytes(base.get('bytes_per_checkpoint'))} per checkpoint "
                f"in {_ms(base.get('write_s'))}. The fastest FastPersist configuration "
                f"({fp['best']}) is {_x(fp['max_speedup'])} faster (paper: up to 116×, across "
                "many nodes). Per-batch checkpointing is "
                + ("free" if fp["per_batch_free"] else "not free")
                + f" for this workload: {_ms(fp['per_batch_write_s'])} to write against "
                f"{_ms(fp['compute_s'])} of forward + backward; it would need "
                f"{_bytes(fp['needed_write_bw_bytes_per_s'])}/s of aggregate writes."
            ),
            Table(
                ("run", "writers", "drives", "write time", "write rate", "speedup", "overhead"),
                tuple(
                    (
                        r["label"],
                        str(r["writers"]),
                        str(r["drives"]),
                        _ms(r["write_s"]),
                        _bytes(r["write_bw_bytes_per_s"]) + "/s",
                        _x(r["speedup"]),
                        _pct(r["overhead"], 0),
                    )
                    for r in fp["runs"]
                ),
            ),
        ]
    cnr = analysis.get("check_n_run")
    if cnr:
        blocks += [
            Heading("Check-N-Run against full checkpoints", 3),
            Paragraph(
                "Reductions against sync-full at the same interval: write bandwidth is bytes "
                "per checkpoint after the initial full one; capacity is the most bytes kept "
                "for a restore (paper: 6–17× and 2.5–8×)."
            ),
            Table(
                (
                    "increment",
                    "bits",
                    "interval (batches)",
                    "bytes per checkpoint",
                    "bandwidth reduction",
                    "capacity reduction",
                    "restored-row error",
                ),
                tuple(
                    (
                        r["increment"],
                        "fp32" if r["quantize_bits"] == 0 else str(r["quantize_bits"]),
                        str(r["interval_batches"]),
                        _bytes(r["bytes_per_checkpoint"]),
                        _x(r["bandwidth_reduction"]),
                        _x(r["capacity_reduction"]),
                        "-"
                        if not r["quantization_error"]
                        else f"{float(r['quantization_error']):.3g}",
                    )
                    for r in cnr["runs"]
                ),
            ),
        ]
    cf = analysis.get("checkfreq")
    if cf:
        blocks += [
            Heading("CheckFreq", 3),
            Bullets(
                tuple(
                    f"{r['label']}: the rule checkpoints every {r['rule_interval_batches']} "
                    f"batches for a {_pct(r['rule_overhead'], 2)} stall share; measured "
                    f"{_pct(r['overhead'], 2)} over {r['count']} checkpoints in "
                    f"{r['batches']} batches (paper: within 3.5%)"
                    for r in cf["runs"]
                )
            ),
        ]
    blocks += _images(figures, "checkpoints")
    if len(blocks) == 1:
        blocks.append(Paragraph("No checkpointing runs in the results."))
    return blocks


def _failure_blocks(results: Results, figures: list[FigureOut]) -> list[Block]:
    runs = [r for r in results.all_runs() if r.summary.get("failures")]
    blocks: list[Block] = [Heading("Failures and goodput")]
    if runs:
        rows = []
        for run in runs[:30]:
            f = run.summary["failures"]
            yd = f.get("young_daly_interval_s")
            used = f.get("interval_s_used")
            rows.append(
                (
                    run.label,
                    f"{f['mtbf_s']:.4g} s",
                    f"{f['goodput_mean']:.4f}",
                    f"{f['goodput_p5']:.4f}",
                    f"{f['lost_work_s_mean']:.4g} s",
                    "n/a" if yd is None else f"{yd:.4g} s",
                    "n/a" if used is None else f"{used:.4g} s",
                )
            )
        blocks.append(
            Table(
                (
                    "run",
                    "MTBF",
                    "goodput (mean)",
                    "goodput (p5)",
                    "lost work per failure",
                    "Young/Daly interval",
                    "interval used",
                ),
                tuple(rows),
            )
        )
    blocks += _images(figures, "failures")
    if len(blocks) == 1:
        blocks.append(Paragraph("No failure model in the results (set failures.mtbf_s)."))
    return blocks


def _sensitivity_blocks(analysis: dict[str, Any], figures: list[FigureOut]) -> list[Block]:
    studies = analysis.get("sensitivity") or []
    blocks: list[Block] = [
        Heading("Sensitivity to assumptions"),
        Paragraph(
            "Numbers the papers do not give (absolute latencies, per-copy software costs, "
            "power, compute rate) are stated assumptions in the presets (marked ASSUMPTION "
            "in devices.toml and the preset files). Two sweeps of one grid on two systems "
            "show how a comparison moves when one of them changes."
        ),
    ]
    for study in studies:
        pts = ", ".join(
            f"{','.join(f'{k}={v}' for k, v in p['values'].items())}: {_x(p['speedup'])}, "
            f"{_pct(p['energy_saving'], 0)} energy"
            for p in study["points"]
        )
        blocks.append(Paragraph(f"{study['system']} against {study['baseline']} — {pts}."))
    blocks += _images(figures, "sensitivity")
    return blocks if studies else []


def _sources_blocks(results: Results) -> list[Block]:
    rows = []
    for run in results.all_runs():
        rows.append(
            (
                run.label,
                str(run.config.get("origin", "")),
                " ".join(run.config.get("overrides", [])) or "-",
                "/".join(run.path.parts[-2:]),
            )
        )
    return [
        Heading("Result folders"),
        Paragraph(
            f"Made by replay {__version__} from "
            + ", ".join(str(p) for p in results.sources)
            + f": {len(rows)} runs, {len(results.mrcs)} miss-ratio curves."
        ),
        Table(("run", "system from", "overrides", "folder"), tuple(rows[:200])),
    ]


def build_blocks(
    results: Results, analysis: dict[str, Any], figures: list[FigureOut]
) -> list[Block]:
    work = results.workload()
    trace = (work or {}).get("trace", "")
    runs = results.all_runs()
    meta = runs[0].meta.get("trace", {}) if runs else {}
    what = f"{meta['workload']} trace" if meta.get("workload") else "trace"
    intro = (
        f"Replay of the {what} {trace} ({work['batches']:,} batches, {work['lookups']:,} "
        f"lookups) on {len(runs)} system configurations."
        if work
        else f"{len(runs)} runs; the trace's statistics were not recorded."
    )
    blocks: list[Block] = [
        Heading(TITLE, 1),
        Paragraph(
            intro + " Every number and figure below was computed by replay from the result "
            "folders listed at the end."
        ),
    ]
    blocks += [
        Heading("Claims: the papers beside this model"),
        Paragraph(
            "Each published claim of DESIGN section 7 beside the figure this model "
            "computes for it on this trace, and the assumptions behind the figure. The "
            "model need not match a number it cannot derive."
        ),
        Table(
            ("claim", "source", "this model", "assumptions"),
            tuple(
                (c["claim"], c["source"], c["model"], c["assumptions"]) for c in analysis["claims"]
            ),
        ),
    ]
    blocks += _workload_blocks(results, figures)
    blocks += _hierarchy_blocks(analysis, figures)
    blocks += _time_blocks(results, figures)
    blocks += _ladder_blocks(analysis, figures)
    blocks += _checkpoint_blocks(analysis, figures)
    blocks += _failure_blocks(results, figures)
    energy = _images(figures, "energy")
    if energy:
        blocks += [Heading("Energy"), *energy]
    blocks += _sensitivity_blocks(analysis, figures)
    studied = {folder for study in analysis.get("sensitivity") or [] for folder in study["folders"]}
    paired = {
        name
        for sweep, name in zip(results.sweeps, sweep_figure_names(results.sweeps), strict=True)
        if sweep.path.name in studied
    }
    other = [f for f in _images(figures, "sweeps") if f.name not in paired]
    if other:
        blocks += [Heading("Other sweeps"), *other]
    blocks += _sources_blocks(results)
    return blocks


def check_report_folder(out: Path) -> None:
    """OutputError if `out/figures` holds anything but PNG files (--force replaces only
    an earlier report's figures)."""
    figures = out / "figures"
    if figures.is_dir():
        stray = sorted(p.name for p in figures.iterdir() if p.suffix != ".png" or p.is_dir())
        if stray:
            raise OutputError(
                f"{out}: figures/ holds {stray[0]!r}, not a report figure; choose another --out"
            )


def build_report(
    paths: list[Path], out: Path, *, force: bool = False, names: list[str] | None = None
) -> dict[str, Any]:
    """Load `paths`, write the report folder `out`; returns its summary.json.

    `names` are how the report shows the paths (default: as given); run folders are
    shown relative to the path they were found under, so the output does not depend on
    where the results lie.
    """
    results = load_results(paths)
    check_report_folder(out)
    shown = names if names is not None else [str(p) for p in paths]
    results.sources = [Path(n) for n in shown]
    analysis = analyse(results)
    with atomic_folder(out, force=force, owned=REPORT_FILES, what="report") as tmp:
        fig_dir = tmp / "figures"
        fig_dir.mkdir()
        # both draw names as written (no mathtext, no TeX): see figures.save
        figures = generic_figures(results, fig_dir) + scenario_figures(analysis, fig_dir)
        blocks = build_blocks(results, analysis, figures)
        (tmp / "report.md").write_text(to_markdown(blocks))
        (tmp / "report.html").write_text(to_html(blocks, fig_dir, title=TITLE))
        summary = {
            "tool": "replay",
            "version": __version__,
            "sources": shown,
            "runs": [
                {"label": r.label, "system": r.system, "folder": _shown_folder(r, paths)}
                for r in results.all_runs()
            ],
            "workload": _workload_summary(results),
            "ladder_systems": list(LADDER),
            **analysis,
            "figures": [
                {"name": f.name, "title": f.title, "caption": f.caption, "section": f.section}
                for f in figures
            ],
        }
        write_json(tmp / "summary.json", summary)
    return summary


def _shown_folder(run: RunData, paths: list[Path]) -> str:
    for base in paths:
        try:
            return run.path.relative_to(base).as_posix() or "."
        except ValueError:
            continue
    return run.path.name


def _workload_summary(results: Results) -> dict[str, Any] | None:
    work = results.workload()
    if work is None:
        return None
    keys = (
        "trace",
        "batches",
        "lookups",
        "rows",
        "distinct_rows",
        "touched_fraction",
        "top1pct_share",
        "distinct_per_batch_mean",
        "consecutive_reuse_mean",
    )
    return {k: work.get(k) for k in keys}


__all__ = ["REPORT_FILES", "build_report", "check_report_folder"]
