"""`replay fit TRACE --out SPEC.toml`: a workload spec fitted to a trace (method in
`replay.workload.fit`), so `replay generate --spec SPEC.toml` makes synthetic traces that look like
it at any length.

The spec (with the fit's diagnostics as comments) and the `--check` figure are written
under temporary names beside their targets and renamed only when both are complete: a
command that fails leaves neither (nor the folders it made for them).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay._files import file_kind
from replay.cli.app import app, shown
from replay.cli.source import VerifyOption
from replay.errors import ConfigError, OutputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import Console

    from replay.workload.fit import FitResult


_LOCALITY = "Locality statistics (instead of TRACE)"
_STACK = "The training stack's own files (docs/from_training_stack.md)"


@app.command("fit", short_help="Fit a workload spec (skew, hot value, reuse, drift) to a trace.")
def fit_command(
    trace: Annotated[
        Path | None,
        typer.Argument(
            metavar="[TRACE]",
            help="Trace folder (e.g. from `replay ingest`), or give --locality-stats.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Where to write the fitted spec, TOML (default: print only).",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the fit (and the check) as one JSON object.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Generate a synthetic trace of the sample's shape from the fit and compare "
            "their statistics side by side (and draw both rows-touched curves).",
        ),
    ] = False,
    figure: Annotated[
        Path | None,
        typer.Option(
            "--figure",
            metavar="FILE",
            help="PNG of the --check curves (default: SPEC.check.png beside --out).",
        ),
    ] = None,
    rows: Annotated[
        str,
        typer.Option(
            "--rows",
            metavar="auto|declared|observed|extrapolate",
            help="Table rows: declared (the trace's), observed (rows touched), "
            "extrapolate (fitted with the others by the rows touched, at least the Chao1 "
            "estimate of the distinct values) or auto: per table the declared rows where "
            "they converge, else the fitted ones (the spec says which).",
        ),
    ] = "auto",
    max_lookups: Annotated[
        int,
        typer.Option(
            "--max-lookups",
            metavar="N",
            help="Fit on a prefix of whole batches with at most this many lookups.",
        ),
    ] = 1 << 24,
    seed: Annotated[
        int, typer.Option(metavar="N", help="Seed of the fitted spec (and the check).")
    ] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing spec file or figure.")
    ] = False,
    verify: VerifyOption = True,
    locality_stats: Annotated[
        Path | None,
        typer.Option(
            "--locality-stats",
            metavar="FILE",
            help="Fit to a locality statistics file in the format of Meta's "
            "dlrm_datasets locality_stats.txt instead of a trace (docs/locality_fit.md; "
            "default: none, fit the trace).",
            rich_help_panel=_LOCALITY,
        ),
    ] = None,
    record: Annotated[
        str | None,
        typer.Option(
            metavar="RECORD",
            help="Which record of the file: its index (0 the first) or its name "
            "(default: the first).",
            rich_help_panel=_LOCALITY,
        ),
    ] = None,
    tables: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Number of tables (default: from a record name like fbgemm_t856_..., else "
            "required).",
            rich_help_panel=_LOCALITY,
        ),
    ] = None,
    groups: Annotated[
        int,
        typer.Option(
            metavar="G",
            help="At most this many groups of alike tables (the fewest that fit are kept).",
            rich_help_panel=_LOCALITY,
        ),
    ] = 8,
    max_rows: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Rows per table at most (the statistics see only the rows a batch draws; "
            "beyond some size a power-law table's batch statistics no longer change).",
            rich_help_panel=_LOCALITY,
        ),
    ] = 100_000_000,
    drift: Annotated[
        float,
        typer.Option(
            metavar="X",
            help="Drift of every table (the statistics are of single batches and cannot "
            "give it; drift leaves each batch's statistics unchanged).",
            rich_help_panel=_LOCALITY,
        ),
    ] = 0.0,
    tbe_config: Annotated[
        list[Path] | None,
        typer.Option(
            "--tbe-config",
            metavar="FILE",
            help="FBGEMM TBE configs (TBEDataConfig JSON, as FBGEMM_TBE_REPORT_INPUT_PARAMS "
            "writes them; repeat for several, or a folder of them) instead of a TRACE: a spec "
            "with their tables, heavy hitters, Zipf fit and pooling (default: none).",
            rich_help_panel=_STACK,
        ),
    ] = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="With --tbe-config: fit each table's tail so FBGEMM's estimator reads the "
            "spec's batches as the stated (q, s) (else FBGEMM's generator's law as stated).",
            rich_help_panel=_STACK,
        ),
    ] = True,
    torchrec_configs: Annotated[
        Path | None,
        typer.Option(
            "--torchrec-configs",
            metavar="FILE",
            help="A JSON list of TorchRec EmbeddingBagConfig-like tables (name, "
            "num_embeddings, embedding_dim, feature_names): a spec with the model's tables "
            "and features, the skew from TRACE's fit or from --skew (default: none).",
            rich_help_panel=_STACK,
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="With --torchrec-configs: samples per batch (default: TRACE's).",
            rich_help_panel=_STACK,
        ),
    ] = None,
    skew: Annotated[
        str | None,
        typer.Option(
            metavar="PRESET_OR_SPEC",
            help="With --torchrec-configs and no TRACE: the preset or spec file whose tables "
            "lend their skew, by name, else its typical table's (default: criteo-kaggle).",
            rich_help_panel=_STACK,
        ),
    ] = None,
    pooling: Annotated[
        float | None,
        typer.Option(
            metavar="L",
            help="With --torchrec-configs: lookups per sample of every feature (default: "
            "the file's pooling factors, else the skew's table, else 1).",
            rich_help_panel=_STACK,
        ),
    ] = None,
    batches: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="With --tbe-config or --torchrec-configs: the spec's batches (default: 100, "
            "or the skew's).",
            rich_help_panel=_STACK,
        ),
    ] = None,
) -> None:
    """Fit per-table hot values, power-law exponents (with confidence intervals), reuse
    and drift to a trace, and write them as a workload spec; or, with --locality-stats,
    fit table groups to per-batch locality statistics; or, with --tbe-config or
    --torchrec-configs, write a spec from the training stack's own files."""
    if tbe_config or torchrec_configs is not None:
        from replay.cli._fit_stack import fit_stack

        fit_stack(
            trace=trace, tbe_config=tbe_config, torchrec_configs=torchrec_configs,
            locality_stats=locality_stats, out=out, json_output=json_output, force=force,
            seed=seed, batch_size=batch_size, skew=skew, pooling=pooling, batches=batches,
            calibrate=calibrate, verify=verify, check_target=_check_target, write_all=_write_all,
        )  # fmt: skip
        return
    for option, value in (("--batch-size", batch_size), ("--skew", skew), ("--pooling", pooling),
                          ("--batches", batches)):  # fmt: skip
        if value is not None:
            raise ConfigError(f"{option} applies only with --tbe-config or --torchrec-configs")
    if not calibrate:
        raise ConfigError("--no-calibrate applies only with --tbe-config")
    if locality_stats is not None:
        if trace is not None:
            raise ConfigError("give a TRACE or --locality-stats, not both")
        _fit_locality(locality_stats, out, json_output, force, record, tables, groups, seed,
                      drift, max_rows)  # fmt: skip
        return
    if trace is None:
        raise ConfigError("give a TRACE folder or --locality-stats FILE")
    from replay import __version__
    from replay.report.figures import save
    from replay.trace.reader import open_trace
    from replay.workload.fit import ROWS_MODES, fit_trace
    from replay.workload.fit_check import check_fit
    from replay.workload.fit_toml import spec_with_diagnostics

    if out is None and not json_output:
        raise ConfigError("give --out SPEC.toml (or --json to print the fit)")
    if rows not in ROWS_MODES:
        raise ConfigError(f"--rows: {rows!r} is not one of {', '.join(ROWS_MODES)}")
    if max_lookups < 1:
        raise ConfigError(f"--max-lookups: {max_lookups} must be at least 1")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"--seed: {seed} is out of range [0, 2^63)")
    if figure is not None and not check:
        raise ConfigError("--figure applies only with --check")
    if check and figure is None and out is not None:
        figure = out.with_name(out.stem + ".check.png")
    targets = [p for p in (out, figure) if p is not None]
    for target in targets:
        _check_target(target, force)
    from replay.cli._progress import display

    with display("fit") as progress:
        opened = open_trace(trace)
        if verify:
            progress.stage("verifying checksums")
            opened.verify()
        progress.stage("sampling the trace and fitting each table")
        result = fit_trace(opened, rows_mode=rows, max_lookups=max_lookups, seed=seed)
        if check:
            progress.stage("checking the fit against a synthetic trace")
        checked = check_fit(opened, result) if check else None
    writes: list[tuple[Path, Callable[[Path], object]]] = []
    if figure is not None and checked is not None:
        drawn = _figure(checked, str(trace))
        writes.append((figure, lambda p: save(drawn, p)))
    if out is not None:
        text = spec_with_diagnostics(result, __version__)
        writes.append((out, lambda p: p.write_text(text)))
    _write_all(writes)
    if json_output:
        document: dict[str, Any] = result.to_dict()
        document["checksums_verified"] = verify
        document["spec"] = str(out) if out is not None else None
        if checked is not None:
            document["check"] = checked
            document["figure"] = str(figure) if figure is not None else None
        typer.echo(json.dumps(document, indent=2))
        return
    print_fit(result)
    if checked is not None:
        print_check(checked)
    if out is not None:
        typer.echo(f"spec written to {shown(out, markup=False)}")
    if figure is not None:
        typer.echo(f"figure written to {shown(figure, markup=False)}")


