"""Reading result folders for `replay report`: runs, comparisons, sweeps and miss-ratio
curves, recognised by the files they hold (never by their names).

- a run folder (`replay run`): `config.json`, `summary.json`, `meta.json`,
  `batches.parquet`, and `checkpoints.parquet`, `workload.json` when present (and, for a
  cluster, `ranks.parquet`: a row per batch and GPU, checked against summary.json's
  `ranks` and `cluster` by `_check_cluster`); its
  summary's digests must match its config.json and meta.json's trace digest, and its
  totals the per-batch (and per-checkpoint) rows they were summed from, and the whole
  summary the digest meta.json records of it;
- a comparison (`replay compare`): `compare.json`, `comparison.parquet` and a run folder
  per system;
- a sweep (`replay sweep`): `sweep.json`, `sweep.parquet` and a run folder per point;
- a miss-ratio curve (`replay mrc --out`): `mrc.parquet` (and `mrc.json`);
- a plan (`replay plan --out`): `plan.json` (and `figures/mrc.png`,
  `figures/goodput.png` when drawn); the parts of the document a report quotes are
  checked for their types (`check_plan`), so an edited file is an error, not a crash;
- any other folder: each of its sub-folders that is one of the above, in name order (so
  `replay report reports/quickstart/results` takes everything `quickstart` wrote).

A folder that is none of these, or one missing a file its kind needs, is a `ReportError`
naming the folder and the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import polars as pl

from replay import _schema_plan as plan_schema
from replay._files import RESULT_JSON, check_regular, read_json
from replay._schema import bounded_numbers, check_version
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
    ranks: pl.DataFrame | None = None  # a cluster's ranks.parquet, when written

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


@dataclass(frozen=True)
class PlanData:
    """One `replay plan` folder."""

    path: Path
    document: dict[str, Any]  # plan.json
    figures: dict[str, Path]  # "mrc", "goodput": the figures the folder holds


PLAN_FIGURES = ("mrc", "goodput")


@dataclass
class Results:
    """Everything given to one report."""

    runs: list[RunData] = field(default_factory=list)  # run folders given on their own
    compares: list[CompareData] = field(default_factory=list)
    sweeps: list[SweepData] = field(default_factory=list)
    mrcs: list[MrcData] = field(default_factory=list)
    plans: list[PlanData] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)

    def all_runs(self) -> list[RunData]:
        """Every run: those given alone, then each comparison's, then each sweep's."""
        runs = list(self.runs)
        groups: list[CompareData | SweepData] = [*self.compares, *self.sweeps]
        for group in groups:
            runs.extend(group.runs)
        return runs

    def workload(self) -> dict[str, Any] | None:
        """The first run's trace statistics (every run of one report should share a trace)."""
        for run in self.all_runs():
            if run.workload is not None:
                return run.workload
        return None


def _say_what_it_is(path: Path) -> None:
    """A ReportError naming what `path` is when it is there but no regular file (a FIFO,
    a device, a folder): "missing" would send the user looking for the wrong thing."""
    if path.exists():
        check_regular(path, ReportError)


def _read_json(path: Path, document: str) -> dict[str, Any]:
    """The JSON object in `path`, a `document` of `replay._schema_docs` of a version
    this replay reads."""
    if not path.exists() and not path.is_symlink():
        raise ReportError(f"{path}: missing")
    # regular files only, of at most RESULT_JSON's limit: a FIFO or /dev/zero is refused
    value = read_json(path, RESULT_JSON, ReportError, bad="not readable JSON")
    if not isinstance(value, dict):
        raise ReportError(f"{path}: expected a JSON object")
    check_version(document, value, path, ReportError)
    return value


def _read_parquet(path: Path) -> pl.DataFrame:
    if not path.is_file():
        _say_what_it_is(path)
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
            _say_what_it_is(path / name)
            raise ReportError(f"{path}: not a complete run folder ({name} is missing)")
    config = _read_json(path / "config.json", "run-config")
    summary = _read_json(path / "summary.json", "run-summary")
    if not isinstance(config.get("system"), dict) or "name" not in config["system"]:
        raise ReportError(f"{path / 'config.json'}: no system spec in it")
    for key in ("lookups", "batches", "time_s", "energy_j", "time", "policy"):
        if key not in summary:
            raise ReportError(f"{path / 'summary.json'}: no {key!r} in it")
    meta = _read_json(path / "meta.json", "run-meta")
    _check_digests(path, config, summary, meta)
    batches = _read_parquet(path / "batches.parquet")
    has_checkpoints = (path / "checkpoints.parquet").is_file()
    checkpoints = _read_parquet(path / "checkpoints.parquet") if has_checkpoints else pl.DataFrame()
    _check_totals(path, summary, batches, checkpoints if has_checkpoints else None)
    _check_summary_digest(path, summary, meta)
    ranks = _check_cluster(path, summary, batches.height)
    has_workload = (path / "workload.json").is_file()
    workload = _read_json(path / "workload.json", "run-workload") if has_workload else None
    return RunData(
        path=path,
        label=label or str(summary.get("system", config["system"]["name"])),
        config=config,
        summary=summary,
        batches=batches,
        checkpoints=checkpoints,
        meta=meta,
        workload=workload,
        values=dict(values or {}),
        ranks=ranks,
    )


