"""A sharding plan as data, and its JSON document: each table's sharding type, ranks and
optional explicit blocks (`replay.system.sharding` says what each type means, resolves a
plan against a workload and a cluster, and routes keys).

An entry may say where its rows live, ``"kernel"`` (`hbm`, `uvm-caching`, `uvm`, `ssd`:
TorchRec's `fused`, `fused_uvm_caching`, `fused_uvm`, `key_value`; chosen and priced by
`replay/engine/kernels.py`), and a cached kernel its ``"cache_load_factor"`` (0 < clf <
1, TorchRec's `CacheParams.load_factor`); an unknown kernel is a one-line error.

The JSON document (read by `plan_from_json` / `read_plan`, written by `to_json`):

    {"tables": [{"table": "C1", "type": "row-wise", "ranks": [0, 1, 2, 3]},
                {"table": "C2", "type": "table-wise", "ranks": [5]},
                {"table": "C3", "type": "column-wise", "ranks": [6, 7],
                 "shards": [[0, 96], [96, 128]]}],
     "source": "optional words on what produced the plan"}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay._files import SHARDING_PLAN, read_json
from replay._schema import VERSION_KEY, check_version
from replay.errors import ConfigError
from replay.system.sharding_rules import PLAN_TYPES
from replay.system.spec import KERNELS


@dataclass(frozen=True)
class TableShape:
    """One embedding table as the plan sees it."""

    name: str
    rows: int
    dim: int


def table_shapes(
    names: Sequence[str], rows: Sequence[int], dim: int | Sequence[int]
) -> tuple[TableShape, ...]:
    """Tables from parallel sequences (`dim`: one for all, or one per table)."""
    dims = [int(dim)] * len(names) if isinstance(dim, int | np.integer) else list(dim)
    return tuple(
        TableShape(str(n), int(r), int(d)) for n, r, d in zip(names, rows, dims, strict=True)
    )


@dataclass(frozen=True)
class TableSharding:
    """One table's entry: its sharding type, its ranks (in shard order) and, optionally,
    explicit half-open row (row-wise, table-row-wise) or column (column-wise) ranges, one
    per rank, in place of the even rule."""

    table: str
    type: str
    ranks: tuple[int, ...]
    shards: tuple[tuple[int, int], ...] | None = None
    rows: int | None = None  # the table's shape (a resolved plan says it; None: unsaid)
    dim: int | None = None
    # where its rows live (`KERNELS`, replay/engine/kernels.py; None: unsaid) and a cached
    # kernel's load factor (cache rows / rows; None: not cached or unsaid)
    kernel: str | None = None
    cache_load_factor: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"table": self.table, "type": self.type, "ranks": list(self.ranks)}
        if self.shards is not None:
            out["shards"] = [list(s) for s in self.shards]
        if self.rows is not None:
            out["rows"] = self.rows
        if self.dim is not None:
            out["dim"] = self.dim
        if self.kernel is not None:
            out["kernel"] = self.kernel
        if self.cache_load_factor is not None:
            out["cache_load_factor"] = self.cache_load_factor
        return out


@dataclass(frozen=True)
class ShardingPlan:
    """A plan: one `TableSharding` per table (`source`: what produced it, free text;
    `world_size`, `gpus_per_node`: the cluster it is for, None: unsaid;
    `torchrec_executable`: whether
    TorchRec's training path executes it as planned, None: not resolved, with the reason
    when it does not)."""

    tables: tuple[TableSharding, ...]
    source: str = ""
    world_size: int | None = None
    gpus_per_node: int | None = None
    torchrec_executable: bool | None = None
    torchrec_executable_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The document `plan_from_json` reads (the run folder's `sharding.json`)."""
        out: dict[str, Any] = {"tables": [t.to_json() for t in self.tables]}
        if self.source:
            out["source"] = self.source
        for key in ("world_size", "gpus_per_node"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.torchrec_executable is not None:
            out["torchrec_executable"] = self.torchrec_executable
            if not self.torchrec_executable:
                out["torchrec_executable_reason"] = self.torchrec_executable_reason
        return out


# -- JSON -------------------------------------------------------------------------------

_ENTRY_KEYS = ("table", "type", "ranks", "shards", "rows", "dim", "kernel", "cache_load_factor")
CACHED_KERNELS = ("uvm-caching", "ssd")  # kernels with a cache in HBM (a load factor)
_PLAN_KEYS = (
    VERSION_KEY, "tables", "source", "world_size", "gpus_per_node", "torchrec_executable",
    "torchrec_executable_reason",
)  # fmt: skip


def _int(value: Any, where: str | Path, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {what} must be a whole number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: {what} must not be negative, got {value}")
    return value


def _entry_from_json(item: Any, where: str) -> TableSharding:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected an object with table, type and ranks, got {item!r}")
    unknown = sorted(set(item) - set(_ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_ENTRY_KEYS)})")
    for key in ("table", "type", "ranks"):
        if key not in item:
            raise ConfigError(f"{where}: missing {key!r}")
    name, kind, ranks = item["table"], item["type"], item["ranks"]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'table' must be a table's name, got {name!r}")
    where = f"{where} ({name!r})"
    if kind not in PLAN_TYPES:
        raise ConfigError(f"{where}: unknown type {kind!r} (types: {', '.join(PLAN_TYPES)})")
    if not isinstance(ranks, list) or not ranks:
        raise ConfigError(f"{where}: 'ranks' must be a non-empty list of ranks, got {ranks!r}")
    ranks_t = tuple(_int(r, where, "a rank") for r in ranks)
    shards = None
    if "shards" in item:
        raw = item["shards"]
        if not isinstance(raw, list) or not all(isinstance(s, list) and len(s) == 2 for s in raw):
            raise ConfigError(f"{where}: 'shards' must be a list of [start, stop] pairs")
        shards = tuple(
            (_int(a, where, "a shard bound"), _int(b, where, "a shard bound")) for a, b in raw
        )
    rows, dim = (_int(item[k], where, k) if k in item else None for k in ("rows", "dim"))
    kernel, clf = item.get("kernel"), item.get("cache_load_factor")
    if kernel is not None and kernel not in KERNELS:
        raise ConfigError(f"{where}: unknown kernel {kernel!r} (kernels: {', '.join(KERNELS)})")
    if clf is not None:
        if kernel not in CACHED_KERNELS:
            raise ConfigError(
                f"{where}: 'cache_load_factor' applies to a cached kernel "
                f"({', '.join(CACHED_KERNELS)}), not {kernel!r}"
            )
        if isinstance(clf, bool) or not isinstance(clf, int | float) or not 0 < clf < 1:
            raise ConfigError(
                f"{where}: 'cache_load_factor' must be a number in (0, 1) (TorchRec's "
                f"CacheParams.load_factor), got {clf!r}"
            )
        clf = float(clf)
    return TableSharding(name, kind, ranks_t, shards, rows, dim, kernel, clf)


def plan_from_json(data: Any, where: str | Path = "sharding plan") -> ShardingPlan:
    """The plan a parsed JSON document holds; a one-line `ConfigError` naming `where`
    and the entry for anything malformed. Names, ranks and coverage are checked against
    the workload and the cluster by `resolve_plan`."""
    if not isinstance(data, dict):
        raise ConfigError(
            f'{where}: expected an object {{"tables": [...]}}, got {type(data).__name__}'
        )
    unknown = sorted(set(data) - set(_PLAN_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_PLAN_KEYS)})")
    check_version("sharding", data, where, ConfigError)
    tables = data.get("tables")
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: 'tables' must be a list of {{table, type, ranks}} entries")
    source = data.get("source", "")
    reason = data.get("torchrec_executable_reason", "")
    if not isinstance(source, str) or not isinstance(reason, str):
        raise ConfigError(f"{where}: 'source' and 'torchrec_executable_reason' must be strings")
    label = data.get("torchrec_executable")
    if label is not None and not isinstance(label, bool):
        raise ConfigError(f"{where}: 'torchrec_executable' must be true or false")
    world, per_node = (data.get(k) for k in ("world_size", "gpus_per_node"))
    for key, value in (("world_size", world), ("gpus_per_node", per_node)):
        if value is not None and _int(value, where, key) < 1:
            raise ConfigError(f"{where}: {key} must be positive")
    entries = tuple(_entry_from_json(t, f"{where}: tables[{i}]") for i, t in enumerate(tables))
    return ShardingPlan(entries, source, world, per_node, label, reason if label is False else "")


def read_plan(path: str | Path) -> ShardingPlan:
    """The plan in the JSON file `path` (untrusted: every failure is one ConfigError)."""
    path = Path(path)
    # regular files only, of at most SHARDING_PLAN's limit: a FIFO or /dev/zero is refused
    document = read_json(
        path, SHARDING_PLAN, ConfigError, noun="sharding plan", bad="not a sharding plan (JSON)"
    )
    return plan_from_json(document, path)


__all__ = [
    "CACHED_KERNELS",
    "ShardingPlan",
    "TableShape",
    "TableSharding",
    "plan_from_json",
    "read_plan",
    "table_shapes",
]