def _fit_locality(
    path: Path,
    out: Path | None,
    json_output: bool,
    force: bool,
    record: str | None,
    tables: int | None,
    groups: int,
    seed: int,
    drift: float,
    max_rows: int = 100_000_000,
) -> None:
    """`replay fit --locality-stats FILE` (`replay.workload.fit_locality`)."""
    from replay.workload.fit_locality import fit_locality
    from replay.workload.locality_stats import read_locality_stats, select_record
    from replay.workload.spec import spec_to_toml

    if out is None and not json_output:
        raise ConfigError("give --out SPEC.toml (or --json to print the fit)")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"--seed: {seed} is out of range [0, 2^63)")
    if not 0.0 <= drift <= 1.0:
        raise ConfigError(f"--drift: {drift} is out of range [0, 1]")
    if not 1 <= max_rows <= 2**53:
        raise ConfigError(f"--max-rows: {max_rows} is out of range [1, 2^53]")
    if out is not None:
        _check_target(out, force)
    chosen = select_record(read_locality_stats(path), record)
    count = tables if tables is not None else chosen.tables_in_name
    if count is None:
        raise ConfigError(
            f"{path}: record {chosen.name!r} does not say its tables (no _tN_ in its name); "
            "give --tables N"
        )
    source = (
        f"fitted by `replay fit --locality-stats {path.name} --record {chosen.name}` to the "
        f"locality statistics of {chosen.name} (facebookresearch/dlrm_datasets "
        "embedding_bag/2021/locality_stats.txt, MIT licence): table groups, see "
        "docs/locality_fit.md"
    )
    from replay.cli._progress import display

    with display("fit") as progress:
        progress.stage(f"fitting table groups to {chosen.name}")
        fit = fit_locality(
            chosen.stats, tables=count, batch_size=chosen.batch_size, max_groups=groups,
            seed=seed, name=f"fit-{Path(chosen.name).stem}", source=source, drift=drift,
            max_rows=max_rows,
        )  # fmt: skip
    if out is not None:
        header = "".join(f"# {line}\n" for line in _locality_summary(fit, chosen.name))
        text = header + spec_to_toml(fit.spec)
        _write_all([(out, lambda p: p.write_text(text))])
    if json_output:
        document = fit.to_json()
        document["record"] = chosen.name
        document["spec"] = str(out) if out is not None else None
        typer.echo(json.dumps(document, indent=2))
        return
    for line in _locality_summary(fit, chosen.name):
        typer.echo(line)
    if out is not None:
        typer.echo(f"spec written to {shown(out, markup=False)}")


