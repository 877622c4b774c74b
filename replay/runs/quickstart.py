"""`replay quickstart`: one workload, criteo-terabyte, planned for a training run and
replayed for its per-batch comparisons, and a report of both.

One call generates the first batches of `criteo-terabyte` (200 batches of 2,048 samples
by default, about 10.6 M lookups: the workload the plan covers, cut short), runs every
study below in one process pool (so the cores stay busy across studies), writes their
result folders exactly as `replay compare`, `replay sweep`, `replay run` and `replay mrc`
would, plans the whole epoch of the same workload, and builds the report from them. The
short trace supports what a few hundred batches can measure (time, energy, traffic and
checkpoint bytes per batch, in steady state); cache sizes, checkpoint intervals and
goodput over the run come from the plan, which reads the whole epoch.

- `ladder`: TrainingCXL's ladder ssd → pmem-host → pcie-ndp → cxl-d → cxl-b → cxl;
- `fastpersist`: torch-save against FastPersist on 1, 4 and 8 drives, and
  `fastpersist-grid`, a sweep of writers × drives (each writer capped at
  `WRITER_BW_BYTES_PER_S`, an ASSUMPTION stated below);
- `caches`: PatrickStar's `chunk` against the row caches `hbm-lru` and `hbm-belady`, all
  holding an eighth of the rows the trace touches (100,000 by default), with the
  trace's exact LRU miss-ratio curve in `mrc`;
- `check-n-run`: increment modes × bit widths every 20 batches, against `sync-full`
  (the run folder `sync-full`) at the same interval (CheckFreq is planned, not replayed:
  its own rule asks for an interval of hundreds of batches on this workload, longer than
  the short trace, so a replayed run could take no checkpoint);
- `chunk-size`: PatrickStar's chunk size (64 to 4,096 rows) at the same cache size;
- `sens-*`: sensitivity sweeps of the ladder's headline to the assumptions it leans on
  most (the per-copy software cost of host-driven PCIe copies; the persistent memory's
  write-to-read turnaround);
- `plan`: `replay plan` for the training run (one epoch of the same workload on 16
  nodes, the PLAN_* settings below): cache bytes per hit target, each checkpoint
  strategy's interval and goodput over the run, systems per batch.

The result folders go in OUT/results, the report in OUT. Everything is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from replay._schema_stamp import stamp
from replay.runs.compare import (
    COMPARE_COLUMNS,
    COMPARE_FILES,
    SWEEP_FILES,
    RunJob,
    SweepPoint,
    compare_document,
    comparison_rows,
    iter_runs,
    metrics_row,
    parse_grid,
    preflight,
    resolve_sweep,
    resolve_systems,
    sweep_columns,
    sweep_document,
    sweep_rows,
    to_columns,
)
from replay.runs.quickstart_shape import (
    CHECKPOINT_INTERVAL_BATCHES,
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCHES,
    DEFAULT_WORKLOAD,
    MIN_BATCHES,
)
from replay.runs.results import (
    RUN_FOLDER_FILES,
    atomic_folder,
    write_columns,
    write_json,
    write_run,
)

LADDER_SYSTEMS = ("ssd", "pmem-host", "pcie-ndp", "cxl-d", "cxl-b", "cxl")
FASTPERSIST_SYSTEMS = ("torch-save", "fastpersist-1", "fastpersist", "fastpersist-8")
# ASSUMPTION: one FastPersist writer (pinned double buffer, direct I/O) sustains about
# 2 GB/s, more than a Gen4 drive's 1.25 GB/s share, so drives bound small writer counts.
WRITER_BW_BYTES_PER_S = 2e9
# The replayed caches hold about an eighth of the rows the trace touches (100,000 of the
# default trace's 838,060), so placement matters: the presets' 256 MiB budget holds them
# all, and a cache that never evicts is no study (every policy ties, and its run carries
# a warning); the miss-ratio curve shows the whole range. The checkpoint studies use it too.
CACHE_SHARE = 8
DEFAULT_CACHE_ROWS = 100_000


def cache_rows_for(distinct_rows: int) -> int:
    """The replayed caches' rows: the trace's distinct rows / CACHE_SHARE, cut to two
    significant digits (100,000 for the default trace), at least 64."""
    target = max(int(distinct_rows) // CACHE_SHARE, 64)
    scale = 10 ** max(len(str(target)) - 2, 0)
    return max(target // scale * scale, 64)


# The plan (`results/plan`): the answers for the training run the short trace is the start
# of. One epoch of Criteo Terabyte (its 24 days of click logs, 4.37 G samples) at batch
# 2,048.
PLAN_WORKLOAD = DEFAULT_WORKLOAD
PLAN_BATCHES = 2_135_484
PLAN_SYSTEMS = ("hbm-lru", "dram")
# ASSUMPTION: a training step of 50 ms at batch 2,048 (about 41 k samples/s on one node of
# a DLRM of this size), so the epoch is about 30 hours of training
PLAN_STEP_S = 0.05
# ASSUMPTION: 16 nodes, each failing once a month on average (independent exponential
# failures): a cluster MTBF of 45 hours
PLAN_NODES = 16
PLAN_NODE_MTBF_S = 30 * 86400.0
PLAN_BUDGET_BYTES = 8 << 30  # 8 GiB of a GPU's HBM for the embedding cache
PLAN_HIT_TARGETS = (0.9, 0.95)

Kind = Literal["compare", "sweep", "run"]


def owned_entries() -> dict[str, Any]:
    """What an earlier quickstart output holds (`replay._output.Owned`): the report's
    files, and in `results/` each study's folder holding only what its kind writes (a
    comparison's or a sweep's files and run folders, a run folder's files), the
    miss-ratio curve's files and the plan's."""
    from replay.plan.write import OUTPUT_FILES as PLAN_FILES
    from replay.report.build import REPORT_FILES
    from replay.runs.mrc_files import OUTPUT_FILES as MRC_FILES

    tables = {"compare": COMPARE_FILES, "sweep": SWEEP_FILES}
    results: dict[str, Any] = {"mrc": MRC_FILES, "plan": PLAN_FILES}
    for study in studies(Path(".")):
        if study.kind == "run":
            results[study.folder] = RUN_FOLDER_FILES
        else:
            results[study.folder] = {**dict.fromkeys(tables[study.kind]), "*": RUN_FOLDER_FILES}
    return {**REPORT_FILES, "results": results}


def check_quickstart_folder(out: Path) -> None:
    """OutputError unless `out` is missing, empty, or an earlier quickstart output, all
    of it, sub-folders included (`owned_entries`: replacing it never deletes anything a
    person put there); then `out` is claimed (`replay._output.claim_output`)."""
    from replay.report.build import check_report_folder
    from replay.runs.results import check_leftover, check_output_folder

    # it replaces its own earlier output, but not what a killed quickstart left half-made
    check_leftover(out, force=False, force_hint=False)
    check_report_folder(out)  # figures/ holds only what the earlier summary.json lists
    # last: a refused check here leaves no claim, one that passes keeps it for the run
    check_output_folder(out, force=True, owned=owned_entries(), what="quickstart output")


@dataclass
class Study:
    """One result folder of the quickstart: a comparison, a sweep or a single run."""

    folder: str
    kind: Kind
    jobs: list[RunJob]
    document: dict[str, Any] = field(default_factory=dict)
    points: list[SweepPoint] = field(default_factory=list)


def _compare(folder: str, trace: Path, systems: list[str], sets: list[str]) -> Study:
    jobs = resolve_systems(systems, sets)
    return Study(folder, "compare", jobs, compare_document(trace, jobs, systems, sets))


def _sweep(folder: str, trace: Path, system: str, grid: list[str], sets: list[str]) -> Study:
    parsed = parse_grid(grid)
    points = resolve_sweep(system, parsed, sets)
    return Study(
        folder,
        "sweep",
        [p.job for p in points],
        sweep_document(trace, system, parsed, points, sets),
        points,
    )


def _run(folder: str, system: str, sets: list[str]) -> Study:
    return Study(folder, "run", resolve_systems([system], sets))


def studies(trace: Path, cache_rows: int = DEFAULT_CACHE_ROWS) -> list[Study]:
    """Every study of the quickstart, resolved (so a bad preset fails before any run),
    its caches of `cache_rows` rows."""
    every = f"checkpoint.interval_batches={CHECKPOINT_INTERVAL_BATCHES}"
    rows = f"policy.capacity_rows={int(cache_rows)}"
    return [
        _compare("ladder", trace, list(LADDER_SYSTEMS), []),
        _compare("fastpersist", trace, list(FASTPERSIST_SYSTEMS), [rows]),
        _sweep(
            "fastpersist-grid",
            trace,
            "fastpersist",
            ["checkpoint.drives=1,4,8", "checkpoint.writers=1,2,8"],
            # as a user writes it (2GB/s), not 2e+09
            [f"checkpoint.writer_bw_bytes_per_s={WRITER_BW_BYTES_PER_S / 1e9:g}GB/s", rows],
        ),
        _compare("caches", trace, ["hbm-lru", "hbm-belady", "chunk"], [rows]),
        _sweep(
            "check-n-run",
            trace,
            "hbm-lru",
            [
                "checkpoint.increment=consecutive,one-shot,intermittent",
                "checkpoint.quantize_bits=0,2,4,8",
            ],
            ["checkpoint.strategy=check-n-run", every, rows],
        ),
        _run("sync-full", "hbm-lru", ["checkpoint.strategy=sync-full", every, rows]),
        # PatrickStar's trade-off: bigger chunks move more bytes per fill, fewer fills
        _sweep("chunk-size", trace, "chunk", ["policy.chunk_rows=64,256,1024,4096"], [rows]),
        *(
            _sweep(f"sens-copy-{system}", trace, system, [
                "links.pcie.transfer_cost_ns=2500,5000,10000,20000"], [])
            for system in ("pmem-host", "cxl")
        ),
        *(
            _sweep(f"sens-raw-{system}", trace, system, [
                "tiers.pmem.write_to_read_ns=0,315,630,1260"], [])
            for system in ("cxl-b", "cxl")
        ),
    ]  # fmt: skip


def run_quickstart(
    out: Path,
    trace: Path,
    *,
    workers: int,
    force: bool = False,
    on_step: Callable[[str], None] | None = None,
    on_run: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run every study on `trace` into OUT/results and write the report in OUT.

    on_step(message) at each stage; on_run(done, total) as runs finish. Returns the
    report's summary.
    """
    from replay.analysis.mrc import mrc_trace
    from replay.analysis.stats import inspect_trace
    from replay.report.build import build_report
    from replay.trace.reader import open_trace

    step = on_step or (lambda message: None)
    studies(trace)  # a bad preset fails before anything is written
    check_quickstart_folder(out)
    owned = owned_entries()
    with atomic_folder(out, force=force, owned=owned, what="quickstart output") as tmp:
        step("measuring the trace (skew, reuse, rows touched) and its miss-ratio curve")
        workload = inspect_trace(trace)
        # the caches' size follows the trace: never one that holds every row touched
        plan = studies(trace, cache_rows_for(int(workload["distinct_rows"])))
        jobs = [job for study in plan for job in study.jobs]
        preflight(trace, jobs)
        results = tmp / "results"
        results.mkdir()
        curve = mrc_trace(open_trace(trace))
        _write_mrc(results / "mrc", curve, str(trace))
        step(f"replaying {len(jobs)} runs in {len(plan)} studies on {workers} workers")
        where: list[tuple[Study, int]] = [
            (study, i) for study in plan for i in range(len(study.jobs))
        ]
        metrics: dict[int, dict[str, Any]] = {}
        for done, (index, result) in enumerate(iter_runs(trace, jobs, workers=workers), 1):
            study, i = where[index]
            job = study.jobs[i]
            folder = results / study.folder
            if study.kind != "run":
                folder = folder / job.folder
            write_run(
                folder, result, overrides=list(job.overrides), origin=job.origin, workload=workload
            )
            metrics[index] = metrics_row(result)
            if on_run is not None:
                on_run(done, len(jobs))
        first = 0
        for study in plan:
            rows = [metrics[first + i] for i in range(len(study.jobs))]
            first += len(study.jobs)
            folder = results / study.folder
            if study.kind == "compare":
                table = comparison_rows(rows)
                write_columns(folder / "comparison.parquet", to_columns(table, COMPARE_COLUMNS))
                write_json(folder / "compare.json", stamp("compare", study.document))
            elif study.kind == "sweep":
                table = sweep_rows(study.points, rows)
                write_columns(
                    folder / "sweep.parquet", to_columns(table, sweep_columns(study.points))
                )
                write_json(folder / "sweep.json", stamp("sweep", study.document))
        step(
            f"planning {PLAN_WORKLOAD}: {PLAN_BATCHES:,} batches of 2,048 (one epoch), "
            f"{PLAN_NODES} nodes"
        )
        _write_plan(results / "plan")
        step("writing the report")
        # the report is built in its own temporary folder, then its files join OUT's
        staging = tmp / ".report"
        summary = build_report([results], staging, names=[f"{out.name}/results"])
        for entry in staging.iterdir():
            entry.rename(tmp / entry.name)
        staging.rmdir()
    return summary


