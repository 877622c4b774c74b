"""Reading result folders for `replay report`: runs, comparisons, sweeps and miss-ratio
curves, recognised by the files they hold (never by their names).

- a run folder (`replay run`): `config.json`, `summary.json`, `meta.json`,
  `batches.parquet`, and `checkpoints.parquet`, `workload.json` when present; its
  summary's digests must match its config.json and meta.json's trace digest;
- a comparison (`replay compare`): `compare.json`, `comparison.parquet` and a run folder
  per system;
- a sweep (`replay sweep`): `sweep.json`, `sweep.parquet` and a run folder per point;
- a miss-ratio curve (`replay mrc --out`): `mrc.parquet` (and `mrc.json`);
- any other folder: each of its sub-folders that is one of the above, in name order (so
  `replay report reports/quickstart/results` takes everything `quickstart` wrote).

A folder that is none of these, or one missing a file its kind needs, is a `ReportError`
naming the folder and the file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from replay.errors import ReplayError

RUN_FILES = ("config.json", "summary.json", "meta.json", "batches.parquet")


class ReportError(ReplayError):
    """A result folder given to `replay report` is missing, incomplete or unreadable."""


@dataclass(frozen=True)
class RunData:
    """One run folder."""

    path: Path
    label: str  # the system name, or "<system> key=value ..." for a sweep point
    config: dict[str, Any]
    summary: dict[str, Any]
    batches: pl.DataFrame
    checkpoints: pl.DataFrame
    meta: dict[str, Any]
    workload: dict[str, Any] | None  # `replay inspect --json` of the trace, when written
    values: dict[str, Any] = field(default_factory=dict)  # a sweep point's grid values

    @property
    def system(self) -> str:
        return str(self.summary.get("system", self.config["system"]["name"]))

    @property
    def spec(self) -> dict[str, Any]:
        """The resolved system spec (config.json's `system`)."""
        return self.config["system"]

    @property
    def trace(self) -> str:
        return str(self.meta.get("trace", {}).get("path", "")) if self.meta else ""

    @property
    def strategy(self) -> str:
        return str((self.summary.get("checkpoint") or {}).get("strategy", "none"))


@dataclass(frozen=True)
class CompareData:
    path: Path
    document: dict[str, Any]  # compare.json
    table: pl.DataFrame  # comparison.parquet
    runs: tuple[RunData, ...]  # in the order of the table

    @property
    def overrides(self) -> tuple[str, ...]:
        return tuple(self.document.get("overrides", ()))


@dataclass(frozen=True)
class SweepData:
    path: Path
    document: dict[str, Any]  # sweep.json
    table: pl.DataFrame  # sweep.parquet
    runs: tuple[RunData, ...]  # in point order

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.document.get("grid", {}))


@dataclass(frozen=True)
class MrcData:
    path: Path
    curve: pl.DataFrame  # cache_rows, miss_ratio
    document: dict[str, Any]  # mrc.json ({} when absent)


@dataclass
class Results:
    """Everything given to one report."""

    runs: list[RunData] = field(default_factory=list)  # run folders given on their own
    compares: list[CompareData] = field(default_factory=list)
    sweeps: list[SweepData] = field(default_factory=list)
    mrcs: list[MrcData] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)

    def all_runs(self) -> list[RunData]:
        """Every run: those given alone, then each comparison's, then each sweep's."""
        runs = list(self.runs)
        for group in (*self.compares, *self.sweeps):
            runs.extend(group.runs)
        return runs

    def workload(self) -> dict[str, Any] | None:
        """The first run's trace statistics (every run of one report should share a trace)."""
        for run in self.all_runs():
            if run.workload is not None:
                return run.workload
        return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return value


