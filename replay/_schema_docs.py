"""Every JSON document replay writes, by name: its file, its typed definition and what it
is (`DOCUMENTS`); the definitions of the run, study, report and trace documents are here,
those of `replay plan`'s in `replay._schema_plan`.

Run summaries, configurations and reports hold parts whose keys depend on the system,
its policy and its checkpoint strategy (a policy's own counters, a cluster's per-GPU
figures, a report's analyses): those objects list their common keys and may hold more
(`open_shape`). Replay's exports in other tools' formats (`replay export torchrec-plan`:
TorchRec's ShardingPlan; `replay export tbe-config`: FBGEMM's TBEDataConfig, whose
reader warns on any key it does not know) keep those tools' shapes and carry no
`schema_version`; so do the resume state in a partial folder and the lines printed by
`--json` options other than `replay plan`'s, `replay run`'s and `replay diff`'s.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

from replay._schema import (
    NONNEGATIVE,
    VERSION_KEY,
    VERSIONS,
    check_version,
    json_schema,
    open_shape,
)
from replay._schema_plan import Plan, Sharding, Torchrec
from replay.errors import ConfigError, InputError, ReplayError

Count = Annotated[int, NONNEGATIVE]
Size = Annotated[float, NONNEGATIVE]


class TierCounters(TypedDict):
    """One memory tier's traffic over the run."""

    hits: Annotated[Count, "lookups served by the tier"]
    misses: Annotated[Count, "lookups it did not hold"]
    read_bytes: Annotated[Count, "bytes read from it"]
    write_bytes: Annotated[Count, "bytes written to it"]
    time_s: Annotated[Size, "its time"]


@open_shape
class PolicyCounters(TypedDict):
    """The cache policy's counters (a policy may add its own)."""

    name: Annotated[str, "the policy"]
    hits: Annotated[Count, "lookups the cache held"]
    misses: Annotated[Count, "lookups it did not"]
    hit_ratio: Annotated[float | None, "hits / lookups (null: no cache, e.g. static)"]
    miss_ratio: Annotated[float | None, "misses / lookups (null: no cache)"]


@open_shape
class CheckpointCounters(TypedDict):
    """The checkpoint strategy's writes and stalls over the run."""

    strategy: Annotated[str, "the strategy"]
    count: Annotated[Count, "checkpoints taken"]
    bytes_written: Annotated[Count, "bytes written by checkpoints"]
    stall_s: Annotated[Size, "training time the checkpoints stalled"]
    overhead: Annotated[float, "stall_s / the run's time"]


class Digests(TypedDict):
    """What the summary is bound to: `replay report` refuses a folder that disagrees."""

    config_sha256: Annotated[str, "config.json's canonical JSON"]
    trace_sha256: Annotated[str, "the trace's manifest (meta.json's trace)"]


@open_shape
class RunSummary(TypedDict):
    """summary.json of a run folder: the run's totals (docs/systems.md)."""

    system: Annotated[str, "the system replayed"]
    lookups: Annotated[Count, "lookups replayed"]
    batches: Annotated[Count, "batches replayed"]
    updates: Annotated[Count, "row updates replayed"]
    time_s: Annotated[Size, "the run's modelled time"]
    energy_j: Annotated[Size, "the run's modelled energy"]
    time: Annotated[dict[str, float], "time_s by part (compute, embedding, checkpoint, ...)"]
    energy: Annotated[dict[str, float], "energy_j by part"]
    tiers: Annotated[dict[str, TierCounters], "per memory tier"]
    links: Annotated[dict[str, dict[str, Any]], "per link: bytes each way and time"]
    policy: PolicyCounters
    checkpoint: NotRequired[CheckpointCounters]
    failures: NotRequired[Annotated[dict[str, Any] | None, "injected failures, if any"]]
    warnings: Annotated[list[str], "degenerate results, one line each"]
    row_bytes: Annotated[Count, "bytes per embedding row"]
    row_state_bytes: Annotated[Count, "bytes per row with its optimizer state"]
    cluster: NotRequired[Annotated[Any, "a cluster run's per-GPU figures"]]
    digests: Digests


