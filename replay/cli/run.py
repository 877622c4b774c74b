"""`replay run TRACE --system NAME_OR_FILE [--set key=value ...] --out DIR`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.cli._progress import Display, display
from replay.cli.app import app, shown, warn
from replay.cli.source import (
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    SetsOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
    checksums_verified,
    inspect_default,
    resolve_source_verified_later,
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
    system: Annotated[
        str,
        typer.Option("--system", "-s", metavar="SYSTEM", help="System preset name or TOML file."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Run folder to write.")],
    overrides: SetsOption = None,
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
    from replay.cli._reserve import reserve_replay_state

    # the policy's table and the statistics' state faulted in while the imports below run
    reserve_replay_state(
        trace, workload, system, list(overrides or []), inspect=inspect, resume=resume
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
        spec, origin = resolve_system_with_origin(system, sets)
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


# the all-to-all model a cluster run names (`replay.engine.collectives`), in a word
_A2A = {"torchrec": "TorchRec's collectives", "lower-bound": "lower bound"}


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def print_summary(name: str, summary: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
    from replay._units import format_hit_ratio

    pol = summary["policy"]
    t = summary["time"]
    typer.echo(
        f"{shown(name, markup=False)}: {summary['lookups']:,} lookups in "
        f"{summary['batches']:,} batches; "
        f"policy {pol['name']}: hit ratio {format_hit_ratio(pol['hit_ratio'], 'n/a (no cache)')} "
        f"({pol['misses']:,} misses, {pol['evictions']:,} evictions, "
        f"{pol['writebacks']:,} write-backs)"
    )
    fb = pol.get("fbgemm_counters")
    if fb:
        typer.echo(
            f"  FBGEMM TBE cache: {pol['sets']:,} sets x {pol['associativity']} ways (load "
            f"factor {pol['load_factor']:.4g}), {pol['algorithm'].upper()}; per FBGEMM's "
            f"counters: {fb['unique_misses']:,} unique misses of {fb['unique_indices']:,} unique "
            f"indices ({fb['requested_indices']:,} requested, {fb['calls']:,} calls), "
            f"{fb['conflict_unique_misses']:,} conflict unique misses, "
            f"{fb['conflict_misses']:,} conflict misses"
        )
    typer.echo(
        f"  time {summary['time_s']:.4g} s (compute {t['compute_s']:.4g}, embedding exposed "
        f"{t['embedding_exposed_s']:.4g}, checkpoint {t['checkpoint_s']:.4g}, "
        f"other {t['other_s']:.4g}"
        + "".join(
            f", {label} {t[key]:.4g}"
            for key, label in (
                ("all_to_all_s", "all-to-all"),
                ("allreduce_s", "all-reduce"),
                ("patrickstar_comm_s", "PatrickStar's collectives"),
            )
            if key in t
        )
        + f"); energy {_si(summary['energy_j'], 'J')}"
    )
    for name_, tier in summary["tiers"].items():
        if tier["read_bytes"] or tier["write_bytes"]:
            typer.echo(
                f"  tier {shown(name_, markup=False)}: read {_si(tier['read_bytes'], 'B')}, "
                f"write {_si(tier['write_bytes'], 'B')}"
            )
    for name_, link in summary["links"].items():
        if link["h2d_bytes"] or link["d2h_bytes"]:
            typer.echo(
                f"  link {shown(name_, markup=False)}: h2d {_si(link['h2d_bytes'], 'B')}, "
                f"d2h {_si(link['d2h_bytes'], 'B')}"
            )
    ck = summary.get("checkpoint")
    if ck and ck["strategy"] != "none":
        typer.echo(
            f"  checkpoint {ck['strategy']}: {ck['count']:,} written "
            f"({_si(ck['bytes_written'], 'B')}, at most {_si(ck['max_bytes_retained'], 'B')} "
            f"kept), stall {ck['stall_s']:.4g} s = {100 * ck['overhead']:.2f}% overhead"
        )
    fail = summary.get("failures")
    if fail:
        yd = fail["young_daly_interval_s"]
        used = fail["interval_s_used"]
        typer.echo(
            f"  failures: goodput {fail['goodput_mean']:.4f} mean, {fail['goodput_p5']:.4f} p5 "
            f"over {fail['draws']:,} draws; lost work "
            f"{fail['lost_work_per_training_failure_s']:.4g} s per failure of training, "
            f"{fail['failures_during_restore_per_draw_mean']:.4g} failures during restores "
            f"per draw, restore {fail['restore_s_mean']:.4g} s per failure"
            + (f"; Young/Daly interval {yd:.4g} s" if yd is not None else "")
            + (f" (used {used:.4g} s)" if used is not None else "")
        )
    cl = summary.get("cluster")
    ps = summary.get("patrickstar")
    if cl and ps:
        typer.echo(
            f"  PatrickStar on {cl['nodes']} x {cl['gpus_per_node']} GPUs (chunks partitioned, "
            f"data-parallel): {ps['groups_per_batch']:.4g} chunk groups gathered a batch, "
            f"{_si(ps['all_gather_bytes_per_step'], 'B')} all-gathered and "
            f"{_si(ps['reduce_scatter_bytes_per_step'], 'B')} reduce-scattered per GPU a step, "
            f"{ps['comm_s_per_step'] * 1e3:.4g} ms"
            + (
                f"; {ps['vs_data_parallel']:.3g}x the bytes of data parallelism's all-reduce "
                "of the same chunks"
                if ps.get("vs_data_parallel") is not None
                else ""
            )
            + f"; step {cl['step_time_s']:.4g} s"
        )
    elif cl:
        typer.echo(
            f"  cluster {cl['nodes']} x {cl['gpus_per_node']} GPUs, "
            f"{cl['sharding'].get('sharding', '?')}: step {cl['step_time_s']:.4g} s a batch "
            f"(slowest GPU's embedding {cl['rank_embedding_s_max_per_batch']:.4g}, "
            f"all-to-all {cl['all_to_all_s_per_batch']:.4g} for "
            f"{_si(cl['all_to_all_bytes_per_batch'], 'B')} "
            f"({_A2A.get(cl.get('all_to_all_model', ''), 'lower bound')}), all-reduce "
            f"{cl['allreduce_s_per_batch']:.4g}); lookups max/mean per GPU "
            f"{cl['imbalance_mean']:.3f} mean, {cl['imbalance_max']:.3f} max"
        )
    rate = meta["timings"]["lookups_per_s"]
    typer.echo(f"  replayed at {rate / 1e6:.1f} M lookups/s; wrote {shown(out, markup=False)}")
