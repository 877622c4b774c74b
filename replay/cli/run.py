"""`replay run TRACE --system NAME_OR_FILE [--set key=value ...] --out DIR`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.cli._progress import Display, display
from replay.cli.app import app, warn
from replay.cli.source import (
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    CacheBudgetOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    SetsOption,
    SystemOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
    checksums_verified,
    inspect_default,
    one_system,
    resolve_source_verified_later,
    with_cache_budget,
)

if TYPE_CHECKING:
    from replay.workload.source import Source

InspectOption = Annotated[
    bool | None,
    typer.Option(
        "--inspect/--no-inspect",
        help="Also write workload.json, the trace's statistics for `replay report` "
        "(for a TRACE from the replay's own pass, for --workload one more generation "
        "pass; default: on for a TRACE, off for --workload).",
        show_default=False,
    ),
]


@app.command("run", short_help="Replay a trace on one system: hits, traffic, time, energy.")
def run_command(
    trace: TraceArgument = None,
    *,
    system: SystemOption,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Run folder to write.")],
    overrides: SetsOption = None,
    cache_budget: CacheBudgetOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing run folder (or a leftover one).")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Finish a run that was interrupted (same inputs): keeps its finished stages.",
        ),
    ] = False,
    verify: VerifyOption = True,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print summary.json instead of a table.")
    ] = False,
    inspect: InspectOption = None,
    workload: WorkloadOption = None,
    batches: BatchesOption = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
    alpha: AlphaOption = None,
    drift: DriftOption = None,
    reuse: ReuseOption = None,
) -> None:
    """Replay a trace (or a workload generated on the fly) on a system: per-batch hits,
    traffic, time and energy into DIR."""
    name = one_system(system)
    overrides = with_cache_budget(cache_budget, overrides)
    from replay.cli._reserve import reserve_replay_state

    # the policy's table and the statistics' state faulted in while the imports below run
    reserve_replay_state(
        trace, workload, name, list(overrides or []), inspect=inspect, resume=resume
    )
    from replay import _jit

    # numba's runtime (35 ms of LLVM, which releases the GIL) on a helper thread while
    # this thread imports the rest; the first kernel to load waited for it otherwise
    _jit.initialize_runtime_in_background()
    import replay as package
    from replay._faults import kill_point
    from replay.analysis.stats import inspect_trace
    from replay.engine.replay import trace_digest
    from replay.engine.systems import refuse_cluster_checkpoint, resolve_system_with_origin
    from replay.errors import TraceError
    from replay.runs.results import check_output_folder, run_stages
    from replay.workload.source import is_generated

    with display("run") as progress:
        progress.stage("checking the inputs")
        sets = list(overrides or [])
        spec, origin = resolve_system_with_origin(name, sets)
        refuse_cluster_checkpoint(spec, origin)

        def fits(opened: Source) -> None:
            # refused with the figure before a byte is hashed or a row's state allocated
            from replay.runs.run_memory import check_run_memory

            check_run_memory(opened, [spec], inspect=with_stats(opened))

        def with_stats(opened: Source) -> bool:
            return inspect if inspect is not None else not is_generated(opened)

        # the checksums are hashed meanwhile (two threads that release the GIL) and checked
        # before anything is final: the replay starts ~0.05 s sooner on the 2-core VM
        ref, opened, check_checksums = resolve_source_verified_later(
            trace, workload, batches=batches, batch_size=batch_size, seed=seed,
            alpha=alpha, drift=drift, reuse=reuse, verify=verify, check=fits,
        )  # fmt: skip
        from replay.system.optimizer import with_workload_rule

        # the workload's [update] rule names the optimizer (a contradiction: one line)
        spec = with_workload_rule(spec, opened.workload)
        placed = None
        if spec.cluster is not None:  # a bad sharding is refused before anything is written
            from replay.engine.placement import resolve_placement
            from replay.runs.run_memory import check_run_memory

            placed = resolve_placement(spec, opened)
            # each GPU's rows known: replicas and column blocks counted where they are held
            check_run_memory(
                opened, [spec], inspect=with_stats(opened), placements=[placed.placement]
            )
        check_output_folder(out, force=force, resume=resume)
        verified = checksums_verified(ref, verify)
        with_workload = inspect_default(ref, inspect)
        # what fixes the output: a resumed run must present the same plan
        plan = {
            "command": "run",
            "version": package.__version__,
            "trace_sha256": trace_digest(opened),
            "system": spec.to_dict(),
            "origin": origin,
            "overrides": sets,
            "inspect": with_workload,
            "verify": verify,
        }
        if placed is not None:  # a sharding file's plan, as read
            plan["sharding"] = placed.plan.to_json()
        with run_stages(out, plan, force=force, resume=resume) as stages:
            stats: dict[str, Any] | None = None  # the trace's statistics, workload.json
            if not stages.finished and not stages.replayed:
                # the statistics come from the replay's own pass over the trace
                try:
                    result = _replay(
                        opened,
                        spec,
                        inspect=with_workload and not stages.inspected,
                        placed=placed,
                        progress=progress,
                    )
                except TraceError:
                    check_checksums()  # a checksum mismatch explains a corrupt file best
                    raise
                progress.stage("checking the trace's checksums")
                check_checksums()
                progress.stage("writing the run folder")
                stages.write_replay(result, overrides=sets, origin=origin, verified=verified)
                stats = result.workload
            else:
                progress.stage("checking the trace's checksums")
                check_checksums()
            kill_point("run:replayed")
            if not stages.finished and with_workload and not stages.inspected:
                if stats is None:
                    progress.stage("trace statistics", total=opened.num_batches, unit="batches")
                    stats = inspect_trace(opened, on_progress=progress.batches)
                stages.write_workload(stats)
            summary, meta = stages.read("summary.json"), stages.read("meta.json")
    kill_point("run:done")
    if json_output:
        typer.echo(json.dumps(summary, indent=2))
    else:
        from replay.cli._run_text import print_summary

        print_summary(spec.name, summary, meta, out)
    for warning in summary.get("warnings", []):
        warn(warning)


def _replay(opened: Any, spec: Any, *, inspect: bool, placed: Any = None, progress: Display) -> Any:
    from replay._faults import kill_point
    from replay._malloc import release_reserved
    from replay.engine.cluster_run import replay_system

    nb = opened.num_batches
    progress.stage("replaying", total=nb, unit="batches")

    def on_progress(done: int, total: int) -> None:
        kill_point("run:batches")
        progress.batches(done, total)
        if done == total:  # the loop is over; what follows has no count
            progress.stage("finishing the replay")

    try:
        return replay_system(opened, spec, inspect=inspect, on_progress=on_progress, placed=placed)
    finally:
        release_reserved()  # what the replay did not take (`replay.cli._reserve`)
