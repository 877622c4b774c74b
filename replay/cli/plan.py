"""`replay plan [TRACE | --workload W --batches N] --system S --cache-budget 8GiB
--hit-target 0.9 --cluster-mtbf 6h --out DIR`: answers for a whole training run
(method in `replay.plan.plan`; files in `replay.plan.write`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from replay.cli._progress import display
from replay.cli.app import app, shown
from replay.cli.source import (
    _PANEL,
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    SetsOption,
    TraceArgument,
    WorkloadOption,
    resolve_source,
)
from replay.errors import ConfigError

if TYPE_CHECKING:
    from replay.plan.daly import MtbfTooShort


def hit_target(text: str) -> float:
    """`--hit-target`: a hit ratio strictly between 0 and 1, as a fraction (0.9) or a
    percentage (90%, read as the decimal 0.9 is: 99.9% is 0.999 to the last bit)."""
    from decimal import Decimal, InvalidOperation

    given = text.strip()
    percent = given.endswith("%")
    try:
        value = float(Decimal(given[:-1]) / 100) if percent else float(given)
    except (InvalidOperation, ValueError):
        raise ConfigError(f"--hit-target: {text!r} is no hit ratio (give 0.9 or 90%)") from None
    if not 0 < value < 1:
        hint = f"; did you mean {given}%?" if not percent and 10 <= value < 100 else ""
        raise ConfigError(
            f"--hit-target: {given} must be between 0 and 1 (exclusive), or 0% and 100%{hint}"
        )
    return value


@app.command("plan", short_help="Plan a training run: cache bytes, checkpoints, goodput.")
def plan_command(
    trace: TraceArgument = None,
    *,
    systems: Annotated[
        list[str],
        typer.Option(
            "--system",
            "-s",
            metavar="SYSTEM",
            help="System preset name or TOML file (repeatable; the first is planned for).",
        ),
    ],
    cache_budget: Annotated[
        str,
        typer.Option(
            "--cache-budget",
            metavar="SIZE",
            help="Cache bytes, e.g. 8GiB, 512MiB (per GPU when the first system has a "
            "[cluster]: --set cluster.nodes=N).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Plan folder to write.")],
    hit_targets: Annotated[
        list[str] | None,
        typer.Option(
            "--hit-target",
            metavar="H",
            help="Hit ratio to size a cache for, as 0.9 or 90% (repeatable; default: 0.9).",
        ),
    ] = None,
    cluster_mtbf: Annotated[
        str | None,
        typer.Option(
            "--cluster-mtbf",
            metavar="DURATION",
            help="Mean time between failures of the whole job, e.g. 6h (default: give "
            "--nodes and --node-mtbf).",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            min=1,
            metavar="N",
            help="Nodes of the job, with --node-mtbf (default: give --cluster-mtbf; a "
            "cluster's cluster.nodes).",
        ),
    ] = None,
    node_mtbf: Annotated[
        str | None,
        typer.Option(
            "--node-mtbf",
            metavar="DURATION",
            help="Mean time between failures of one node, e.g. 30d, with --nodes (default: "
            "give --cluster-mtbf); a cluster's nodes fail independently, the job at node "
            "MTBF / nodes.",
        ),
    ] = None,
    sample_rate: Annotated[
        float | None,
        typer.Option(
            "--sample-rate",
            metavar="R",
            help="Spatial sample rate of the rows for the curves (default: 1 up to 30 M "
            "lookups, then the power of two that keeps about that many).",
        ),
    ] = None,
    tolerance: Annotated[
        str | None,
        typer.Option(
            "--tolerance",
            metavar="PCT",
            help="Widest ~95% range a sampled plan's headline byte answers may have about "
            "their answer, e.g. 10%: the sample rate is raised until they fit, or the plan "
            "says what rate and time they would need (default: 25%, checked and said in a "
            "note, the rate left as chosen).",
        ),
    ] = None,
    time_per_batch: Annotated[
        str | None,
        typer.Option(
            "--time-per-batch",
            metavar="DURATION",
            help="Your model's measured step time (default: the first system's steady state).",
        ),
    ] = None,
    workload: WorkloadOption = None,
    batches: BatchesOption = None,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            metavar="DURATION",
            help="Training length as time, e.g. 5d, with --time-per-batch: batches = "
            "duration / time per batch (instead of --batches; default: the workload's "
            "batches).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            min=1,
            metavar="N",
            help="Training length in samples: batches = ceil(N / batch size) (instead of "
            "--batches; default: the workload's batches).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    epochs: Annotated[
        float | None,
        typer.Option(
            "--epochs",
            metavar="E",
            help="Training length in passes over the dataset: batches = ceil(E x dataset "
            "samples / batch size) (instead of --batches; default: the workload's batches).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    dataset_samples: Annotated[
        int | None,
        typer.Option(
            "--dataset-samples",
            min=1,
            metavar="N",
            help="Samples in one epoch, for --epochs (default: the spec's dataset_samples "
            "or the Criteo preset's; see `replay presets --show`).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
    alpha: AlphaOption = None,
    drift: DriftOption = None,
    reuse: ReuseOption = None,
    sets: SetsOption = None,
    draws: Annotated[
        int,
        typer.Option(
            "--draws", min=1, max=100_000, metavar="N", help="Failure draws per strategy."
        ),
    ] = 1000,
    torchrec_bins: Annotated[
        int,
        typer.Option(
            "--torchrec-bins",
            min=1,
            max=1_000_000,
            metavar="N",
            help="Fewest bins of each table's stack-distance histogram in torchrec.json "
            "(more where a table's cache needs them: a bin at most 5% of it, an edge on it).",
        ),
    ] = 100,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing plan folder.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print plan.json.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say how much memory the plan needs (and whether it fits), then stop.",
        ),
    ] = False,
) -> None:
    """Answer for a whole training run: cache bytes per hit target and the budget's split
    across tables, each checkpoint strategy's best interval and goodput at the cluster's
    MTBF, and each system's time and energy per batch."""
    from replay._memory import check_fits
    from replay._output import check_output_folder
    from replay._units import parse_bytes, parse_duration
    from replay.engine.systems import resolve_system
    from replay.plan.checkpoint import MtbfTooShort
    from replay.plan.plan import PlanRequest, make_plan
    from replay.plan.write import OUTPUT_FILES, answers, plan_json, write_plan
    from replay.runs.plan_memory import estimate_lines, plan_estimate, source_for_estimate

    budget = parse_bytes(cache_budget, "--cache-budget")
    if budget <= 0:
        raise ConfigError(f"--cache-budget: {cache_budget!r} must be more than 0 bytes")
    targets = tuple(hit_target(h) for h in hit_targets) if hit_targets else (0.9,)
    if cluster_mtbf is not None and (nodes is not None or node_mtbf is not None):
        raise ConfigError("give --cluster-mtbf, or --nodes with --node-mtbf, not both")
    # a cluster's nodes (`--set cluster.nodes=N`) are --nodes unless given (issue 42)
    first = resolve_system(systems[0], list(sets or ())) if systems else None
    job_nodes = first.cluster.nodes if first is not None and first.cluster is not None else None
    if job_nodes is not None and nodes is not None and nodes != job_nodes:
        raise ConfigError(
            f"--nodes {nodes}: the cluster has {job_nodes} nodes (cluster.nodes); give the "
            "same or leave --nodes out"
        )
    if nodes is None and node_mtbf is not None:
        nodes = job_nodes
    if cluster_mtbf is not None:
        mtbf_s = parse_duration(cluster_mtbf, "--cluster-mtbf")
    elif nodes is not None and node_mtbf is not None:
        mtbf_s = (
            parse_duration(node_mtbf, "--node-mtbf") / nodes
        )  # independent exponential failures
    else:
        raise ConfigError(
            "give --cluster-mtbf DURATION (or --nodes N with --node-mtbf DURATION; a cluster's "
            "--node-mtbf alone)"
        )
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):  # 1e308d is inf seconds
        raise ConfigError(
            f"{_mtbf_given(cluster_mtbf, nodes, node_mtbf)}: the cluster MTBF must be a finite "
            f"number of seconds above 0, got {mtbf_s:g} s"
        )
    step_s = None if time_per_batch is None else parse_duration(time_per_batch, "--time-per-batch")
    if step_s is not None and not (step_s > 0 and math.isfinite(step_s)):
        raise ConfigError(
            f"--time-per-batch {time_per_batch}: must be a finite number of seconds above 0"
        )
    if sample_rate is not None and not 0 < sample_rate <= 1:
        raise ConfigError(f"--sample-rate: {sample_rate:g} must be in (0, 1]")
    from replay.plan.tolerance import DEFAULT_TOLERANCE, parse_tolerance, plan_within

    within = DEFAULT_TOLERANCE if tolerance is None else parse_tolerance(tolerance)
    batches, given = _training_length(
        trace, workload, batches=batches, duration=duration, samples=samples, epochs=epochs,
        dataset_samples=dataset_samples, step_s=step_s, batch_size=batch_size,
    )  # fmt: skip
    if not dry_run:
        check_output_folder(out, force=force, owned=OUTPUT_FILES, what="`replay plan` output")
    # every system before any work: a bad second --system is said now, not after the curves
    # (the first resolved above): each resolved once, and the plan takes them
    resolved = [] if first is None else [first]
    resolved += [resolve_system(name, list(sets or ())) for name in (systems or [])[1:]]
    ref = resolve_source(
        trace, workload, batches=batches, batch_size=batch_size, seed=seed, alpha=alpha,
        drift=drift, reuse=reuse, verify=True,
    )  # fmt: skip
    request = PlanRequest(
        source=Path(ref) if isinstance(ref, str) else ref,
        systems=tuple(systems),
        cache_budget_bytes=budget,
        hit_targets=targets,
        mtbf_s=mtbf_s,
        sample_rate=sample_rate,
        time_per_batch_s=step_s,
        sets=tuple(sets or ()),
        draws=draws,
        torchrec_bins=torchrec_bins,
        given=given,
        # the failure model as given, for the answers' wording (plan.json records it)
        nodes=nodes if cluster_mtbf is None else None,
        node_mtbf_s=(
            None
            if cluster_mtbf is not None or node_mtbf is None
            else parse_duration(node_mtbf, "--node-mtbf")
        ),
    )
    estimate = plan_estimate(request, source_for_estimate(request.source), resolved)
    if dry_run:
        lines = estimate_lines(estimate)
        for line in lines:
            typer.echo(line)
        check_fits(estimate)
        # the last line compares with what is available now, which may be less
        now = "" if " fits in " in lines[-1] else ", though not in what it has available now"
        typer.echo(f"fits this machine's memory{now}; nothing written (--dry-run)")
        return
    check_fits(estimate)
    with display("plan") as progress:
        progress.stage("planning")
        try:
            source = source_for_estimate(request.source)

            def fits(again: PlanRequest) -> bool:
                try:
                    check_fits(plan_estimate(again, source, resolved))
                except ConfigError:
                    return False
                return True

            document, curves = plan_within(
                request, within,
                lambda r: make_plan(r, progress=progress.stage, resolved=resolved),
                fits, may_raise=tolerance is not None,
            )  # fmt: skip
        except MtbfTooShort as exc:  # said with the options given, not "--cluster-mtbf, ..."
            raise ConfigError(_mtbf_too_short(exc, cluster_mtbf, nodes, node_mtbf)) from None
        progress.stage(f"writing {shown(out, markup=False)}")
        write_plan(document, out, force=force, curves=curves)
    if json_output:
        typer.echo(json.dumps(plan_json(document), indent=2))
        return
    for line in answers(dict(document)):
        typer.echo(line)
    for note in document["notes"]:
        typer.echo(f"note: {note}")
    typer.echo(f"wrote {out}/plan.md, plan.json, torchrec.json and figures/")