def _read_parquet(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise ReportError(f"{path}: missing")
    try:
        return pl.read_parquet(path)
    except Exception as exc:  # polars raises several kinds for a corrupt file
        raise ReportError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None


def is_run(path: Path) -> bool:
    """A run folder, complete or not (`load_run` names a missing file)."""
    return (path / "summary.json").is_file() or (path / "config.json").is_file()


def load_run(path: Path, *, label: str = "", values: dict[str, Any] | None = None) -> RunData:
    for name in RUN_FILES:
        if not (path / name).is_file():
            raise ReportError(f"{path}: not a complete run folder ({name} is missing)")
    config = _read_json(path / "config.json")
    summary = _read_json(path / "summary.json")
    if not isinstance(config.get("system"), dict) or "name" not in config["system"]:
        raise ReportError(f"{path / 'config.json'}: no system spec in it")
    for key in ("lookups", "batches", "time_s", "energy_j", "time", "policy"):
        if key not in summary:
            raise ReportError(f"{path / 'summary.json'}: no {key!r} in it")
    meta = _read_json(path / "meta.json")
    _check_digests(path, config, summary, meta)
    checkpoints = (
        _read_parquet(path / "checkpoints.parquet")
        if (path / "checkpoints.parquet").is_file()
        else pl.DataFrame()
    )
    workload = _read_json(path / "workload.json") if (path / "workload.json").is_file() else None
    return RunData(
        path=path,
        label=label or str(summary.get("system", config["system"]["name"])),
        config=config,
        summary=summary,
        batches=_read_parquet(path / "batches.parquet"),
        checkpoints=checkpoints,
        meta=meta,
        workload=workload,
        values=dict(values or {}),
    )


def _check_digests(
    path: Path, config: dict[str, Any], summary: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Refuse a run folder whose files no longer belong together: summary.json holds the
    digest of its config.json and of the trace it replayed (meta.json's)."""
    from replay.results import canonical_sha256, trace_sha256

    digests = summary.get("digests")
    if not isinstance(digests, dict):
        raise ReportError(
            f"{path / 'summary.json'}: no digests of its config and trace "
            "(written by an older replay?); run it again"
        )
    if canonical_sha256(config) != digests.get("config_sha256"):
        raise ReportError(
            f"{path / 'config.json'}: its digest does not match summary.json's "
            "config_sha256 (edited, or copied from another run)"
        )
    if trace_sha256(meta) != digests.get("trace_sha256"):
        raise ReportError(
            f"{path / 'meta.json'}: its trace digest does not match summary.json's "
            "trace_sha256 (edited, or copied from another run)"
        )


def load_compare(path: Path) -> CompareData:
    document = _read_json(path / "compare.json")
    table = _read_parquet(path / "comparison.parquet")
    systems = document.get("systems")
    if not isinstance(systems, list) or not systems:
        raise ReportError(f"{path / 'compare.json'}: no systems in it")
    runs = []
    for item in systems:
        name = str(item.get("name", "")) if isinstance(item, dict) else ""
        if not name or "/" in name or name.startswith("."):
            raise ReportError(f"{path / 'compare.json'}: a system without a usable name")
        runs.append(load_run(path / name, label=name))
    return CompareData(path, document, table, tuple(runs))


def load_sweep(path: Path) -> SweepData:
    document = _read_json(path / "sweep.json")
    table = _read_parquet(path / "sweep.parquet")
    points = document.get("points")
    if not isinstance(points, list) or not points:
        raise ReportError(f"{path / 'sweep.json'}: no points in it")
    system = str(document.get("system", {}).get("name", ""))
    runs = []
    for point in points:
        folder = str(point.get("folder", "")) if isinstance(point, dict) else ""
        if not folder or "/" in folder or folder.startswith("."):
            raise ReportError(f"{path / 'sweep.json'}: a point without a usable folder")
        values = dict(point.get("values", {}))
        label = " ".join([system, *(f"{k}={v}" for k, v in values.items())]).strip()
        runs.append(load_run(path / folder, label=label, values=values))
    return SweepData(path, document, table, tuple(runs))


def load_mrc(path: Path) -> MrcData:
    curve = _read_parquet(path / "mrc.parquet")
    if not {"cache_rows", "miss_ratio"} <= set(curve.columns):
        raise ReportError(f"{path / 'mrc.parquet'}: no cache_rows and miss_ratio columns")
    document = _read_json(path / "mrc.json") if (path / "mrc.json").is_file() else {}
    return MrcData(path, curve, document)


def _kind(path: Path) -> str:
    if (path / "compare.json").is_file():
        return "compare"
    if (path / "sweep.json").is_file():
        return "sweep"
    if is_run(path):
        return "run"
    if (path / "mrc.parquet").is_file():
        return "mrc"
    return ""


def _add(results: Results, path: Path, kind: str) -> None:
    if kind == "compare":
        results.compares.append(load_compare(path))
    elif kind == "sweep":
        results.sweeps.append(load_sweep(path))
    elif kind == "run":
        run = load_run(path)
        if run.label != path.name:  # e.g. "hbm-lru (sync-full)": the folder says what differs
            run = load_run(path, label=f"{run.label} ({path.name})")
        results.runs.append(run)
    else:
        results.mrcs.append(load_mrc(path))


def load_results(paths: Sequence[Path]) -> Results:
    """Every result folder in `paths` (see the module docstring), in the order given."""
    if not paths:
        raise ReportError("give at least one result folder")
    results = Results()
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path}: no such result folder")
        kind = _kind(path)
        if kind:
            _add(results, path, kind)
        else:
            children = sorted(p for p in path.iterdir() if p.is_dir() and _kind(p))
            if not children:
                raise ReportError(
                    f"{path}: not a result folder (no summary.json, compare.json, sweep.json "
                    "or mrc.parquet in it or in its sub-folders)"
                )
            for child in children:
                _add(results, child, _kind(child))
        results.sources.append(path)
    return results


__all__ = [
    "CompareData",
    "MrcData",
    "ReportError",
    "Results",
    "RunData",
    "SweepData",
    "is_run",
    "load_results",
    "load_run",
]
