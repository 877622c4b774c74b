"""`replay diff A B`: two result folders' answers side by side, and thresholds on them.

A and B are two run folders (`replay run`: summary.json) or two plan folders (`replay
plan`: plan.json). Every answer of a folder is addressed by a dotted path, with the key in
square brackets where one document holds several (`cache.bytes_for_hit[0.95]`,
`systems.time_per_batch_s[hbm-lru]`, `memory.peak_bytes[3]` for GPU 3). The paths of each
kind, their units and what they read are defined once, below (`PLAN_ANSWERS`,
`RUN_ANSWERS`); docs/diff.md lists them.

Change: B - A, and (B - A) / |A| where A is not 0. An answer is a number or text (a
strategy's name); a missing number is `None` (a hit target out of reach).

A threshold (`--fail-on`) is `PATH OP VALUE`, OP one of `<`, `<=`, `>`, `>=`:
- `VALUE%`: the relative change, in percent (`cache.bytes_for_hit[0.95] > +10%`);
- `VALUEpt`: the change in percentage points, for a ratio (`checkpoint.goodput < -0.5pt`);
- a signed VALUE (`+1GiB`, `-30s`, `+0.2`): the change, in the answer's unit;
- an unsigned VALUE (`1.3`, `70GiB`, `10min`): B's value itself.
Bytes take `parse_bytes`'s units and seconds `parse_duration`'s. A threshold breaks when
its comparison is true. An answer missing from one folder and not the other breaks every
threshold on it (a target that went out of reach is a regression a gate must not pass);
missing from both, nothing to compare, it holds; a path that no folder has is an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay._files import RESULT_JSON, check_regular, read_json
from replay._schema import check_version
from replay._schema_stamp import stamp
from replay._units import format_target
from replay.errors import InputError

Value = float | str | None

# units: "bytes", "s", "J", "ratio" (a fraction, shown as %), "x" (a factor), "count",
# "text" (compared for equality only)
UNITS = ("bytes", "s", "J", "ratio", "x", "count", "text")


@dataclass(frozen=True)
class Answer:
    """One answer a folder gives: its path, unit, value, and what it means."""

    path: str
    unit: str
    value: Value
    meaning: str


@dataclass(frozen=True)
class Row:
    """One answer of A beside B's."""

    path: str
    unit: str
    meaning: str
    a: Value
    b: Value

    @property
    def change(self) -> float | None:
        if isinstance(self.a, int | float) and isinstance(self.b, int | float):
            return float(self.b) - float(self.a)
        return None

    @property
    def relative(self) -> float | None:
        change = self.change
        if change is None or float(self.a or 0.0) == 0.0:
            return None
        return change / abs(float(self.a))  # type: ignore[arg-type]  # a change: a number

    @property
    def changed(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True)
class Threshold:
    """A parsed `--fail-on`: on `path`, `op` against `value` measured as `measure`
    ("relative": a fraction; "points": a fraction; "change" or "value": the unit's)."""

    text: str
    path: str
    op: str
    measure: str
    value: float


@dataclass(frozen=True)
class Diff:
    kind: str  # "plan" or "run"
    a: Path
    b: Path
    rows: tuple[Row, ...]

    def row(self, path: str) -> Row | None:
        return next((r for r in self.rows if r.path == path), None)


# --- the answers of each kind -------------------------------------------------------------


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _get(doc: Any, *keys: str | int) -> Any:
    for key in keys:
        if isinstance(doc, dict) and isinstance(key, str):
            doc = doc.get(key)
        elif isinstance(doc, list) and isinstance(key, int) and 0 <= key < len(doc):
            doc = doc[key]
        else:
            return None
    return doc


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _plan_cache(doc: dict[str, Any]) -> Iterator[Answer]:
    cache = _get(doc, "cache")
    base = _get(cache, "baseline", "policy")
    yield Answer("cache.budget_bytes", "bytes", _num(_get(cache, "budget_bytes")), "cache budget")
    hits = _get(cache, "hit_at_budget")
    sizes = _get(cache, "bytes_for_hit")
    if isinstance(base, str):
        yield Answer(
            "cache.hit_at_budget",
            "ratio",
            _num(_get(hits, base)),
            f"hit ratio at the budget ({base})",
        )
        for target, size in sorted((_get(sizes, base) or {}).items()):
            yield Answer(
                f"cache.bytes_for_hit[{target}]", "bytes", _num(size),
                f"bytes for a hit ratio of {format_target(target)} ({base})",
            )  # fmt: skip
    for policy, hit in sorted((hits or {}).items()):
        yield Answer(
            f"cache.hit_at_budget[{policy}]", "ratio", _num(hit), "hit ratio at the budget"
        )
    for policy, targets in sorted((sizes or {}).items()):
        for target, size in sorted((targets or {}).items()):
            yield Answer(
                f"cache.bytes_for_hit[{policy}][{target}]", "bytes", _num(size),
                f"bytes for a hit ratio of {format_target(target)}",
            )  # fmt: skip
    yield Answer(
        "cache.split_hit", "ratio", _num(_get(cache, "split_hit")), "per-table split's hit"
    )
    yield Answer(
        "cache.uniform_hit", "ratio", _num(_get(cache, "uniform_hit")), "one load factor's hit"
    )