@open_shape
class RunConfig(TypedDict):
    """config.json of a run folder: the resolved system and how it was given."""

    system: Annotated[dict[str, Any], "the resolved system spec (docs/systems.md)"]
    origin: Annotated[str, "the preset or file it came from"]
    overrides: Annotated[list[str], "the --set overrides applied"]


@open_shape
class RunMeta(TypedDict):
    """meta.json of a run folder: tool, trace identity and timings (not part of the
    results: its wall times differ between runs)."""

    tool: Annotated[str, "replay"]
    version: Annotated[str, "replay's version"]
    trace: Annotated[dict[str, Any], "the trace or workload replayed and its digest"]
    system: Annotated[str, "the system replayed"]
    timings: Annotated[dict[str, float], "wall times of the replay's stages"]
    summary_sha256: Annotated[str, "summary.json's canonical JSON"]


@open_shape
class RunWorkload(TypedDict):
    """workload.json of a run or study: the trace's statistics (`replay inspect`)."""


class StudySystem(TypedDict):
    name: Annotated[str, "the resolved system's name (its run folder)"]
    given: Annotated[str, "the system as given (a preset or a file)"]
    origin: Annotated[str, "where its spec came from"]


class Compare(TypedDict):
    """compare.json of `replay compare`: the systems compared on one trace; each run
    folder is beside it, named after its system."""

    kind: Annotated[str, "compare"]
    trace: Annotated[str, "the trace folder, or the workload generated on the fly"]
    workload: NotRequired[Annotated[dict[str, Any], "the workload spec, when generated"]]
    systems: Annotated[list[StudySystem], "each system compared"]
    overrides: Annotated[list[str], "the --set overrides applied to every system"]
    checksums_verified: NotRequired[
        Annotated[bool | None, "the trace's checksums were verified (null: on the fly)"]
    ]


class SweepPoint(TypedDict):
    index: Annotated[Count, "the point's index"]
    folder: Annotated[str, "its run folder"]
    values: Annotated[dict[str, Any], "the grid's value of each setting"]
    overrides: Annotated[list[str], "the overrides that give it"]


class Sweep(TypedDict):
    """sweep.json of `replay sweep`: one system over a grid of settings; each point's run
    folder is beside it."""

    kind: Annotated[str, "sweep"]
    trace: Annotated[str, "the trace folder, or the workload generated on the fly"]
    workload: NotRequired[Annotated[dict[str, Any], "the workload spec, when generated"]]
    system: StudySystem
    overrides: Annotated[list[str], "the --set overrides applied to every point"]
    grid: Annotated[dict[str, list[Any]], "each setting's values"]
    points: Annotated[list[SweepPoint], "every point"]
    checksums_verified: NotRequired[
        Annotated[bool | None, "the trace's checksums were verified (null: on the fly)"]
    ]


@open_shape
class Mrc(TypedDict):
    """mrc.json of `replay mrc`: how the miss-ratio curve in mrc.parquet was computed."""


@open_shape
class ReportSummary(TypedDict):
    """summary.json of `replay report`: the report's answers as data."""

    tool: Annotated[str, "replay"]
    version: Annotated[str, "replay's version"]
    sources: Annotated[list[str], "the result folders reported"]
    runs: Annotated[list[dict[str, Any]], "each run: label, system, folder, warnings"]
    summary: Annotated[list[str], "the report's summary lines"]
    plans: Annotated[list[str], "the plan folders reported"]
    figures: Annotated[list[dict[str, Any]], "each figure: name, title, caption, section"]


class ManifestFile(TypedDict):
    """One Parquet file of the trace."""

    path: Annotated[str, "its path in the trace folder"]
    rows: Annotated[Count, "its rows"]
    sha256: Annotated[str, "its SHA-256"]
    batch_start: Annotated[Count, "its first batch"]
    batch_stop: Annotated[Count, "one past its last batch"]


class ManifestTable(TypedDict):
    name: Annotated[str, "the table"]
    rows: Annotated[Count, "its rows"]
    dim: NotRequired[Annotated[Count, "its embedding dimension (a recorded trace)"]]