# the most batches a workload spec holds (`replay.workload.spec`: batches < 2^32)
_MAX_BATCHES = (1 << 32) - 1


def _training_length(
    trace: Path | None,
    workload: str | None,
    *,
    batches: int | None,
    duration: str | None,
    samples: int | None,
    epochs: float | None,
    dataset_samples: int | None,
    step_s: float | None,
    batch_size: int | None,
) -> tuple[int | None, dict[str, float | int] | None]:
    """The batches to plan for, from whichever of --batches, --duration, --samples or
    --epochs was given (at most one), and that choice as plan.json's `horizon.given`;
    (None, None) when none was: the trace's or workload's own batches."""
    from fractions import Fraction

    from replay._units import parse_duration

    lengths = {"--batches": batches, "--duration": duration, "--samples": samples,
               "--epochs": epochs}  # fmt: skip
    named = [name for name, value in lengths.items() if value is not None]
    if len(named) > 1:
        raise ConfigError(
            f"give one training length (--batches, --duration, --samples or --epochs), not "
            f"{' and '.join(named)}"
        )
    if dataset_samples is not None and epochs is None:
        raise ConfigError("--dataset-samples applies only with --epochs")
    if not named or named[0] == "--batches":
        return batches, None if batches is None else {"batches": batches}
    option = named[0]
    if trace is not None or workload is None:
        raise ConfigError(f"{option} applies only with --workload (a trace is fixed)")
    from replay.workload.generator import resolve_workload
    from replay.workload.presets import dataset_samples as known_samples

    spec = resolve_workload(workload).with_overrides(batch_size=batch_size)
    if duration is not None:
        if step_s is None:
            raise ConfigError(
                f"--duration {duration}: give --time-per-batch DURATION, your model's step "
                "time, to turn it into batches"
            )
        seconds = parse_duration(duration, "--duration")
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ConfigError(f"--duration {duration}: must be a finite number of seconds above 0")
        count = Fraction(seconds) / Fraction(step_s)
        given: dict[str, float | int] = {"duration_s": seconds}
    elif samples is not None:
        count = Fraction(samples, spec.batch_size)
        given = {"samples": samples}
    else:
        assert epochs is not None
        if not (epochs > 0 and math.isfinite(epochs)):
            raise ConfigError(f"--epochs: {epochs:g} must be a finite number above 0")
        size = dataset_samples if dataset_samples is not None else known_samples(spec, workload)
        if size is None:
            raise ConfigError(
                f"--epochs: the workload {spec.name!r} does not say its dataset's size; give "
                "--dataset-samples N (or dataset_samples = N in the spec)"
            )
        count = Fraction(str(epochs)) * size / spec.batch_size
        given = {"epochs": epochs}
    # a quotient within a float's rounding of a whole number is that number (5d at 50 ms);
    # never 0: a length above 0, however small (--epochs 1e-30), starts a batch (ceil)
    whole = round(count)
    near = whole >= 1 and abs(count - whole) <= Fraction(1, 10**6)
    planned = whole if near else math.ceil(count)
    if not 1 <= planned <= _MAX_BATCHES:
        raise ConfigError(
            f"{option}: gives {planned:,} batches of {spec.batch_size:,} samples, out of "
            f"range [1, {_MAX_BATCHES:,}]"
        )
    return planned, given