def _plan_checkpoint(doc: dict[str, Any]) -> Iterator[Answer]:
    checkpoint = _get(doc, "checkpoint")
    best = _get(checkpoint, "best")
    strategies = {
        s.get("name", s.get("strategy")): s for s in _dicts(_get(checkpoint, "strategies"))
    }
    yield Answer(
        "checkpoint.best", "text", best if isinstance(best, str) else None, "best strategy"
    )
    chosen = strategies.get(best, {})
    yield Answer(
        "checkpoint.goodput", "ratio", _num(chosen.get("goodput")), "best strategy's goodput"
    )
    yield Answer(
        "checkpoint.interval_s", "s", _num(chosen.get("interval_s")), "best strategy's interval"
    )
    yield Answer(
        "checkpoint.cluster_mtbf_s", "s", _num(_get(checkpoint, "cluster_mtbf_s")), "cluster MTBF"
    )
    for name, s in sorted(strategies.items(), key=lambda kv: str(kv[0])):
        yield Answer(f"checkpoint.goodput[{name}]", "ratio", _num(s.get("goodput")), "goodput")
        yield Answer(f"checkpoint.interval_s[{name}]", "s", _num(s.get("interval_s")), "interval")
        yield Answer(
            f"checkpoint.restore_s[{name}]", "s", _num(s.get("restore_s")), "restore per failure"
        )


def _plan_systems(doc: dict[str, Any]) -> Iterator[Answer]:
    for s in _dicts(_get(doc, "systems")):
        name = s.get("name")
        yield Answer(
            f"systems.time_per_batch_s[{name}]", "s", _num(s.get("time_per_batch_s")),
            "time per batch",
        )  # fmt: skip
        yield Answer(
            f"systems.energy_per_batch_j[{name}]", "J", _num(s.get("energy_per_batch_j")),
            "energy per batch",
        )  # fmt: skip
        yield Answer(f"systems.hit_ratio[{name}]", "ratio", _num(s.get("hit_ratio")), "hit ratio")


def _plan_memory(doc: dict[str, Any]) -> Iterator[Answer]:
    gpus = _dicts(_get(doc, "memory", "per_gpu"))
    peaks = [_num(g.get("allocated_peak_bytes")) for g in gpus]
    known = [p for p in peaks if p is not None]
    yield Answer("memory.peak_bytes", "bytes", max(known) if known else None, "fullest GPU's peak")
    fits = _get(doc, "memory", "fits")
    yield Answer("memory.fits", "text", str(fits).lower() if isinstance(fits, bool) else None,
                 "every GPU fits")  # fmt: skip
    for g, peak in zip(gpus, peaks, strict=True):
        yield Answer(f"memory.peak_bytes[{g.get('rank')}]", "bytes", peak, "GPU's allocated peak")


def _plan_cluster(doc: dict[str, Any]) -> Iterator[Answer]:
    cluster = _get(doc, "cluster")
    if not isinstance(cluster, dict):
        return
    for key, unit, meaning in (
        ("imbalance", "x", "max / mean per-GPU lookups"),
        ("step_time_s", "s", "step time"),
        ("all_to_all_s_per_batch", "s", "all-to-all per batch"),
        ("allreduce_s_per_batch", "s", "all-reduce per batch"),
        ("all_to_all_bytes_per_batch", "bytes", "all-to-all bytes per batch"),
    ):
        yield Answer(f"cluster.{key}", unit, _num(cluster.get(key)), meaning)
    for key in ("worst", "mean"):
        yield Answer(
            f"cluster.hit_at_budget.{key}", "ratio", _num(_get(cluster, "hit_at_budget", key)),
            f"{key} GPU's hit at its budget",
        )  # fmt: skip
    for target, size in sorted((_get(cluster, "bytes_for_hit", "worst_gpu") or {}).items()):
        yield Answer(
            f"cluster.bytes_for_hit[{target}]", "bytes", _num(size),
            f"bytes per GPU for a hit ratio of {format_target(target)} (worst GPU)",
        )  # fmt: skip
    for g in _dicts(cluster.get("per_gpu")):
        rank = g.get("rank")
        yield Answer(f"cluster.hit_at_budget[{rank}]", "ratio", _num(g.get("hit_at_budget")),
                     "GPU's hit at its budget")  # fmt: skip
        yield Answer(f"cluster.lookups[{rank}]", "count", _num(g.get("lookups")), "GPU's lookups")