@open_shape
class TraceManifest(TypedDict):
    """manifest.json of a trace folder (docs/trace_format.md)."""

    format_version: Annotated[int, "the trace format (Parquet layout) version"]
    tool: Annotated[dict[str, str], "the tool that wrote it and its version"]
    created_by: Annotated[str, "the command that wrote it"]
    batches: Annotated[Count, "batches"]
    batch_size: Annotated[Count, "samples per batch"]
    lookups: Annotated[Count, "lookups"]
    updates: Annotated[Count, "row updates"]
    row_dtype: Annotated[str, "the row ids' type"]
    tables: Annotated[list[ManifestTable], "per table"]
    layout: Annotated[dict[str, Any], "the files' layout"]
    workload: Annotated[dict[str, Any] | None, "the workload spec that generated it"]
    source: NotRequired[Annotated[dict[str, Any], "the files it was ingested from"]]
    files: Annotated[dict[str, list[ManifestFile]], "per kind (lookups, updates): its files"]


class DiffAnswer(TypedDict):
    """One answer of two folders."""

    path: Annotated[str, "the answer's path (what --fail-on names)"]
    unit: Annotated[str, "its unit"]
    a: Annotated[float | str | None, "its value in A (text for a unit of text)"]
    b: Annotated[float | str | None, "its value in B"]
    change: Annotated[float | None, "b - a"]
    relative_change: Annotated[float | None, "(b - a) / a"]
    changed: Annotated[bool, "a and b differ"]


class Diff(TypedDict):
    """`replay diff --json`: every answer of two run or plan folders and its change."""

    kind: Annotated[str, "run or plan"]
    a: Annotated[str, "folder A"]
    b: Annotated[str, "folder B"]
    answers: Annotated[list[DiffAnswer], "each answer"]
    thresholds: Annotated[list[str], "the --fail-on thresholds"]
    broken: Annotated[list[str], "each broken threshold, one line"]


@dataclass(frozen=True)
class Document:
    """A document replay writes: its name (`replay schema NAME`), file and definition."""

    name: str
    file: str
    definition: Any
    title: str

    @property
    def version(self) -> int:
        return VERSIONS[self.name]

    def schema(self) -> dict[str, Any]:
        doc = " ".join((self.definition.__doc__ or "").split())
        return json_schema(self.name, self.definition, title=self.title, description=doc)


DOCUMENTS: dict[str, Document] = {
    d.name: d
    for d in (
        Document("plan", "plan.json", Plan, "replay plan: plan.json"),
        Document("torchrec", "torchrec.json", Torchrec, "replay plan: torchrec.json"),
        Document("sharding", "sharding.json", Sharding, "a sharding plan: sharding.json"),
        Document("run-summary", "summary.json", RunSummary, "a run: summary.json"),
        Document("run-config", "config.json", RunConfig, "a run: config.json"),
        Document("run-meta", "meta.json", RunMeta, "a run: meta.json"),
        Document("run-workload", "workload.json", RunWorkload, "a run: workload.json"),
        Document("compare", "compare.json", Compare, "replay compare: compare.json"),
        Document("sweep", "sweep.json", Sweep, "replay sweep: sweep.json"),
        Document("mrc", "mrc.json", Mrc, "replay mrc: mrc.json"),
        Document("report-summary", "summary.json", ReportSummary, "replay report: summary.json"),
        Document("trace-manifest", "manifest.json", TraceManifest, "a trace: manifest.json"),
        Document("diff", "-", Diff, "replay diff --json"),
    )
}

# the generated schemas as published: replay/schemas/NAME.vVERSION.json, one per version
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def document(name: str) -> Document:
    """The document `name`; `ConfigError` naming the documents for another name."""
    if name not in DOCUMENTS:
        raise ConfigError(f"no document {name!r} (documents: {', '.join(DOCUMENTS)})")
    return DOCUMENTS[name]


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as published: indented JSON, keys in the order generated."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def published_path(name: str, version: int | None = None) -> Path:
    return SCHEMA_DIR / f"{name}.v{VERSIONS[name] if version is None else version}.json"


def write_published() -> list[Path]:
    """Write every document's generated schema at its current version into
    `SCHEMA_DIR` (after a definition changes and its version is bumped)."""
    written = []
    for doc in DOCUMENTS.values():
        path = published_path(doc.name)
        path.write_text(schema_text(doc.schema()))
        written.append(path)
    return written