def _locality_summary(fit: Any, name: str) -> list[str]:
    t, e = fit.target, fit.expected
    lines = [
        f"record {name}: {t.lookups:,.0f} lookups, {t.distinct:,.0f} distinct rows per batch",
        f"fit: {len(fit.spec.tables)} tables in {len(fit.groups)} groups; expected "
        f"{e.lookups:,.0f} lookups, {e.distinct:,.0f} distinct ({100 * fit.distinct_gap:+.2f}%);"
        f" largest share gap {fit.max_share_gap:.4f}",
    ]
    for g in fit.groups:
        lines.append(
            f"  group: {g.tables} tables, {g.pooling_total} lookups per sample, "
            f"alpha {g.alpha}, rank offset {g.rank_offset}, {g.rows:,} rows per table"
        )
    lines.append("bin: rows share target/fit, lookups share target/fit")
    from replay.workload.locality_model import BIN_EDGES

    edges = list(BIN_EDGES)
    for j, edge in enumerate(edges):
        label = f"({edge}, {edges[j + 1]}]" if j + 1 < len(edges) else f"({edge}+"
        lines.append(
            f"  {label:>16} {t.rows_share[j]:.3f} {e.rows_share[j]:.3f}   "
            f"{t.lookups_share[j]:.3f} {e.lookups_share[j]:.3f}"
        )
    return lines