PLAN_ANSWERS: tuple[Callable[[dict[str, Any]], Iterator[Answer]], ...] = (
    _plan_cache, _plan_checkpoint, _plan_systems, _plan_memory, _plan_cluster,
)  # fmt: skip


def _run_answers(doc: dict[str, Any]) -> Iterator[Answer]:
    batches = _num(doc.get("batches"))
    time_s = _num(doc.get("time_s"))
    energy_j = _num(doc.get("energy_j"))
    per = batches is not None and batches > 0
    system = doc.get("system")
    yield Answer("system", "text", system if isinstance(system, str) else None, "system")
    yield Answer("time_s", "s", time_s, "run's time")
    yield Answer("time_per_batch_s", "s",
                 time_s / batches if per and batches and time_s is not None else None,
                 "time per batch")  # fmt: skip
    yield Answer("energy_j", "J", energy_j, "run's energy")
    yield Answer("lookups", "count", _num(doc.get("lookups")), "lookups")
    yield Answer("policy.hit_ratio", "ratio", _num(_get(doc, "policy", "hit_ratio")), "hit ratio")
    yield Answer("policy.evictions", "count", _num(_get(doc, "policy", "evictions")), "evictions")
    for key, value in sorted((_get(doc, "time") or {}).items()):
        yield Answer(f"time.{key}", "s", _num(value), "time by part")
    for tier, t in sorted((_get(doc, "tiers") or {}).items()):
        for key in ("read_bytes", "write_bytes"):
            yield Answer(f"tiers.{key}[{tier}]", "bytes", _num(_get(t, key)), f"{tier} {key}")
    for link, t in sorted((_get(doc, "links") or {}).items()):
        for key in ("h2d_bytes", "d2h_bytes"):
            yield Answer(f"links.{key}[{link}]", "bytes", _num(_get(t, key)), f"{link} {key}")
    checkpoint = _get(doc, "checkpoint")
    yield Answer("checkpoint.overhead", "ratio", _num(_get(checkpoint, "overhead")),
                 "checkpoint overhead")  # fmt: skip
    yield Answer("checkpoint.stall_s", "s", _num(_get(checkpoint, "stall_s")), "checkpoint stall")
    yield Answer("checkpoint.bytes_written", "bytes", _num(_get(checkpoint, "bytes_written")),
                 "checkpoint bytes written")  # fmt: skip
    goodput = _get(doc, "failures", "goodput_mean")
    yield Answer("failures.goodput", "ratio", _num(goodput), "goodput under failures")
    cluster = _get(doc, "cluster")
    if isinstance(cluster, dict):
        for key, unit in (("step_time_s", "s"), ("imbalance_mean", "x"), ("imbalance_max", "x"),
                          ("all_to_all_s_per_batch", "s"), ("allreduce_s_per_batch", "s"),
                          ("all_to_all_bytes_per_batch", "bytes")):  # fmt: skip
            path = "cluster.imbalance" if key == "imbalance_mean" else f"cluster.{key}"
            yield Answer(path, unit, _num(cluster.get(key)), key.replace("_", " "))


RUN_ANSWERS: tuple[Callable[[dict[str, Any]], Iterator[Answer]], ...] = (_run_answers,)
KINDS = {"plan": ("plan.json", PLAN_ANSWERS), "run": ("summary.json", RUN_ANSWERS)}


# --- folders ------------------------------------------------------------------------------


def folder_kind(path: Path) -> str:
    """ "plan" or "run", by the document the folder holds; else InputError."""
    if not path.exists():
        raise InputError(f"{path}: no such folder")
    if not path.is_dir():
        raise InputError(f"{path}: not a folder (give a run folder or a plan folder)")
    for kind, (name, _) in KINDS.items():
        if (path / name).exists() or (path / name).is_symlink():
            return kind
    raise InputError(f"{path}: neither a run folder (summary.json) nor a plan folder (plan.json)")


