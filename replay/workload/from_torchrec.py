"""A workload spec with your model's shape: tables, rows, dimensions and features from
TorchRec's configs, the skew from a fitted trace or a preset.

`workload_from_torchrec(configs, batch_size=B)` reads TorchRec's table configs (an
`EmbeddingBagCollection` or `EmbeddingCollection`, whose `embedding_bag_configs()` /
`embedding_configs()` it calls, a list of `EmbeddingBagConfig` / `EmbeddingConfig`, or
plain dicts with their fields, e.g. a JSON file of them) and writes one spec table per
TorchRec table:

- `name`, `rows` = `num_embeddings`, `features` = `feature_names` (TorchRec looks every
  feature of a table up in that one table, so features sharing a table share its rows);
- `pooling`: the sum of the table's features' pooling factors (lookups per sample), each
  from, in order, the `pooling` argument (one number for every feature, or a mapping by
  feature or table name), the entry's `pooling_factors` (TorchRec's
  `ParameterConstraints.pooling_factors`: one per feature), the skew source's table of
  the same name, else 1. Factors that are not whole go to whole lookups per table, each
  the floor or the ceiling of its own, the total the stated total rounded
  (`tbe_config.whole_pooling`), noted;
- `embedding_dim`: the tables' dimension (a spec has one: mixed dimensions give the
  rows-weighted mean, so the tables' bytes are kept to rounding, noted);
- the access model (`alpha`, `hot_shares`, `rank_offset`, `drift`, `reuse` and their
  windows, `mapping`) from the `skew` source's table of the same name, else from its
  typical table (the median of its tables' knobs, without hot values): a preset name
  (e.g. `criteo-kaggle`: its defaults), a `WorkloadSpec` or a spec file (e.g. what
  `replay fit` wrote), or a trace folder (fitted here with `replay fit`'s estimators,
  `replay.workload.fit.fit_trace`: a trace `replay.record` wrote names the model's own
  tables, so every table takes its own fitted skew). A table's hot values are kept where
  its rows hold them.

Checks (each one `ConfigError` line): every entry has a name, a positive
`num_embeddings` and `embedding_dim` and at least one feature; no table name twice, no
feature in two tables; a pooling factor naming a feature or table that is not there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.workload.spec import MAX_POOLING, MAX_ROWS, WorkloadSpec, spec_from_dict

SKEW_KEYS = (
    "alpha", "rank_offset", "drift", "drift_period_batches", "reuse", "reuse_window_batches",
    "mapping",
)  # fmt: skip


@dataclass(frozen=True)
class TableConfig:
    """What a TorchRec table config says that a spec needs."""

    name: str
    rows: int
    dim: int
    features: tuple[str, ...]
    pooling_factors: tuple[float, ...] | None = None
    data_type: str = "FP32"


def _field(entry: Any, key: str) -> Any:
    if isinstance(entry, Mapping):
        return entry.get(key)
    return getattr(entry, key, None)


def _table_config(entry: Any, where: str) -> TableConfig:
    name = _field(entry, "name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: needs a table name ('name')")
    where = f"{where} ({name!r})"
    values = {}
    for key in ("num_embeddings", "embedding_dim"):
        v = _field(entry, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}.{key}: expected a positive whole number, got {v!r}")
        values[key] = v
    if values["num_embeddings"] > MAX_ROWS:
        raise ConfigError(f"{where}.num_embeddings: above the spec's 2^53 rows")
    features = _field(entry, "feature_names")
    if not isinstance(features, list | tuple) or not features:
        raise ConfigError(f"{where}.feature_names: a table needs at least one feature")
    if any(not isinstance(f, str) or not f for f in features):
        raise ConfigError(f"{where}.feature_names: expected names, got {list(features)!r}")
    factors = _field(entry, "pooling_factors")
    if factors is not None:
        if not isinstance(factors, list | tuple) or len(factors) != len(features):
            raise ConfigError(
                f"{where}.pooling_factors: expected one number per feature ({len(features)})"
            )
        factors = tuple(_factor(f, f"{where}.pooling_factors") for f in factors)
    dtype = _field(entry, "data_type")
    dtype = getattr(dtype, "value", dtype)
    return TableConfig(
        name=name, rows=values["num_embeddings"], dim=values["embedding_dim"],
        features=tuple(features), pooling_factors=factors,
        data_type=str(dtype) if dtype is not None else "FP32",
    )  # fmt: skip


def _factor(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or not 0 < value <= MAX_POOLING:
        raise ConfigError(f"{where}: {value!r} is out of range (0, {MAX_POOLING}]")
    return float(value)


def table_configs(configs: Any, where: str = "configs") -> list[TableConfig]:
    """TorchRec's table configs from a collection module, a list of configs or dicts."""
    for method in ("embedding_bag_configs", "embedding_configs"):
        if callable(getattr(configs, method, None)):
            configs = getattr(configs, method)()
            break
    if isinstance(configs, Mapping) and "tables" in configs:
        configs = configs["tables"]
    if isinstance(configs, str | bytes) or not isinstance(configs, Sequence):
        raise ConfigError(
            f"{where}: expected an EmbeddingBagCollection or EmbeddingCollection, or a list "
            "of EmbeddingBagConfig-like entries"
        )
    if not configs:
        raise ConfigError(f"{where}: no tables")
    tables = [_table_config(c, f"{where}[{i}]") for i, c in enumerate(configs)]
    seen: dict[str, str] = {}
    names: set[str] = set()
    for t in tables:
        if t.name in names:
            raise ConfigError(f"{where}: table {t.name!r} appears twice")
        names.add(t.name)
        for f in t.features:
            if f in seen:
                where_f = "twice in" if seen[f] == t.name else f"in {seen[f]!r} and"
                raise ConfigError(f"{where}: feature {f!r} is {where_f} table {t.name!r}")
            seen[f] = t.name
    return tables