def shape_of(schema: Any) -> Any:
    """A schema without its words (titles, descriptions): what a reader depends on."""
    if isinstance(schema, dict):
        return {k: shape_of(v) for k, v in schema.items() if k not in ("title", "description")}
    if isinstance(schema, list):
        return [shape_of(v) for v in schema]
    return schema


def fingerprint(schema: dict[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of a schema's shape (`shape_of`), as
    canonical JSON: a change of shape without a version bump changes it."""
    text = json.dumps(shape_of(schema), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error: Any) -> tuple[str, str]:
    """The bad key's path and what is wrong with it, in a few words (jsonschema's own
    message repeats the value, which may be megabytes)."""
    where = list(error.absolute_path)
    kind, expected = error.validator, error.validator_value
    if kind == "required":
        missing = next((k for k in expected if k not in error.instance), expected[0])
        return _key_path([*where, missing]), "is missing"
    if kind == "additionalProperties":
        extra = sorted(k for k in error.instance if k not in error.schema.get("properties", {}))
        return _key_path([*where, extra[0] if extra else "?"]), "is not a key of this document"
    if kind == "type":
        return _key_path(where), f"is not of type {expected}"
    if kind == "const":
        return _key_path(where), f"is {error.instance!r}, not {expected!r}"
    if kind in ("minimum", "maximum"):
        return _key_path(where), f"is {error.instance!r}, {kind} {expected}"
    if kind == "anyOf":
        types = [s.get("type") or s.get("$ref", "?").rpartition("/")[2] for s in expected]
        return _key_path(where), f"is none of {', '.join(str(t) for t in types)}"
    if kind == "enum":
        return _key_path(where), f"is none of {', '.join(repr(v) for v in expected)}"
    return _key_path(where), f"fails {kind}"


def validate(name: str, value: Any, where: object) -> None:
    """`InputError` in one line naming the first bad key where `value` is not a valid
    `name` document at its current version (keys in the document's order)."""
    try:
        import jsonschema
    except ImportError:  # a dependency, but an environment may lack it
        raise InputError(
            "replay schema --validate needs the jsonschema package: pip install jsonschema"
        ) from None
    doc = document(name)
    if isinstance(value, dict) and VERSION_KEY in value:
        check_version(name, value, where, InputError)
    errors = list(_validator(name, jsonschema).iter_errors(value))
    if not errors:
        return
    # the first in the file's order: the shallowest path of the earliest key
    error = min(errors, key=lambda e: (len(e.absolute_path), _order(value, e.absolute_path)))
    key, what = _problem(error)
    key = key or "(the document)"
    raise InputError(f"{where}: {key} {what} (a {doc.name} document, version {doc.version})")


class SchemaViolation(ReplayError):
    """A document replay is writing that its own published schema refuses: a bug (a
    writer whose shape changed without its definition and version)."""


def check_written(name: str, document: dict[str, Any]) -> None:
    """`SchemaViolation` where `document`, as its file will hold it (JSON, numpy numbers
    as numbers), is not a valid `name` document: `REPLAY_CHECK_SCHEMAS`'s check."""
    import numpy as np

    def plain(value: Any) -> Any:
        if isinstance(value, np.generic | np.ndarray):
            return value.tolist()
        if isinstance(value, Path):
            return str(value)
        raise TypeError(f"{type(value).__name__} is not JSON")

    text = json.dumps(document, default=plain)
    try:
        validate(name, json.loads(text), f"the {name} document being written")
    except InputError as exc:
        raise SchemaViolation(str(exc)) from None


@functools.cache
def _validator(name: str, jsonschema: Any) -> Any:
    """The published schema's validator, built once (the test suite checks thousands of
    documents)."""
    return jsonschema.Draft202012Validator(json.loads(published_path(name).read_text()))


def _order(value: Any, path: Any) -> list[int]:
    """A path's position in the document: each key's index among its object's keys."""
    out = []
    for part in path:
        if isinstance(value, dict):
            out.append(list(value).index(part) if part in value else 0)
        else:
            out.append(int(part))
        value = value[part]
    return out


__all__ = [
    "DOCUMENTS",
    "SCHEMA_DIR",
    "Document",
    "SchemaViolation",
    "check_written",
    "document",
    "fingerprint",
    "validate",
    "write_published",
]
