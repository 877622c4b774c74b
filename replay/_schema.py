"""Versioned JSON documents: each file replay writes carries `schema_version`, and its
shape is one typed definition (`replay._schema_docs`) from which a JSON Schema (draft
2020-12) is generated and shipped in `replay/schemas/`.

This module is the cheap part every reader imports (typing only): the current version of
each document (`VERSIONS`), the versions a reader accepts (`ACCEPTED`) and
`check_version` (one line naming the file where a version is not one this replay
reads); writers stamp a document with `replay._schema_stamp.stamp`. A document without
`schema_version` was written before versions existed; it has the shape of its first
version less that key, and is read as that version (`UNVERSIONED`).

Definitions are TypedDicts whose fields may be `Annotated[T, "meaning", Bounds(...)]`;
`json_schema` turns one into a JSON Schema: a TypedDict is an object of exactly its
keys (`NotRequired` ones optional), `dict[str, T]` an object of any keys, `list[T]` an
array, `T | None` either, `Literal` an enum, `Any` anything. A key's unit is its name's
suffix (`_bytes`, `_s`, `_j`, ...), as everywhere in replay (`unit_of`).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

from replay.errors import ReplayError

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
VERSION_KEY = "schema_version"

# the version each document is written at; a change of a definition's shape bumps it
# (tests/test_schema.py keeps a fingerprint of each generated schema per version)
VERSIONS: dict[str, int] = {
    "plan": 1,
    "torchrec": 2,  # torchrec.json's own `version` (replay.plan.torchrec.VERSION)
    "sharding": 1,
    "run-summary": 1,
    "run-config": 1,
    "run-meta": 1,
    "run-workload": 1,
    "compare": 1,
    "sweep": 1,
    "mrc": 1,
    "report-summary": 1,
    "trace-manifest": 1,
    "diff": 1,
}
# the versions each reader of this replay accepts
ACCEPTED: dict[str, frozenset[int]] = {name: frozenset({v}) for name, v in VERSIONS.items()}
# the version a document without `schema_version` is read as (written before versions:
# 1, but torchrec.json, whose own `version` was 2 by then)
UNVERSIONED: dict[str, int] = {"torchrec": 2}


def version_of(name: str, document: Any) -> Any:
    """A document's `schema_version` (`UNVERSIONED`'s where it has none)."""
    if isinstance(document, dict):
        return document.get(VERSION_KEY, UNVERSIONED.get(name, 1))
    return None


def check_version(
    name: str, document: Any, where: object, error: type[ReplayError] = ReplayError
) -> None:
    """`error` in one line when `document` (the file `where`) is of a `schema_version`
    this replay does not read."""
    version = version_of(name, document)
    accepted = ACCEPTED[name]
    if isinstance(version, bool) or not isinstance(version, int) or version not in accepted:
        known = ", ".join(str(v) for v in sorted(accepted))
        raise error(
            f"{where}: schema_version {version!r} of a {name} document is not one this replay "
            f"reads ({known}); write it again with this replay, or read it with the replay "
            "that wrote it"
        )


# TypedDicts whose objects may hold keys beyond those they list (`open_shape`)
OPEN: set[type] = set()


def open_shape(td: Any) -> Any:
    """Marks a definition whose objects may hold more keys than it lists: parts whose keys
    depend on the systems (a policy's counters, a cluster's breakdowns)."""
    OPEN.add(td)
    return td


@dataclass(frozen=True)
class Bounds:
    """A number's range, in an `Annotated` field: `Bounds(0, 1)` is a fraction."""

    minimum: float | None = None
    maximum: float | None = None


FRACTION = Bounds(0, 1)
NONNEGATIVE = Bounds(0)

# a key's unit from its name's last part (the conventions of docs/conventions.md)
UNITS: tuple[tuple[str, str], ...] = (
    ("_bytes_per_s", "bytes per second"),
    ("_bytes_per_row", "bytes per row"),
    ("_bytes_per_batch", "bytes per batch"),
    ("_s_per_batch", "seconds per batch"),
    ("_per_batch_s", "seconds per batch"),
    ("_per_batch_j", "joules per batch"),
    ("_per_s", "per second"),
    ("_bytes", "bytes"),
    ("_ns", "nanoseconds"),
    ("_us", "microseconds"),
    ("_ms", "milliseconds"),
    ("_s", "seconds"),
    ("_j", "joules"),
    ("_w", "watts"),
    ("_gib", "GiB"),
    ("_gbps", "GB/s"),
    ("_sha256", "SHA-256, hex"),
    ("_rows", "rows"),
    ("_batches", "batches"),
    ("_lookups", "lookups"),
)


def unit_of(key: str) -> str:
    """The unit a key's name states (`interval_s`: seconds), or "" where it states none."""
    for suffix, unit in UNITS:
        if key.endswith(suffix) or key == suffix[1:]:
            return unit
    return ""


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _hints(td: Any) -> dict[str, Any]:
    return typing.get_type_hints(td, include_extras=True)


def _required(td: Any) -> frozenset[str]:
    # from the hints, not `__required_keys__`: under `from __future__ import annotations`
    # a TypedDict sees `NotRequired[...]` as a string and counts the key required
    return frozenset(k for k, v in _hints(td).items() if get_origin(v) is not NotRequired)