def read_torchrec_configs(path: str | Path) -> tuple[list[TableConfig], dict[str, float]]:
    """A JSON file of table configs: a list of entries, or {"tables": [...], "pooling":
    {feature or table: factor}} (`replay._files`: regular files only, its size limit)."""
    from replay._files import TORCHREC_CONFIGS, read_json

    data = read_json(path, TORCHREC_CONFIGS, ConfigError, noun="TorchRec configs file",
                     bad="not TorchRec table configs (JSON)")  # fmt: skip
    pooling: dict[str, float] = {}
    if isinstance(data, dict):
        extra = sorted(set(data) - {"tables", "pooling"})
        if extra or "tables" not in data:
            raise ConfigError(
                f"{path}: expected a list of table configs or an object with 'tables' (and "
                f"'pooling'), found keys {sorted(data)}"
            )
        given = data.get("pooling", {})
        if not isinstance(given, dict):
            raise ConfigError(f"{path}.pooling: expected {{feature: lookups per sample}}")
        pooling = {str(k): _factor(v, f"{path}.pooling.{k}") for k, v in given.items()}
    return table_configs(data, str(path)), pooling


def _skew_spec(skew: Any) -> tuple[WorkloadSpec, str]:
    """The spec whose tables lend their access model, and words for where it came from."""
    from replay.workload.fit import FitResult

    if isinstance(skew, WorkloadSpec):
        return skew, f"the spec {skew.name!r}"
    if isinstance(skew, FitResult):
        return skew.spec, f"replay fit of {Path(skew.trace).name}"
    if isinstance(skew, str | PathLike):
        path = Path(skew)
        if path.is_dir():
            from replay.trace.reader import open_trace
            from replay.workload.fit import fit_trace

            result = fit_trace(open_trace(path))
            return result.spec, f"replay fit of the trace {path.name}"
        from replay.workload.generator import resolve_workload

        spec = resolve_workload(str(skew))
        return spec, (f"the preset {skew}" if not path.suffix else f"the spec {path.name}")
    raise ConfigError(
        f"skew: expected a preset name, a spec, a spec file or a trace folder, got {skew!r}"
    )


def _typical(spec: WorkloadSpec) -> dict[str, Any]:
    """The median table of `spec` (its knobs' medians, the commonest mapping)."""
    out: dict[str, Any] = {}
    for key in SKEW_KEYS:
        values = [getattr(t, key) for t in spec.tables]
        if key == "mapping":
            out[key] = max(sorted(set(values)), key=values.count)
        elif key.endswith("_batches"):
            out[key] = int(statistics.median_low(values))
        else:
            out[key] = float(statistics.median(values))
    return out