def answers(path: Path) -> tuple[str, list[Answer]]:
    """The folder's kind and every answer it gives, in the documented order."""
    kind = folder_kind(path)
    name, makers = KINDS[kind]
    where = path / name
    check_regular(where, InputError)
    doc = read_json(where, RESULT_JSON, InputError, bad="not readable JSON")
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a JSON object")
    check_version("run-summary" if kind == "run" else "plan", doc, where, InputError)
    if kind == "run" and "system" not in doc:
        raise InputError(f"{where}: not a run's summary (no 'system' in it)")
    if kind == "plan" and "cache" not in doc:
        raise InputError(f"{where}: not a plan (no 'cache' in it)")
    return kind, [answer for make in makers for answer in make(doc)]


def diff(a: Path, b: Path) -> Diff:
    """A's answers beside B's: every path either folder has, A's order first."""
    kind_a, in_a = answers(a)
    kind_b, in_b = answers(b)
    if kind_a != kind_b:
        raise InputError(f"{a} is a {kind_a} folder and {b} a {kind_b} folder: diff two of a kind")
    by_b = {x.path: x for x in in_b}
    rows = [
        Row(x.path, x.unit, x.meaning, x.value, by_b[x.path].value if x.path in by_b else None)
        for x in in_a
    ]
    seen = {x.path for x in in_a}
    rows += [Row(x.path, x.unit, x.meaning, None, x.value) for x in in_b if x.path not in seen]
    return Diff(kind_a, a, b, tuple(rows))


# --- thresholds ---------------------------------------------------------------------------

_THRESHOLD = re.compile(r"^\s*(?P<path>[^<>=\s]+)\s*(?P<op><=|>=|<|>)\s*(?P<value>\S+)\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda x, y: x < y, "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y, ">=": lambda x, y: x >= y,
}  # fmt: skip
_FORMS = "PATH OP VALUE, OP one of < <= > >=, VALUE like +10%, -0.5pt, +1GiB or 1.3"


def parse_threshold(text: str, rows: tuple[Row, ...]) -> Threshold:
    """`text` as a Threshold on one of `rows`' paths; InputError in one line otherwise."""
    from replay._units import parse_bytes, parse_duration
    from replay.errors import ReplayError

    match = _THRESHOLD.match(text)
    if match is None:
        raise InputError(f"--fail-on {text!r}: not a threshold ({_FORMS})")
    path, op, raw = match["path"], match["op"], match["value"]
    row = next((r for r in rows if r.path == path), None)
    if row is None:
        near = [r.path for r in rows if r.path.split("[")[0] == path.split("[")[0]][:5]
        hint = f" (these have: {', '.join(near)})" if near else " (see docs/diff.md)"
        raise InputError(f"--fail-on {text!r}: no answer {path!r} in these folders{hint}")
    if row.unit == "text":
        raise InputError(f"--fail-on {text!r}: {path} is text, not a number")
    signed = raw[0] in "+-"
    try:
        if raw.endswith("%"):
            measure, value = "relative", float(raw[:-1]) / 100
        elif raw.endswith("pt"):
            if row.unit != "ratio":
                raise InputError(
                    f"--fail-on {text!r}: pt (points) is for ratios; {path} is in {row.unit}"
                )
            measure, value = "points", float(raw[:-2]) / 100
        else:
            measure = "change" if signed else "value"
            body = raw[1:] if signed else raw
            if row.unit == "bytes":
                value = float(parse_bytes(body, "threshold"))
            elif row.unit == "s":
                value = parse_duration(body, "threshold")
            else:
                value = float(body)
            value = -value if raw[0] == "-" else value
    except InputError:
        raise
    except (ValueError, ReplayError):
        raise InputError(f"--fail-on {text!r}: {raw!r} is not a value ({_FORMS})") from None
    if not math.isfinite(value):
        raise InputError(f"--fail-on {text!r}: {raw!r} is not a finite value")
    return Threshold(text.strip(), path, op, measure, value)


def broken(threshold: Threshold, row: Row) -> str | None:
    """Why `threshold` breaks on `row`, in words; None when it holds."""
    if row.a is None and row.b is None:
        return None
    if row.b is None or (row.a is None and threshold.measure != "value"):
        side = "B" if row.b is None else "A"
        return f"{threshold.text}: {row.path} has no value in {side}"
    if threshold.measure == "value":
        measured: float | None = float(row.b)
    elif threshold.measure == "relative":
        measured = row.relative
        if measured is None:  # A is 0: any change is an infinite relative change
            change = row.change or 0.0
            measured = 0.0 if change == 0 else math.copysign(math.inf, change)
    else:
        measured = row.change
    assert measured is not None
    if _OPS[threshold.op](measured, threshold.value):
        return f"{threshold.text}: {_measured(threshold, row, measured)}"
    return None


