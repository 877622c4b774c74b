"""`replay report`: result folders in, a report folder out (DESIGN section 8).

It reads result folders only (`replay.report.load`), never re-runs a model. The report
folder holds `report.md`, a self-contained `report.html` (figures embedded),
`figures/*.png` and `summary.json` (every number the text quotes, for pipelines). It is
built beside its final place and renamed when complete. Output is deterministic: the
same result folders give the same bytes.

The answer comes first: a Summary of at most ten lines (the workload; how much cache and
which checkpoint scheme, from a plan among the results, else the `replay plan` command
that would answer; the fastest and the most frugal system), each linking to the section
it comes from, then the contents. Per-batch figures are steady state throughout
(`replay.report.analysis.steady_batches`); a figure a short trace cannot support is
replaced by what it would need (`analysis`'s `needs`). Ratios above 100% are written as
multiples (`document.fmt_ratio`), and `check_percentages` refuses a report that still
holds one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from replay._output import atomic_folder, foreign_entry, listed_names, write_json
from replay._schema_stamp import stamp
from replay._units import format_hit_ratio, format_number, plural
from replay._version import __version__
from replay.errors import OutputError
from replay.report.analysis import (
    LADDER,
    MIN_CHECKPOINTS,
    PAPER,
    YOUNG_DALY_BAND,
    analyse,
    fastpersist_per_batch,
)
from replay.report.blocks import bytes_text as _bytes
from replay.report.blocks import images as _images
from replay.report.blocks import ms as _ms
from replay.report.blocks import not_shown as _not_shown
from replay.report.blocks import pct as _pct
from replay.report.blocks import rate_text as _rate
from replay.report.blocks import x as _x
from replay.report.caveats import run_warnings, warning_blocks
from replay.report.cluster import cluster_blocks
from replay.report.compare_table import compare_table
from replay.report.document import (
    Block,
    Bullets,
    Code,
    Heading,
    Link,
    Paragraph,
    Table,
    Text,
    assign_anchors,
    fmt_multiple,
    fmt_saving,
    plain_text,
    to_html,
    to_markdown,
)
from replay.report.figures import FigureOut
from replay.report.figures_all import generic_figures
from replay.report.load import Results, RunData, load_results
from replay.report.plan_section import SECTION as PLAN_SECTION
from replay.report.plan_section import plan_blocks, plan_figures
from replay.report.scenario_figures import scenario_figures
from replay.report.summary import CLAIMS, summary_items, top1pct_says_something
from replay.report.tbe import tbe_blocks

# what --force may replace (`replay._output.Owned`; figures/ as `check_report_folder` says)
REPORT_FILES = {"report.md": None, "report.html": None, "summary.json": None,
                "figures": frozenset({"*.png"})}  # fmt: skip
TITLE = "replay report"


def _workload_blocks(results: Results, figures: list[FigureOut]) -> list[Block]:
    work = results.workload()
    blocks: list[Block] = [Heading("Workload")]
    if work is None:
        if not results.all_runs():
            what = "the plan's section describes its workload" if results.plans else "nothing"
            blocks.append(Paragraph(f"No replayed runs among the results: {what}."))
        else:
            blocks.append(
                Paragraph(
                    "No workload.json in the run folders: their runs did not record the "
                    "trace's statistics (run, compare and sweep write them unless given "
                    "--no-inspect)."
                )
            )
        return blocks
    tables = work.get("tables", [])
    # on a short span of big tables the hottest 1% holds every row touched: no skew figure
    top = (
        f"The hottest 1% of rows take {_pct(work['top1pct_share'])} of the lookups"
        if top1pct_says_something(work)
        else f"Every lookup falls on the {_pct(work['touched_fraction'])} of rows touched, "
        "fewer than the hottest 1% (so the top-1% share says nothing on this span)"
    )
    blocks.append(
        Paragraph(
            f"{work['lookups']:,} lookups in {work['batches']:,} batches over "
            f"{plural(len(tables), 'table')} ({work['rows']:,} rows, "
            f"{_pct(work['touched_fraction'])} of them touched). {top}; a batch's "
            f"distinct rows are "
            f"{_pct(work['distinct_per_batch_mean'])} of its lookups; "
            f"{_pct(work['consecutive_reuse_mean'])} of a batch's distinct "
            f"rows were also in the batch before (TrainingCXL cites about "
            f"{_pct(PAPER['consecutive_reuse'], 0)})."
        )
    )
    blocks += _images(figures, "workload")
    return blocks


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
                        format_hit_ratio(r["hit_ratio"]),
                        _x(r["amplification"]),
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
            (
                "Every time and energy per batch in this report is steady state: the mean "
                "over the second half of a run's batches, as ",
                Code("replay plan"),
                " measures it, after the one-time costs of the first (an initial full "
                "checkpoint, cold caches) that a run of days amortizes. Speedups are against "
                "the first system of each comparison; a checkpoint stall share needs "
                f"≥ {MIN_CHECKPOINTS} checkpoints in the run.",
            )
        ),
    ]
    for compare in results.compares:
        blocks.append(Heading(f"Comparison {compare.path.name}", 3))
        if compare.overrides:
            blocks.append(Paragraph("with --set " + " ".join(compare.overrides)))
        blocks.append(compare_table(compare.runs))
    if results.runs:
        blocks.append(Heading("Runs given alone", 3))
        blocks.append(compare_table(tuple(results.runs)))
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
                f"{fmt_saving(step['time_saved_fraction'])} time). {step['change']}. "
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
                f"{fmt_saving(head['energy_saving'])} energy per batch; the paper reports "
                f"{_x(PAPER['trainingcxl_speedup'])} and "
                f"{_pct(PAPER['trainingcxl_energy_saving'])} less."
            )
        )
    blocks += _images(figures, "ladder")
    return blocks


def _checkpoint_blocks(analysis: dict[str, Any], figures: list[FigureOut]) -> list[Block]:
    blocks: list[Block] = [
        Heading("Checkpoints"),
        Paragraph(
            f"A stall share, a write rate or a reduction from fewer than {MIN_CHECKPOINTS} "
            "checkpoints, or from an intermittent increment that never reached its full "
            "refresh, is no result: such rows say what they would need. For intervals and "
            "goodput over a whole run, see the plan section."
        ),
    ]
    fp = analysis.get("fastpersist")
    if fp:
        blocks += _fastpersist_blocks(fp)
    cnr = analysis.get("check_n_run")
    if cnr:
        shown = [r for r in cnr["runs"] if r["needs"] is None]
        blocks += [
            Heading("Check-N-Run against full checkpoints", 3),
            Paragraph(
                "Reductions against sync-full at the same interval: write bandwidth is bytes "
                "per checkpoint after the initial full one; capacity is the most bytes kept "
                "for a restore (paper: 6–17× and 2.5–8×)."
            ),
        ]
        if shown:
            blocks.append(
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
                        for r in shown
                    ),
                )
            )
        blocks += _not_shown(
            [
                (
                    f"{r['increment']} {'fp32' if not r['quantize_bits'] else r['quantize_bits']}",
                    r["needs"],
                )
                for r in cnr["runs"]
                if r["needs"]
            ]
        )
    cf = analysis.get("checkfreq")
    if cf:
        blocks += [
            Heading("CheckFreq", 3),
            Bullets(
                tuple(
                    f"{r['label']}: measured {_pct(r['overhead'])} stall over {r['count']:,} "
                    f"checkpoints in {r['batches']:,} batches at the rule's interval of "
                    f"{r['rule_interval_batches']:,} batches (paper: within "
                    f"{_pct(PAPER['checkfreq_overhead'])})"
                    if r["needs"] is None
                    else f"{r['label']}: not shown: {r['needs']}"
                    for r in cf["runs"]
                )
            ),
        ]
    blocks += _images(figures, "checkpoints")
    if len(blocks) == 2:
        blocks.append(Paragraph("No checkpointing runs in the results."))
    return blocks


def _fastpersist_blocks(fp: dict[str, Any]) -> list[Block]:
    base = fp.get("baseline") or {}
    blocks: list[Block] = [Heading("FastPersist against torch.save", 3)]
    if fp.get("max_speedup") is not None:
        blocks.append(
            Paragraph(
                f"torch-save writes {_bytes(base.get('bytes_per_checkpoint'))} per checkpoint "
                f"in {_ms(base.get('write_s'))}. The fastest FastPersist configuration "
                f"({fp['best']}) is {_x(fp['max_speedup'])} faster (paper: up to "
                f"{_x(PAPER['fastpersist_speedup'])}, across many nodes). Like with like: "
                + fastpersist_per_batch(fp)
                + f". Free per-batch checkpoints would need "
                f"{_rate(fp['needed_write_bw_bytes_per_s'])} of aggregate writes."
            )
        )
    elif base.get("needs"):
        blocks.append(Paragraph(f"No speedups: the baseline {base['label']} {base['needs']}."))
    shown = [r for r in fp["runs"] if r["needs"] is None]
    if shown:
        blocks.append(
            Table(
                (
                    "run",
                    "writers",
                    "drives",
                    "write time",
                    "write rate",
                    "speedup",
                    "write / forward + backward",
                    "every k batches for < 1% overhead",
                ),
                tuple(
                    (
                        r["label"],
                        str(r["writers"]),
                        str(r["drives"]),
                        _ms(r["write_s"]),
                        _rate(r["write_bw_bytes_per_s"]),
                        _x(r["speedup"]),
                        _pct(r["write_over_compute"]),
                        "n/a"
                        if r["interval_1pct_batches"] is None
                        else f"{r['interval_1pct_batches']:,} ({_ms(r['interval_1pct_s'])})",
                    )
                    for r in shown
                ),
            )
        )
    blocks += _not_shown([(r["label"], r["needs"]) for r in fp["runs"] if r["needs"]])
    return blocks


def _failure_blocks(
    analysis: dict[str, Any], figures: list[FigureOut], plan: bool = False
) -> list[Block]:
    rows = analysis.get("failures") or []
    blocks: list[Block] = [Heading("Failures and goodput")]
    shown = [r for r in rows if r["needs"] is None]
    if rows:
        blocks.append(
            Paragraph(
                "Goodput from the failure simulator at each run's own checkpoint interval. "
                f"A run whose interval lies outside {YOUNG_DALY_BAND[0]:g}–"
                f"{YOUNG_DALY_BAND[1]:g}× its Young/Daly optimum measures its interval, not "
                "the strategy, and is not shown; the plan section gives each strategy's "
                "goodput at its best interval. Lost work is per failure that strikes "
                "training; a failure during a restore loses no work (it restarts the "
                "restore) and is counted apart."
            )
        )
    if shown:
        blocks.append(
            Table(
                (
                    "run",
                    "MTBF",
                    "goodput (mean)",
                    "goodput (p5)",
                    "lost work per training failure",
                    "failures during restores per run",
                    "Young/Daly interval",
                    "interval used",
                ),
                tuple(
                    (
                        r["label"],
                        _ms(r["mtbf_s"]),
                        _pct(r["goodput_mean"]),
                        _pct(r["goodput_p5"]),
                        _ms(r["lost_work_per_training_failure_s"]),
                        format_number(r["failures_during_restore_per_draw_mean"]),
                        _ms(r["young_daly_interval_s"]),
                        _ms(r["interval_s_used"]),
                    )
                    for r in shown[:30]
                ),
            )
        )
    blocks += _not_shown([(r["label"], r["needs"]) for r in rows if r["needs"]])
    blocks += _images(figures, "failures")
    if len(blocks) == 1 and plan:
        blocks.append(
            Paragraph(
                (
                    "The replayed runs have no failure model: a few hundred batches cannot "
                    "hold a failure study at realistic intervals. The plan gives goodput at "
                    "the cluster's MTBF over the whole training run (",
                    Link("Plan: checkpoints", "#plan-checkpoints"),
                    ").",
                )
            )
        )
    elif len(blocks) == 1:
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
            f"{fmt_saving(p['energy_saving'])} energy"
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
            + f": {len(rows)} runs, {len(results.mrcs)} miss-ratio "
            + ("curve." if len(results.mrcs) == 1 else "curves.")
        ),
        Table(("run", "system from", "overrides", "folder"), tuple(rows[:200])),
    ]


def _contents(blocks: list[Block]) -> Bullets:
    """One line per section: a link to it, then links to its sub-sections."""
    items: list[list[str | Link]] = []
    for block in blocks:
        if not isinstance(block, Heading) or block.level == 1 or block.anchor in HEAD_ANCHORS:
            continue
        if block.level == 2:
            items.append([Link(block.text, "#" + block.anchor)])
        elif items and block.level == 3:
            items[-1] += [
                ": " if len(items[-1]) == 1 else ", ",
                Link(block.text, "#" + block.anchor),
            ]
    return Bullets(tuple(tuple(item) for item in items))


HEAD_ANCHORS = ("summary", "contents")


def _claims_blocks(analysis: dict[str, Any]) -> list[Block]:
    return [
        Heading(CLAIMS),
        Paragraph(
            "Each published claim the presets model, beside the figure this model "
            "computes for it on this trace, and the assumptions behind the figure. The "
            "model need not match a number it cannot derive; a figure the replayed span "
            "cannot support says what it would need."
        ),
        Table(
            ("claim", "source", "this model", "assumptions"),
            tuple(
                (c["claim"], c["source"], c["model"], c["assumptions"]) for c in analysis["claims"]
            ),
        ),
    ]


def build_blocks(
    results: Results,
    analysis: dict[str, Any],
    figures: list[FigureOut],
) -> list[Block]:
    work = results.workload()
    trace = (work or {}).get("trace", "")
    runs = results.all_runs()
    meta = runs[0].meta.get("trace", {}) if runs else {}
    what = f"{meta['workload']} trace" if meta.get("workload") else "trace"
    intro = (
        f"Replay of the {what} {trace} ({work['batches']:,} batches, {work['lookups']:,} "
        f"lookups) on {len(runs)} system configurations"
        if work
        else f"{len(runs)} runs (the trace's statistics were not recorded)"
    )
    if results.plans:
        intro += f", and {len(results.plans)} plan{'s' * (len(results.plans) > 1)}"
    body: list[Block] = []
    for index, plan in enumerate(results.plans):
        body += plan_blocks(plan, index, [f for f in figures if f.section == PLAN_SECTION])
    body += warning_blocks(results)
    body += _workload_blocks(results, figures)
    body += _hierarchy_blocks(analysis, figures)
    body += tbe_blocks(results)
    body += cluster_blocks(analysis.get("cluster"), figures)
    body += _time_blocks(results, figures)
    body += _ladder_blocks(analysis, figures)
    body += _checkpoint_blocks(analysis, figures)
    body += _failure_blocks(analysis, figures, plan=bool(results.plans))
    energy = _images(figures, "energy")
    if energy:
        body += [Heading("Energy"), *energy]
    body += _sensitivity_blocks(analysis, figures)
    other = _images(figures, "sweeps")  # the sensitivity studies' sweeps are not drawn
    if other:
        body += [Heading("Other sweeps"), *other]
    body += _claims_blocks(analysis)
    body += _sources_blocks(results)
    head: list[Block] = [
        Heading(TITLE, 1),
        Paragraph(
            intro + ". Every number and figure below was computed by replay from the result "
            "folders listed at the end."
        ),
        Heading("Summary", 2, "summary"),
        Heading("Contents", 2, "contents"),
    ]
    blocks = assign_anchors(head + body)
    anchors: dict[str, str] = {}
    for block in blocks:
        if isinstance(block, Heading):
            anchors.setdefault(block.text, block.anchor)
    items, answers = summary_items(results, analysis, anchors)
    analysis["answers"] = answers  # summary.json's: what each summary line answers
    contents = _contents(blocks)
    return [*blocks[:3], Bullets(tuple(items)), blocks[3], contents, *blocks[4:]]


# a percentage written out: digits (with thousands commas) and a decimal part, then %
_PERCENT = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?%")


def percents_over_100(text: str) -> list[str]:
    """Every percentage above 100% in `text` (`621,167%`), as written."""
    return [m[0] for m in _PERCENT.finditer(text) if float(m[1].replace(",", "")) > 100]


def as_multiples(text: str) -> str:
    """`text` with each percentage above 100% written as a multiple (`77,648%` → `776×`):
    for captions drawn by the figure modules."""

    def one(m: re.Match[str]) -> str:
        value = float(m[1].replace(",", ""))
        return fmt_multiple(value / 100) if value > 100 else m[0]

    return _PERCENT.sub(one, text)


def check_percentages(blocks: list[Block], names: set[str]) -> None:
    """RuntimeError when the report's own text holds a percentage above 100% (`names`,
    the labels and paths from result folders, are left out: they are the user's)."""
    texts: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            texts.append(block.text)
        elif isinstance(block, Paragraph):
            texts.append(plain_text(block.text))
        elif isinstance(block, Bullets):
            texts += [plain_text(item) for item in block.items]
        elif isinstance(block, Table):
            texts += [*block.headers, *(cell for row in block.rows for cell in row)]
        else:
            texts += [block.title, block.caption]
    for text in texts:
        for name in sorted(names, key=len, reverse=True):
            text = text.replace(name, " ")
        found = percents_over_100(text)
        if found:
            raise RuntimeError(f"report text holds a percentage above 100% ({found[0]}): {text}")