def plan_request() -> Any:
    """The quickstart's plan (the module's PLAN_* settings)."""
    from replay.plan.plan import PlanRequest
    from replay.workload.presets import get_preset

    spec = get_preset(PLAN_WORKLOAD).with_overrides(batches=PLAN_BATCHES, batch_size=2048)
    return PlanRequest(
        source=spec,
        systems=PLAN_SYSTEMS,
        cache_budget_bytes=PLAN_BUDGET_BYTES,
        hit_targets=PLAN_HIT_TARGETS,
        mtbf_s=PLAN_NODE_MTBF_S / PLAN_NODES,
        nodes=PLAN_NODES,
        node_mtbf_s=PLAN_NODE_MTBF_S,
        time_per_batch_s=PLAN_STEP_S,
    )


def _write_plan(out: Path) -> None:
    from replay.plan.plan import make_plan
    from replay.plan.write import write_plan

    document, curves = make_plan(plan_request())
    write_plan(document, out, force=False, curves=curves)


def _write_mrc(out: Path, curve: Any, trace: str) -> None:
    from replay.runs.mrc_files import write_outputs
    from replay.trace.reader import open_trace

    document = {**curve.to_json(), "trace": trace}
    dim = (open_trace(trace).workload or {}).get("embedding_dim")
    if isinstance(dim, int) and dim > 0:  # as `replay mrc` writes it: sizes in bytes too
        document["row_bytes"] = 4 * dim
        document["cache_bytes"] = [int(c) * 4 * dim for c in curve.sizes.tolist()]
    write_outputs(curve, document, out, force=False)


__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_WORKLOAD",
    "LADDER_SYSTEMS",
    "MIN_BATCHES",
    "WRITER_BW_BYTES_PER_S",
    "check_quickstart_folder",
    "run_quickstart",
    "studies",
]