def _check_target(path: Path, force: bool) -> None:
    if path.is_dir():
        raise OutputError(f"{path}: is a folder, not a file")
    try:
        mode = path.lstat().st_mode
    except OSError:  # nothing there (or unreachable: the checks below say so)
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        # --force replaces by renaming over the path: never over a device (`--out
        # /dev/null` as root would replace the device node) nor a FIFO or a socket
        raise OutputError(f"{path}: is {file_kind(mode)}, not a regular file to replace")
    if path.exists() and not force:
        raise OutputError(f"{path}: already exists (use --force to replace it)")
    probe = path.parent
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{path}: cannot write there ({probe} is a file, not a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write there (permission denied)")


def _write_all(writes: list[tuple[Path, Callable[[Path], object]]]) -> None:
    """Write every file under a temporary name beside it, then rename them all: a command
    that fails part-way (the figure's folder is read-only, the disk is full) leaves
    neither file, nor the temporary names, nor the folders it made for them."""
    made: list[Path] = []  # folders this call created, outermost first
    tmps: list[Path] = []
    try:
        for path, write in writes:
            made.extend(_make_parents(path.parent))
            tmp = path.with_name(f".{path.name}.tmp")
            if tmp.is_symlink() or (tmp.exists() and not tmp.is_dir()):
                tmp.unlink()  # a leftover, or a FIFO that writing would open and wait on
            tmps.append(tmp)
            write(tmp)
        for (path, _), tmp in zip(writes, tmps, strict=True):
            tmp.replace(path)
    except BaseException as exc:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):
            where = exc.filename or (tmps[-1] if tmps else "")
            raise OutputError(f"{where}: cannot write ({exc.strerror or exc})") from None
        raise


def _make_parents(folder: Path) -> list[Path]:
    missing: list[Path] = []
    while not (folder.exists() or folder.is_symlink()):
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir()
    return list(reversed(missing))


def _figure(checked: dict[str, Any], trace: str) -> Figure:
    """Rows touched against batches, sample and synthetic, overall and per table."""
    from replay.report.figures import new_figure

    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    for i, entry in enumerate(checked["tables"]):
        curve = entry["curve"]
        ax.plot(curve["batches"], curve["sample"], color="0.75", lw=0.8)
        ax.plot(curve["batches"], curve["synthetic"], color="#9ecae1", lw=0.8, ls="--")
        if i == 0:
            ax.lines[-2].set_label("sample, per table")
            ax.lines[-1].set_label("synthetic, per table")
    overall = checked["overall"]["curve"]
    ax.plot(overall["batches"], overall["sample"], color="black", lw=2, label="sample, all")
    ax.plot(
        overall["batches"], overall["synthetic"], color="#08519c", lw=2, ls="--",
        label="synthetic (fitted spec), all",
    )  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batches")
    ax.set_ylabel("rows touched")
    ax.set_title(f"rows touched: {Path(trace).name} against its fitted spec", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def _console() -> Console:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140)


