"""`replay fit --tbe-config FILE` and `replay fit --torchrec-configs FILE`: a workload spec
from what the training stack already writes (`replay.workload.tbe_config`,
`replay.workload.from_torchrec`). Options and messages only; the spec is written whole or
not at all (by `replay fit`'s own writer, which `fit_stack` is handed: this module imports
nothing of `replay.cli.fit`, which imports it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from replay.cli.app import shown
from replay.errors import ConfigError

Writer = Callable[[list[tuple[Path, Callable[[Path], object]]]], None]


def _tbe_files(paths: list[Path]) -> list[Path]:
    """The files given; a folder stands for the reporter's files in it, in name order."""
    from replay.workload.tbe_config import REPORT_NAME

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if REPORT_NAME.match(p.name))
            if not found:
                raise ConfigError(
                    f"{path}: a folder with no tbe-*-config-estimation-*.json report in it"
                )
            files.extend(found)
        else:
            files.append(path)
    return files


def fit_stack(
    *,
    trace: Path | None,
    tbe_config: list[Path] | None,
    torchrec_configs: Path | None,
    locality_stats: Path | None,
    out: Path | None,
    json_output: bool,
    force: bool,
    seed: int,
    batch_size: int | None,
    skew: str | None,
    pooling: float | None,
    batches: int | None,
    calibrate: bool,
    verify: bool,
    check_target: Callable[[Path, bool], None],
    write_all: Writer,
) -> None:
    """Dispatch and check the options of the two routes, then run one."""
    if tbe_config and torchrec_configs is not None:
        raise ConfigError("give --tbe-config or --torchrec-configs, not both")
    if locality_stats is not None:
        raise ConfigError("--locality-stats is another route: give it alone")
    if out is None and not json_output:
        raise ConfigError("give --out SPEC.toml (or --json to print the spec's making)")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"--seed: {seed} is out of range [0, 2^63)")
    if batches is not None and not 1 <= batches < 2**32:
        raise ConfigError(f"--batches: {batches} is out of range [1, 2^32)")
    if out is not None:
        check_target(out, force)
    if tbe_config:
        if trace is not None:
            raise ConfigError("--tbe-config reads FBGEMM's reports, not a TRACE: give one")
        for option, value in (("--batch-size", batch_size), ("--skew", skew),
                              ("--pooling", pooling)):  # fmt: skip
            if value is not None:
                raise ConfigError(f"{option} applies only with --torchrec-configs")
        _fit_tbe(_tbe_files(tbe_config), out, json_output, seed, batches, calibrate, write_all)
        return
    if not calibrate:
        raise ConfigError("--no-calibrate applies only with --tbe-config")
    assert torchrec_configs is not None
    _fit_torchrec(torchrec_configs, trace, out, json_output, seed, batch_size, skew, pooling,
                  batches, verify, write_all)  # fmt: skip


def _write(out: Path | None, header: list[str], spec: Any, write_all: Writer) -> None:
    from replay.workload.spec import spec_to_toml

    if out is None:
        return
    text = "".join(f"# {line}\n" for line in header) + spec_to_toml(spec)
    write_all([(out, lambda p: p.write_text(text))])


def _fit_tbe(
    files: list[Path], out: Path | None, json_output: bool, seed: int, batches: int | None,
    calibrate: bool, write_all: Writer,
) -> None:  # fmt: skip
    from replay.cli._progress import display
    from replay.workload.tbe_config import read_tbe_config, spec_from_tbe_configs

    reports = [read_tbe_config(f) for f in files]
    with display("fit") as progress:
        fit = spec_from_tbe_configs(
            reports, batches=batches or 100, seed=seed, calibrate=calibrate,
            progress=progress.stage,
        )  # fmt: skip
    lines = _tbe_lines(fit)
    _write(out, lines, fit.spec, write_all)
    document = fit.to_dict()
    document["spec"] = str(out) if out is not None else None
    _say(out, lines, document if json_output else None)


def _tbe_lines(fit: Any) -> list[str]:
    spec = fit.spec
    lines = [
        f"{spec.source}: {len(spec.tables)} tables, batch {spec.batch_size}, "
        f"{sum(t.pooling for t in spec.tables)} lookups per sample, dim {spec.embedding_dim}",
        "table: rows, pooling stated/written, heavy hitters (count, sum), zipf q s stated -> "
        "spec alpha, rank_offset; FBGEMM's estimator on the spec's batches",
    ]
    for t in fit.tables:
        refit = (
            f"q {t.refit_q:.3g} s {t.refit_s:.3g} ({t.calibrated})"
            if t.refit_q is not None
            else f"not calibrated ({t.calibrated})"
        )
        lines.append(
            f"  {t.name}: {t.rows:,} rows, pooling {t.pooling_stated:g}/{t.pooling}, "
            f"{len(t.heavy_hitters)} heavy hitters ({sum(t.heavy_hitters):.4f}), "
            f"q {t.q:g} s {t.s:g} -> alpha {t.alpha:g} rank_offset {t.rank_offset:g}; {refit}"
        )
    lines.extend(f"note: {n}" for n in fit.notes)
    return lines


def _fit_torchrec(
    path: Path, trace: Path | None, out: Path | None, json_output: bool, seed: int,
    batch_size: int | None, skew: str | None, pooling: float | None, batches: int | None,
    verify: bool, write_all: Writer,
) -> None:  # fmt: skip
    from replay.workload.from_torchrec import read_torchrec_configs, spec_from_torchrec

    tables, per_feature = read_torchrec_configs(path)
    source: Any = skew if skew is not None else "criteo-kaggle"
    if trace is not None:
        if skew is not None:
            raise ConfigError("give a TRACE (its fit is the skew) or --skew, not both")
        from replay.cli._progress import display
        from replay.trace.reader import open_trace
        from replay.workload.fit import fit_trace

        with display("fit") as progress:
            opened = open_trace(trace)
            if verify:
                progress.stage("verifying checksums")
                opened.verify()
            progress.stage("fitting each table of the trace")
            source = fit_trace(opened, seed=seed)
        batch_size = batch_size or source.spec.batch_size
    if batch_size is None:
        raise ConfigError("give --batch-size N (samples per batch), or a TRACE to take it from")
    if not 1 <= batch_size <= 1 << 26:
        raise ConfigError(f"--batch-size: {batch_size} is out of range [1, 2^26]")
    given: Any = pooling if pooling is not None else (per_feature or None)
    spec, notes = spec_from_torchrec(
        tables, batch_size=batch_size, pooling=given, skew=source, batches=batches, seed=seed,
        name=f"torchrec-{path.stem}",
    )  # fmt: skip
    features = sum(len(t.features) for t in spec.tables)
    lines = [
        f"{spec.source}: {len(spec.tables)} tables, {features} features, {spec.total_rows:,} "
        f"rows, dim {spec.embedding_dim}, batch {spec.batch_size}, "
        f"{sum(t.pooling for t in spec.tables)} lookups per sample",
        *(f"note: {n}" for n in notes),
    ]
    _write(out, lines, spec, write_all)
    document = {"spec": str(out) if out is not None else None, "notes": notes,
                "workload": spec.to_dict()}  # fmt: skip
    _say(out, lines, document if json_output else None)


def _say(out: Path | None, lines: list[str], document: dict[str, Any] | None) -> None:
    """What a fit prints: its JSON `document` when asked for, else its lines and where
    the spec went."""
    if document is not None:
        typer.echo(json.dumps(document, indent=2))
        return
    for line in lines:
        typer.echo(shown(line, markup=False))
    if out is not None:
        typer.echo(f"spec written to {shown(out, markup=False)}")