def spec_from_torchrec(
    configs: Any,
    *,
    batch_size: int,
    pooling: int | float | Mapping[str, float] | None = None,
    skew: Any = "criteo-kaggle",
    batches: int | None = None,
    seed: int = 0,
    name: str = "torchrec-model",
) -> tuple[WorkloadSpec, list[str]]:
    """`workload_from_torchrec`'s spec and its notes (what was rounded or assumed)."""
    tables = configs if _are_tables(configs) else table_configs(configs)
    features = {f: t.name for t in tables for f in t.features}
    by_feature: dict[str, float] = {}
    if isinstance(pooling, Mapping):
        for key, value in pooling.items():
            v = _factor(value, f"pooling[{key!r}]")
            if key in features:
                by_feature[key] = v
            elif any(t.name == key for t in tables):
                table = next(t for t in tables if t.name == key)
                for f in table.features:
                    by_feature[f] = v / len(table.features)
            else:
                raise ConfigError(
                    f"pooling: feature {key!r} names no table (the tables' features: "
                    f"{', '.join(sorted(features)[:8])}{', ...' if len(features) > 8 else ''})"
                )
    elif pooling is not None:
        v = _factor(pooling, "pooling")
        by_feature = dict.fromkeys(features, v)
    source, said = _skew_spec(skew)
    lent = {t.name: t for t in source.tables}
    typical = _typical(source)
    notes: list[str] = []
    exact: list[list[float]] = []
    for t in tables:
        own = lent.get(t.name)
        factors = []
        for i, f in enumerate(t.features):
            if f in by_feature:
                factors.append(by_feature[f])
            elif t.pooling_factors is not None:
                factors.append(t.pooling_factors[i])
            elif own is not None:
                factors.append(own.pooling / len(t.features))
            else:
                factors.append(1.0)
        exact.append(factors)
    from replay.workload.tbe_config import whole_pooling

    totals = [math.fsum(f) for f in exact]
    whole = whole_pooling(totals)
    if any(abs(w - x) >= 0.005 for w, x in zip(whole, totals, strict=True)):
        notes.append(
            f"pooling factors are not whole: {sum(whole)} lookups per sample written for "
            f"{math.fsum(totals):.3f} (each table the floor or the ceiling of its own)"
        )
    entries = []
    matched = 0
    for t, factors, total in zip(tables, exact, whole, strict=True):
        own = lent.get(t.name)
        knobs = {k: getattr(own, k) for k in SKEW_KEYS} if own is not None else dict(typical)
        matched += own is not None
        hot = list(own.hot_shares) if own is not None and len(own.hot_shares) < t.rows else []
        split = whole_pooling(factors)
        entries.append({
            "name": t.name, "rows": t.rows, **knobs,
            **({"hot_shares": hot} if hot else {}),
            "pooling": total, "features": list(t.features),
            **({"feature_pooling": split} if len(split) > 1 and sum(split) == total else {}),
        })  # fmt: skip
    if matched < len(tables):
        notes.append(
            f"{len(tables) - matched} of {len(tables)} tables have no table of their name in "
            f"{said}: they take its typical table's skew (alpha {typical['alpha']:g})"
        )
    dims = {t.dim for t in tables}
    if len(dims) == 1:
        dim = dims.pop()
    else:
        rows = sum(t.rows for t in tables)
        dim = max(round(math.fsum(t.rows * t.dim for t in tables) / rows), 1)
        notes.append(
            f"tables of {len(dims)} dimensions ({min(dims)}-{max(dims)}): embedding_dim is "
            f"their rows-weighted mean, {dim} (a spec has one dimension)"
        )
    types = sorted({t.data_type for t in tables} - {"FP32"})
    if types:
        notes.append(f"data types {', '.join(types)}: a spec's rows are sized as FP32")
    data = {
        "name": name,
        "source": f"TorchRec configs ({len(tables)} tables), skew from {said}",
        "batch_size": batch_size,
        "batches": batches if batches is not None else source.batches,
        "seed": seed,
        "embedding_dim": dim,
        "update": {
            "rule": source.update.rule,
            "accumulate_batches": source.update.accumulate_batches,
        },
        "tables": entries,
    }
    return spec_from_dict(data, where="spec from TorchRec configs"), notes


def _are_tables(configs: Any) -> bool:
    return (
        isinstance(configs, list)
        and bool(configs)
        and all(isinstance(c, TableConfig) for c in configs)
    )


def workload_from_torchrec(
    configs: Any,
    *,
    batch_size: int,
    pooling: int | float | Mapping[str, float] | None = None,
    skew: Any = "criteo-kaggle",
    batches: int | None = None,
    seed: int = 0,
    name: str = "torchrec-model",
) -> WorkloadSpec:
    """A workload spec with the model's tables, rows, dimension and features (module
    docstring). `replay.spec_to_toml(spec)` is its TOML, for `replay plan --workload`
    and `replay generate --spec`."""
    spec, _ = spec_from_torchrec(
        configs, batch_size=batch_size, pooling=pooling, skew=skew, batches=batches,
        seed=seed, name=name,
    )  # fmt: skip
    return spec


__all__ = ["TableConfig", "read_torchrec_configs", "spec_from_torchrec", "workload_from_torchrec"]