def _measured(threshold: Threshold, row: Row, measured: float) -> str:
    if threshold.measure == "relative":
        return (
            f"changed by {signed_hundredths(measured)}% ({format_value(row.a, row.unit)} to "
            f"{format_value(row.b, row.unit)})"
        )
    if threshold.measure == "points":
        return (
            f"changed by {signed_hundredths(measured)} pt ({format_value(row.a, row.unit)} to "
            f"{format_value(row.b, row.unit)})"
        )
    if threshold.measure == "change":
        return f"changed by {format_change(row)}"
    return f"is {format_value(row.b, row.unit)}"


def check(result: Diff, texts: list[str]) -> tuple[list[Threshold], list[str]]:
    """The thresholds parsed (all of them first: a bad one is an error before any is
    judged) and the messages of those that break."""
    thresholds = [parse_threshold(t, result.rows) for t in texts]
    messages = []
    for t in thresholds:
        row = result.row(t.path)
        assert row is not None
        why = broken(t, row)
        if why is not None:
            messages.append(why)
    return thresholds, messages


# --- the user's units ---------------------------------------------------------------------


def signed_hundredths(fraction: float) -> str:
    """100 x `fraction` with its sign, 3 significant digits, never an exponent (`+25`,
    `-3.47`, `+1,157`): a change in % or points."""
    value = 100 * fraction
    return f"{value:+,.0f}" if math.isfinite(value) and abs(value) >= 1000 else f"{value:+.3g}"


def format_value(value: Value, unit: str) -> str:
    from replay._units import format_bytes, format_duration

    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if unit == "bytes":
        return format_bytes(value)
    if unit == "s":
        return format_duration(value)
    if unit == "ratio":
        # a ratio past 1 (a checkpoint overhead over the training time) reads as a multiple
        return f"{100 * value:.2f}%" if abs(value) <= 1 else f"{value:.3f}×"
    if unit == "J":
        return f"{value:.4g} J"
    if unit == "x":
        return f"{value:.3f}×"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.4g}"


def format_change(row: Row) -> str:
    """The change in the unit's own words: points for ratios, signed sizes and times,
    with the relative change beside where A is not 0."""
    from replay._units import format_bytes, format_duration

    change = row.change
    if change is None:
        if row.a is None and row.b is not None:
            return "only in B"
        if row.b is None and row.a is not None:
            return "only in A"
        return "changed" if row.changed else ""
    if change == 0:
        return "0"
    sign = "+" if change > 0 else "-"
    if row.unit == "ratio":
        sides = [abs(float(v)) for v in (row.a, row.b) if isinstance(v, int | float)]
        if max(sides) <= 1:
            return f"{100 * change:+.2f} pt"
        text = f"{sign}{abs(change):.3f}×"  # past 1 the values read as multiples
    elif row.unit == "bytes":
        text = f"{sign}{format_bytes(abs(change))}"
    elif row.unit == "s":
        text = f"{sign}{format_duration(abs(change))}"
    else:
        text = f"{sign}{format_value(abs(change), row.unit)}"
    relative = row.relative
    return text if relative is None else f"{text} ({signed_hundredths(relative)}%)"


def to_json(result: Diff, thresholds: list[Threshold], messages: list[str]) -> dict[str, Any]:
    """The diff as `--json` prints it."""
    document = {
        "kind": result.kind,
        "a": str(result.a),
        "b": str(result.b),
        "answers": [
            {
                "path": r.path,
                "unit": r.unit,
                "a": r.a,
                "b": r.b,
                "change": r.change,
                "relative_change": r.relative,
                "changed": r.changed,
            }
            for r in result.rows
        ],
        "thresholds": [t.text for t in thresholds],
        "broken": messages,
    }
    return stamp("diff", document)


__all__ = [
    "KINDS",
    "PLAN_ANSWERS",
    "RUN_ANSWERS",
    "UNITS",
    "Answer",
    "Diff",
    "Row",
    "Threshold",
    "answers",
    "broken",
    "check",
    "diff",
    "folder_kind",
    "format_change",
    "format_value",
    "parse_threshold",
    "signed_hundredths",
    "to_json",
]  # fmt: skip