def _names(results: Results) -> set[str]:
    names = {str(p) for p in results.sources}
    for run in results.all_runs():
        names |= {run.label, run.system, str(run.path), run.trace}
        names |= {" ".join(run.config.get("overrides", []))}
        names |= {str(v) for v in run.values.values()}
    for plan in results.plans:
        names |= {str(plan.path), plan.path.name}
        names |= {str(t.get("table", "")) for t in plan.document["cache"]["per_table"]}
        names |= {str(s["name"]) for s in plan.document["systems"]}
        names |= set(plan.document.get("notes", []))
    work = results.workload() or {}
    names |= {str(t.get("name", "")) for t in work.get("tables", []) if isinstance(t, dict)}
    return {n for n in names if n}


def check_report_folder(out: Path) -> None:
    """OutputError if `out/figures` holds anything but the figures an earlier report's
    summary.json lists (--force replaces only an earlier report's figures)."""
    figures, listed = out / "figures", listed_names(out / "summary.json", "figures")
    if figures.is_dir() and (stray := foreign_entry(figures, listed)) is not None:
        raise OutputError(
            f"{out}: figures/ holds {stray!r}, not a report figure; choose another --out"
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
        studied = frozenset(
            folder for study in analysis.get("sensitivity") or [] for folder in study["folders"]
        )
        figures = generic_figures(results, fig_dir, skip_sweeps=studied) + scenario_figures(
            analysis, fig_dir
        )
        # captions state ratios as multiples above 100%, as the text does
        figures = [
            FigureOut(f.name, as_multiples(f.title), as_multiples(f.caption), f.section)
            for f in figures
        ]
        for index, plan in enumerate(results.plans):
            figures += plan_figures(plan, index, fig_dir)
        blocks = build_blocks(results, analysis, figures)
        check_percentages(blocks, _names(results))
        (tmp / "report.md").write_text(to_markdown(blocks))
        (tmp / "report.html").write_text(to_html(blocks, fig_dir, title=TITLE))
        summary = {
            "tool": "replay",
            "version": __version__,
            "sources": shown,
            "runs": [
                {
                    "label": r.label,
                    "system": r.system,
                    "folder": _shown_folder(r, paths),
                    "warnings": run_warnings(r),
                }
                for r in results.all_runs()
            ],
            "workload": _workload_summary(results),
            "ladder_systems": list(LADDER),
            "summary": [plain_text(item) for item in _summary_of(blocks)],
            "plans": [_shown_folder_of(plan.path, paths) for plan in results.plans],
            **analysis,
            "figures": [
                {"name": f.name, "title": f.title, "caption": f.caption, "section": f.section}
                for f in figures
            ],
        }
        # what is returned is what summary.json holds, its schema_version included
        summary = stamp("report-summary", summary)
        write_json(tmp / "summary.json", summary)
    return summary


def _summary_of(blocks: list[Block]) -> tuple[Text, ...]:
    for i, block in enumerate(blocks):
        if isinstance(block, Heading) and block.anchor == "summary":
            following = blocks[i + 1]
            return following.items if isinstance(following, Bullets) else ()
    return ()


def _shown_folder(run: RunData, paths: list[Path]) -> str:
    return _shown_folder_of(run.path, paths)


def _shown_folder_of(path: Path, paths: list[Path]) -> str:
    for base in paths:
        try:
            return path.relative_to(base).as_posix() or "."
        except ValueError:
            continue
    return path.name


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