def print_fit(result: FitResult, console: Console | None = None) -> None:
    from rich.table import Table

    console = console or _console()
    table = Table(
        title=f"fit of {shown(result.trace)}: {result.batches:,} batches, "
        f"{result.lookups:,} lookups",
        title_justify="left",
    )
    columns = ("table", "rows", "lookups", "hot shares", "alpha", "95% CI", "plain MLE", "reuse")
    for name in (*columns, "drift"):
        table.add_column(name, justify="left" if name == "table" else "right")
    table.add_column("note")
    for t in result.tables:
        table.add_row(
            shown(t.name),
            f"{t.rows:,}",
            f"{t.lookups:,}",
            # the exact shares of the hot ranks 1..j (the observed shares of the top rows)
            " ".join(f"{h:.3f}" for h in t.hot_shares) or "-",
            "-" if t.alpha is None else f"{t.alpha:.3f}",
            "-" if t.alpha_ci is None else f"{t.alpha_ci[0]:.3f}-{t.alpha_ci[1]:.3f}",
            "-" if t.alpha_mle is None else f"{t.alpha_mle:.3f}",
            f"{t.reuse:.3f}",
            f"{t.drift:.3g}",
            "" if t.alpha_note == "fitted" else shown(t.alpha_note),
        )
    console.print(table)
    console.print(f"overall: reuse {result.reuse:.3f}, drift {result.drift:.3g}")
    fitted = [t.name for t in result.tables if t.rows_source.startswith("auto: extrapolated")]
    if fitted:  # --rows auto: where the declared rows missed, the fitted ones
        console.print(
            f"rows: fitted (--rows extrapolate; the declared rows missed) for "
            f"{shown(', '.join(fitted))}; declared for the others"
        )
    for note in result.notes:
        console.print(f"note: {shown(note)}")


_CHECK_COLUMNS = (
    ("distinct_per_batch", "distinct/batch", "{:.3f}"),
    ("consecutive_reuse", "reuse n-1", "{:.3f}"),
    ("top1pct_share", "top 1% share", "{:.3f}"),
    ("touched_rows", "rows touched", "{:,}"),
)


def _cell(stat: dict[str, Any], fmt: str) -> str:
    rel, noise = stat["rel_diff"], stat["noise"]
    diff = "n/a" if rel is None else f"{100 * rel:+.1f}%"
    spread = "" if noise is None else f" ±{100 * noise:.1f}%"
    return f"{fmt.format(stat['sample'])} / {fmt.format(stat['synthetic'])}\n{diff}{spread}"


def print_check(checked: dict[str, Any], console: Console | None = None) -> None:
    from rich.table import Table

    from replay.workload.fit_check import CHECK_TRACES

    console = console or _console()
    table = Table(
        title="check: sample / synthetic, then the relative difference ± the noise (the "
        f"spread over {CHECK_TRACES} synthetic traces), seed {checked['synthetic']['seed']}",
        title_justify="left",
    )
    table.add_column("table")
    for _, label, _ in _CHECK_COLUMNS:
        table.add_column(label, justify="right")
    table.add_column("curve max |diff|", justify="right")
    entries = [*checked["tables"], checked["overall"]]
    for i, entry in enumerate(entries):
        worst = entry["curve"]["max_abs_rel_diff"]
        table.add_row(
            shown(entry["name"]) if i < len(entries) - 1 else "[b]overall[/b]",
            *(_cell(entry["stats"][key], fmt) for key, _, fmt in _CHECK_COLUMNS),
            "n/a" if worst is None else f"{100 * worst:.1f}%",
            end_section=i == len(entries) - 2,
        )
    console.print(table)