class _Builder:
    """One schema: nested TypedDicts go in `$defs`, each once, by class name."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def of(self, tp: Any) -> dict[str, Any]:
        origin = get_origin(tp)
        if origin is Annotated:
            base, *meta = get_args(tp)
            out = dict(self.of(base))
            for m in meta:
                if isinstance(m, str):
                    out["description"] = m
                elif isinstance(m, Bounds):
                    target = out
                    if "anyOf" in out:  # T | None: the bound is the number's
                        target = next(a for a in out["anyOf"] if a.get("type") != "null")
                    if m.minimum is not None:
                        target["minimum"] = m.minimum
                    if m.maximum is not None:
                        target["maximum"] = m.maximum
            return out
        if origin in (Required, NotRequired):
            return self.of(get_args(tp)[0])
        if tp is Any:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str:
            return {"type": "string"}
        if origin is Literal:
            return {"enum": list(get_args(tp))}
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in get_args(tp)]}
        if origin in (list, tuple):
            args = get_args(tp)
            return {"type": "array", **({"items": self.of(args[0])} if args else {})}
        if origin is dict or tp is dict:
            args = get_args(tp)
            value = self.of(args[1]) if args else {}
            return {"type": "object", **({"additionalProperties": value} if value else {})}
        if _is_typeddict(tp):
            name = tp.__name__
            if name not in self.defs:
                self.defs[name] = {}  # a placeholder: a definition may refer to itself
                self.defs[name] = self.object(tp)
            return {"$ref": f"#/$defs/{name}"}
        raise TypeError(f"no JSON Schema for {tp!r}")

    def object(self, td: Any) -> dict[str, Any]:
        required = _required(td)
        out: dict[str, Any] = {"type": "object"}
        if td.__doc__ and not td.__doc__.startswith(td.__name__ + "("):
            out["description"] = " ".join(td.__doc__.split())
        out["properties"] = {k: self.of(v) for k, v in _hints(td).items()}
        out["required"] = [k for k in _hints(td) if k in required]
        if td not in OPEN:
            out["additionalProperties"] = False
        return out


def json_schema(name: str, td: Any, *, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of document `name`, at its current version, from
    its definition `td` (a TypedDict); `schema_version` is required and fixed."""
    builder = _Builder()
    body = builder.object(td)
    body["properties"] = {
        VERSION_KEY: {
            "const": VERSIONS[name],
            "description": "the shape of this document; readers refuse versions they do not know",
        },
        **{k: v for k, v in body["properties"].items() if k != VERSION_KEY},
    }
    body["required"] = [VERSION_KEY, *(k for k in body["required"] if k != VERSION_KEY)]
    body.pop("description", None)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": title,
        "description": description,
        **body,
        **({"$defs": dict(sorted(builder.defs.items()))} if builder.defs else {}),
    }


def fields(td: Any, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, JSON type, unit, meaning) for every key of `td`, nested ones as `a.b`
    (a list's items as `a[]`, a map's values as `a.*`): what docs/schemas.md lists."""
    out: list[tuple[str, str, str, str]] = []
    seen: set[Any] = set()

    def walk(td: Any, prefix: str) -> None:
        if td in seen:
            return
        seen.add(td)
        required = _required(td)
        for key, tp in _hints(td).items():
            path = f"{prefix}{key}"
            meaning, inner, unit = "", tp, unit_of(key)
            while True:
                origin = get_origin(inner)
                if origin is Annotated:
                    base, *meta = get_args(inner)
                    meaning = meaning or next((m for m in meta if isinstance(m, str)), "")
                    if any(m == FRACTION for m in meta) and not unit:
                        unit = "fraction"
                    inner = base
                elif origin in (Required, NotRequired):
                    inner = get_args(inner)[0]
                else:
                    break
            kind, nested, suffix = _describe(inner)
            if not meaning and nested is not None and nested.__doc__:
                meaning = " ".join(nested.__doc__.split())
            if key not in required:
                meaning = (meaning + " " if meaning else "") + "(optional)"
            out.append((path, kind, unit, meaning))
            if nested is not None:
                walk(nested, f"{path}{suffix}.")
        seen.discard(td)

    walk(td, prefix)
    return out


def bounded_numbers(td: Any) -> list[tuple[str, bool]]:
    """(key, whether a fraction) for each required key of `td` that is a number with
    bounds (`Bounds`: at least 0, or within [0, 1]) and never null: what a reader checks
    is there, finite and in range before it quotes it."""
    out = []
    required = _required(td)
    for key, tp in _hints(td).items():
        if key not in required or get_origin(tp) is not Annotated:
            continue
        base, *meta = get_args(tp)
        bounds = [m for m in meta if isinstance(m, Bounds)]
        if base in (int, float) and bounds:
            out.append((key, FRACTION in bounds))
    return out


def _describe(tp: Any) -> tuple[str, Any, str]:
    """A type's name in the docs, the TypedDict inside it (if any) and its path suffix."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _describe(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        parts = [_describe(a) for a in get_args(tp)]
        inner = next((p for p in parts if p[1] is not None), ("", None, ""))
        return " or ".join(p[0] for p in parts), inner[1], inner[2]
    if origin in (list, tuple):
        args = get_args(tp)
        kind, nested, suffix = _describe(args[0]) if args else ("any", None, "")
        return f"list of {kind}", nested, "[]" + suffix
    if origin is dict or tp is dict:
        args = get_args(tp)
        kind, nested, suffix = _describe(args[1]) if args else ("any", None, "")
        return f"map to {kind}", nested, ".*" + suffix
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(tp)), None, ""
    if _is_typeddict(tp):
        return ("open object" if tp in OPEN else "object"), tp, ""
    names = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
    if tp is None:
        return "null", None, ""
    return names.get(tp, "any"), None, ""


__all__ = [
    "ACCEPTED",
    "FRACTION",
    "NONNEGATIVE",
    "OPEN",
    "SCHEMA_DIALECT",
    "VERSIONS",
    "VERSION_KEY",
    "Bounds",
    "check_version",
    "fields",
    "json_schema",
    "open_shape",
    "unit_of",
    "version_of",
]