def _mtbf_given(cluster_mtbf: str | None, nodes: int | None, node_mtbf: str | None) -> str:
    """The options that set the cluster MTBF, as the user gave them."""
    if cluster_mtbf is not None:
        return f"--cluster-mtbf {cluster_mtbf}"
    return f"--nodes {nodes} with --node-mtbf {node_mtbf}"


def _mtbf_too_short(
    exc: MtbfTooShort, cluster_mtbf: str | None, nodes: int | None, node_mtbf: str | None
) -> str:
    """`MtbfTooShort` in the options given: what they make, why it does not plan, and
    the same options' values that would."""
    from replay._units import parse_duration
    from replay.plan.daly import duration_at_least

    given = _mtbf_given(cluster_mtbf, nodes, node_mtbf)
    head = f"{given} gives a cluster MTBF of {exc.mtbf_text}, {exc.reason}"
    least = exc.min_mtbf_s
    if least is None:
        return f"{head}; no cluster MTBF up to 1e300 s makes progress{exc.batch_note}"
    if cluster_mtbf is not None:
        return f"{head}; give --cluster-mtbf {duration_at_least(least)} or more{exc.batch_note}"
    assert nodes is not None and node_mtbf is not None
    fewer = math.floor(parse_duration(node_mtbf, "--node-mtbf") / least)
    remedy = f"give --node-mtbf {duration_at_least(least * nodes)} or more"
    if fewer >= 1:
        remedy += f", or --nodes {fewer} or fewer"
    return f"{head}; {remedy}{exc.batch_note}"