def _check_digests(
    path: Path, config: dict[str, Any], summary: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Refuse a run folder whose files no longer belong together: summary.json holds the
    digest of its config.json and of the trace it replayed (meta.json's)."""
    from replay._output import canonical_sha256, trace_sha256

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


def _check_summary_digest(path: Path, summary: dict[str, Any], meta: dict[str, Any]) -> None:
    """summary.json against meta.json's `summary_sha256`, after `_check_totals` (whose
    message names the field): the digest covers the fields that cannot be recomputed
    from the batches (goodput, stalls, intervals). `write_run_files` records it; run
    folders written before it did have only the totals check."""
    from replay._output import canonical_sha256

    recorded = meta.get("summary_sha256")
    if recorded is not None and recorded != canonical_sha256(summary):
        raise ReportError(
            f"{path / 'summary.json'}: its digest does not match meta.json's summary_sha256 "
            "(edited, or copied from another run)"
        )


# summary.json totals that are sums of one batches.parquet column
# (`replay.engine.account.summarize`), by key
_SUMMED = {
    "lookups": "lookups",
    "updates": "updates",
    "policy.hits": "hits",
    "policy.misses": "misses",
    "policy.bypass": "bypass",
    "policy.fills": "fills",
    "policy.evictions": "evictions",
    "policy.writebacks": "writebacks",
    "policy.updates_fast": "updates_fast",
    "policy.updates_backing": "updates_backing",
}
_SUMMED_FLOAT = {
    "time_s": "time_s",
    "energy_j": "energy_j",
    "time.compute_s": "time_compute_s",
    "time.embedding_s": "time_embedding_s",
    "time.embedding_exposed_s": "time_embedding_exposed_s",
    "time.checkpoint_s": "time_checkpoint_s",
    "time.other_s": "time_other_s",
    "energy.dynamic_j": "energy_dynamic_j",
    "energy.static_j": "energy_static_j",
    "energy.compute_j": "energy_compute_j",
}
# Float sums are compared to this relative precision: the writer summed the very values
# batches.parquet holds, but another summation order could differ in the last bits; an
# edit that changes a figure anyone reads changes it by far more.
_FLOAT_TOLERANCE = 1e-9


def _check_totals(
    path: Path,
    summary: dict[str, Any],
    batches: pl.DataFrame,
    checkpoints: pl.DataFrame | None,
) -> None:
    """Refuse a run folder whose summary.json no longer agrees with the rows it was summed
    from: every total `summarize` derives from batches.parquet (counters exactly, times
    and energies to rounding), the ratios derived from them, and the checkpoint counts
    from checkpoints.parquet. The digests bind summary.json to config.json and the trace,
    not to its own figures, so without this an edited summary would be reported as is.
    """
    check = _Totals(path, summary)
    source = "batches.parquet"
    check.exact("batches", batches.height, source)
    for key, name in _SUMMED.items():
        check.exact(key, check.total(batches, source, name), source)
    for key, name in _SUMMED_FLOAT.items():
        check.close(key, check.ftotal(batches, source, name))
    for group, counters, seconds in (
        ("tiers", ("hits", "misses", "read_bytes", "write_bytes"), "time_s"),
        ("links", ("h2d_bytes", "d2h_bytes"), "time_s"),
    ):
        members = check.value(group)
        if not isinstance(members, dict):
            raise ReportError(f"{check.where}: {group!r} is not an object")
        for name in members:
            for counter in counters:
                want = check.total(batches, source, f"{name}_{counter}")
                check.exact(f"{group}.{name}.{counter}", want, source)
            check.close(
                f"{group}.{name}.{seconds}", check.ftotal(batches, source, f"{name}_{seconds}")
            )
    check.exact("policy.resident_max", check.largest(batches, source, "resident_max"), source)
    lookups = check.total(batches, source, "lookups")
    for key, name in (("policy.hit_ratio", "hits"), ("policy.miss_ratio", "misses")):
        if check.value(key) is None and check.value("policy.capacity_units") == 0:
            continue  # a system with no cache has no hit ratio
        check.close(key, check.total(batches, source, name) / lookups if lookups else 0.0)
    unit_rows = check.value("policy.unit_rows")
    if type(unit_rows) is not int or not 1 <= unit_rows < 2**63:  # an int64 in the engine
        raise ReportError(f"{check.where}: policy.unit_rows must be a positive integer below 2^63")
    needed = check.total(batches, source, "needed_rows")
    fills = check.total(batches, source, "fills")
    check.close("policy.amplification", fills * unit_rows / needed if needed else 1.0)
    if checkpoints is not None and isinstance(summary.get("checkpoint"), dict):
        _check_checkpoint_totals(check, checkpoints)


def _check_checkpoint_totals(check: _Totals, checkpoints: pl.DataFrame) -> None:
    """summary.json's checkpoint counts against checkpoints.parquet (a row per write)."""
    source = "checkpoints.parquet"
    check.exact("checkpoint.count", checkpoints.height, source)
    if checkpoints.height:
        kind = check.column(checkpoints, source, "kind")
        kinds = {key: int((kind == name).sum()) for key, name in _CHECKPOINT_KINDS.items()}
    else:  # an empty table may not even have typed columns
        kinds = dict.fromkeys(_CHECKPOINT_KINDS, 0)
    for key, want in kinds.items():
        check.exact(f"checkpoint.{key}", want, source)
    for key, name in (("rows_written", "rows"), ("bytes_written", "bytes")):
        check.exact(f"checkpoint.{key}", check.total(checkpoints, source, name), source)
    largest = check.largest(checkpoints, source, "retained_bytes")
    check.exact("checkpoint.max_bytes_retained", largest, source)


_CHECKPOINT_KINDS = {"full": "full", "incremental": "incremental", "logs": "log"}

# ranks.parquet's columns (`replay.engine.cluster_run`): those every cluster run writes,
# then those a sharded (not PatrickStar's) run adds; each counter sums to summary `ranks`
_RANK_KEYS = ("batch", "rank", "lookups")
_RANK_COUNTERS = ("lookups", "hits", "misses", "updates")
# summary.json `cluster` numbers the report quotes, when present
_CLUSTER_NUMBERS = (
    "step_time_s",
    "all_to_all_bytes_per_batch",
    "all_to_all_s_per_batch",
    "allreduce_s_per_batch",
    "collectives_s_per_batch",
    "imbalance_mean",
    "imbalance_max",
)


def _check_cluster(path: Path, summary: dict[str, Any], batches: int) -> pl.DataFrame | None:
    """A cluster run's `cluster` and `ranks` in summary.json (the fields the report
    quotes, typed) and its ranks.parquet, read when present: a row per (batch, GPU),
    integer counters without nulls whose per-GPU sums are summary.json's `ranks`. Returns
    ranks.parquet (None when absent); a one-line ReportError on anything else."""
    where = path / "summary.json"
    has_file = (path / "ranks.parquet").is_file()
    cluster = summary.get("cluster")
    if cluster is None:
        if has_file:
            raise ReportError(f"{path / 'ranks.parquet'}: summary.json has no 'cluster' for it")
        return None
    if not isinstance(cluster, dict):
        raise ReportError(f"{where}: 'cluster' is not an object")
    for key in ("nodes", "gpus_per_node", "world"):
        value = cluster.get(key)
        if type(value) is not int or not 1 <= value < 2**31:
            raise ReportError(f"{where}: cluster.{key} must be a positive integer")
    world = cluster["world"]
    for key in _CLUSTER_NUMBERS:
        if key in cluster and not _number(cluster[key]):
            raise ReportError(f"{where}: cluster.{key} is not a number")
    if not isinstance(cluster.get("sharding"), dict):
        raise ReportError(f"{where}: cluster.sharding is not an object")
    ranks = summary.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != world:
        raise ReportError(f"{where}: 'ranks' must be a list of cluster.world ({world}) objects")
    for index, rank in enumerate(ranks):
        if not isinstance(rank, dict) or rank.get("rank") != index:
            raise ReportError(f"{where}: ranks[{index}] is not the object of rank {index}")
        for key in _RANK_COUNTERS:
            value = rank.get(key, 0)
            if type(value) is not int or not 0 <= value < 2**63:
                raise ReportError(f"{where}: ranks[{index}].{key} is not a count")
    if not has_file:
        return None
    file = path / "ranks.parquet"
    frame = _read_parquet(file)
    counters = [c for c in _RANK_COUNTERS if c in frame.columns]
    for name in (*_RANK_KEYS, *counters, *(["time_s"] if "time_s" in frame.columns else [])):
        if name not in frame.columns:
            raise ReportError(f"{file}: no {name!r} column")
        series = frame[name]
        kind = series.dtype.is_float() if name == "time_s" else series.dtype.is_integer()
        if not kind or series.null_count():
            what = "seconds" if name == "time_s" else "integers"
            raise ReportError(f"{file}: column {name!r} must hold {what} without nulls")
        if name == "time_s" and not series.is_finite().all():  # min() skips NaN
            raise ReportError(f"{file}: column 'time_s' holds a NaN or infinite value")
        if series.len() and float(series.min()) < 0:  # type: ignore[arg-type]  # a number: no nulls
            raise ReportError(f"{file}: column {name!r} holds a negative value")
    if frame.height != batches * world:
        raise ReportError(
            f"{file}: {frame.height} rows, not one per batch and GPU ({batches} x {world})"
        )
    keys = frame.select("batch", "rank").sort("batch", "rank")
    if not (
        np.array_equal(keys["batch"].to_numpy(), np.repeat(np.arange(batches), world))
        and np.array_equal(keys["rank"].to_numpy(), np.tile(np.arange(world), batches))
    ):
        raise ReportError(f"{file}: not one row per batch and GPU ({batches} x {world})")
    sums = frame.group_by("rank").agg(pl.col(c).sum() for c in counters).sort("rank")
    for c in counters:
        for index, got in enumerate(sums[c].to_list()):
            if c in ranks[index] and ranks[index][c] != got:
                raise ReportError(
                    f"{where}: ranks[{index}].{c} ({ranks[index][c]}) does not match "
                    f"ranks.parquet ({got}); edited, or copied from another run"
                )
    return frame


class _Totals:
    """Comparing one summary.json's figures with what its tables add up to."""

    def __init__(self, path: Path, summary: dict[str, Any]) -> None:
        self.path = path
        self.where = path / "summary.json"
        self.summary = summary

    def column(self, frame: pl.DataFrame, file: str, name: str) -> pl.Series:
        if name not in frame.columns:
            if not frame.height:
                return pl.Series(name, [], dtype=pl.Int64)  # no rows: nothing to sum
            raise ReportError(f"{self.path / file}: no {name!r} column, which summary.json sums")
        series = frame[name]
        if series.null_count():
            raise ReportError(f"{self.path / file}: column {name!r} holds null values")
        return series

    def total(self, frame: pl.DataFrame, file: str, name: str) -> int:
        return int(self.column(frame, file, name).to_numpy().sum())

    def ftotal(self, frame: pl.DataFrame, file: str, name: str) -> float:
        return float(self.column(frame, file, name).to_numpy().sum())

    def largest(self, frame: pl.DataFrame, file: str, name: str) -> int:
        values = self.column(frame, file, name).to_numpy()
        return int(values.max()) if len(values) else 0

    def value(self, key: str) -> Any:
        node: Any = self.summary
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ReportError(f"{self.where}: no {key!r} in it")
            node = node[part]
        return node

    def _mismatch(self, key: str, found: Any, want: int | float, file: str) -> ReportError:
        shown = repr(found)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return ReportError(
            f"{self.where}: its {key} ({shown}) does not match {file} ({want}); "
            "edited, or copied from another run"
        )

    def exact(self, key: str, want: int, file: str) -> None:
        found = self.value(key)
        if type(found) is not int or found != want:
            raise self._mismatch(key, found, want, file)

    def close(self, key: str, want: float) -> None:
        found = self.value(key)
        if not _number(found) or not math.isclose(
            found, want, rel_tol=_FLOAT_TOLERANCE, abs_tol=0.0
        ):
            raise self._mismatch(key, found, want, "batches.parquet")


def load_compare(path: Path) -> CompareData:
    document = _read_json(path / "compare.json", "compare")
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
    document = _read_json(path / "sweep.json", "sweep")
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
    document = _read_json(path / "mrc.json", "mrc") if (path / "mrc.json").is_file() else {}
    return MrcData(path, curve, document)


def _number(value: Any) -> TypeGuard[int | float]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past float's range (JSON allows 4,300 digits)
        return False


def _fraction_or_none(value: Any) -> bool:
    return value is None or (_number(value) and 0.0 <= value <= 1.0)


def check_plan(where: Path, doc: dict[str, Any]) -> None:
    """ReportError naming the first field of plan.json a report quotes that is missing or
    of the wrong type (numbers finite, fractions within [0, 1])."""

    def fail(key: str, what: str) -> ReportError:
        return ReportError(f"{where}: {key} {what}")

    def obj(node: Any, key: str) -> dict[str, Any]:
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(value, dict):
            raise fail(key, "is missing or not an object")
        return value

    def num(node: dict[str, Any], key: str, *, fraction: bool = False) -> None:
        value = node.get(key)
        if not _number(value) or value < 0 or (fraction and value > 1):
            raise fail(key, "is missing or not a " + ("fraction" if fraction else "number ≥ 0"))

    def nums(node: dict[str, Any], definition: Any) -> None:
        for key, fraction in bounded_numbers(definition):  # the keys plan.json defines
            num(node, key, fraction=fraction)

    horizon = obj(doc, "horizon")
    nums(horizon, plan_schema.Horizon)
    nums(doc, plan_schema.Plan)
    cache = obj(doc, "cache")
    nums(cache, plan_schema.Cache)
    for policy, hit in obj(cache, "hit_at_budget").items():
        if not _fraction_or_none(hit):
            raise fail(f"cache.hit_at_budget.{policy}", "is not a fraction")
    for policy, needs in obj(cache, "bytes_for_hit").items():
        if not isinstance(needs, dict):
            raise fail(f"cache.bytes_for_hit.{policy}", "is not an object")
        for target, size in needs.items():
            if not _fraction_or_none(_float(target)) or not (size is None or _number(size)):
                raise fail(f"cache.bytes_for_hit.{policy}", "holds a bad target or size")
    tables = cache.get("per_table")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise fail("cache.per_table", "is missing or not a list of objects")
    for t in tables:
        nums(t, plan_schema.TableSplit)
    mrc = obj(doc, "mrc")
    for key in ("rows", "bytes", "miss_ratio"):
        values = mrc.get(key)
        if not isinstance(values, list) or not all(_number(v) for v in values):
            raise fail(f"mrc.{key}", "is missing or not a list of numbers")
    if not len(mrc["rows"]) == len(mrc["bytes"]) == len(mrc["miss_ratio"]):
        raise fail("mrc", "has lists of different lengths")
    bound = mrc.get("error_bound")
    if bound is not None and not (_number(bound) and bound >= 0):
        raise fail("mrc.error_bound", "is not a number ≥ 0")
    analytic = mrc.get("analytic_miss_ratio")
    if analytic is not None and (
        not isinstance(analytic, list) or not all(_number(v) for v in analytic)
    ):
        raise fail("mrc.analytic_miss_ratio", "is not a list of numbers")
    checkpoint = obj(doc, "checkpoint")
    nums(checkpoint, plan_schema.Checkpoint)
    strategies = checkpoint.get("strategies")
    if not isinstance(strategies, list) or not all(isinstance(x, dict) for x in strategies):
        raise fail("checkpoint.strategies", "is missing or not a list of objects")
    for x in strategies:
        if not isinstance(x.get("name"), str):
            raise fail("checkpoint.strategies", "holds a strategy without a name")
        nums(x, plan_schema.Strategy)
    systems = doc.get("systems")
    if not isinstance(systems, list) or not all(isinstance(x, dict) for x in systems):
        raise fail("systems", "is missing or not a list of objects")
    for x in systems:
        if not isinstance(x.get("name"), str):
            raise fail("systems", "holds a system without a name")
        nums(x, plan_schema.SystemAnswer)
        if not _fraction_or_none(x.get("hit_ratio")):
            raise fail("systems", "holds a hit ratio that is not a fraction")
    notes = doc.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise fail("notes", "is not a list of strings")


def _float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def load_plan(path: Path) -> PlanData:
    document = _read_json(path / "plan.json", "plan")
    check_plan(path / "plan.json", document)
    figures = {
        name: path / "figures" / f"{name}.png"
        for name in PLAN_FIGURES
        if (path / "figures" / f"{name}.png").is_file()
    }
    return PlanData(path, document, figures)


def _kind(path: Path) -> str:
    if (path / "plan.json").is_file():
        return "plan"
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
    elif kind == "plan":
        results.plans.append(load_plan(path))
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
                    f"{path}: not a result folder (no summary.json, compare.json, sweep.json, "
                    "mrc.parquet or plan.json in it or in its sub-folders)"
                )
            for child in children:
                _add(results, child, _kind(child))
        results.sources.append(path)
    return results


__all__ = [
    "CompareData",
    "MrcData",
    "PlanData",
    "ReportError",
    "Results",
    "RunData",
    "SweepData",
    "check_plan",
    "is_run",
    "load_plan",
    "load_results",
    "load_run",
]
