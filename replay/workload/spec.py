"""Workload specifications: frozen dataclasses, loaded from TOML or presets, validated.

A workload is a set of embedding tables, each with its own access model (DESIGN
section 4), a batch size, a number of batches, a seed and an update rule.

TOML layout (every key optional except `tables`; `[defaults]` applies to every table
that does not set the key itself)::

    name = "my-workload"
    batch_size = 2048          # samples per batch
    batches = 1000
    seed = 0
    embedding_dim = 16
    dataset_samples = 45840617 # samples in one epoch of the data (`replay plan --epochs`)

    [defaults]
    alpha = 1.05               # bounded power law p(k) ~ k^-alpha over ranks 1..rows
    rank_offset = 0.0          # q: p(k) ~ (k + q)^-alpha (Zipf-Mandelbrot), a flatter head
    hot_shares = []            # exact shares of the lookups on ranks 1, 2, ... (hot values)
    drift = 0.0                # share of a table's rows the popularity ranking moves per batch
    drift_period_batches = 1   # apply the drift in steps of this many batches (e.g. a day)
    reuse = 0.0                # probability that a lookup repeats one of the recent window
    reuse_window_batches = 1
    pooling = 1                # lookups per sample (multi-hot size)
    mapping = "permuted"       # rank -> row: "permuted" (hashed ids) or "contiguous"

    [update]
    rule = "sgd"               # the embedding optimizer: sgd | rowwise-adagrad | adam; every
                               # step writes the rows its batches looked up (and their state)
    accumulate_batches = 1     # gradient accumulation: a step every k batches

    [[tables]]
    name = "C1"
    rows = 1460
    frozen = false             # a frozen table is looked up but never updated
    features = ["C1"]          # optional: the model's features that look this table up
    feature_pooling = [1]      # optional: each feature's lookups per sample (sum = pooling)

The hot values (`hot_shares` = [s_1, ..., s_j], j <= `MAX_HOT_SHARES` and below rows,
each in [0, 1), their sum below 1): real categorical features put a fixed share of their
lookups on a few values (the empty value, a default id, a dominant campaign) on top of a
long tail, so rank i <= j takes exactly s_i of the table's lookups and the other ranks
share the rest by the power law over ranks j + 1..rows:

    p(k) = s_k for k <= j,   p(k) = (1 - s_1 - ... - s_j) k^-alpha / H_(j+1) for k > j,

H_(j+1) = sum_(k=j+1)^rows k^-alpha. This is the model `replay fit` tests and estimates
(`replay.workload.fit_stats`: the shares are the observed shares of the top rows, alpha
the exponent of the rest), and a share is what one reads off a real table ("the empty
value is 46% of C14"), whatever alpha and rows. Hot ranks are ranks like any other: the
same rank -> row permutation, and drift moves them as it moves every rank. Trailing zero
shares are dropped, so [] (or [0.0]) is the plain power law, and a spec without hot
values is the spec it was before the knob existed: `to_dict` (manifests, digests, TOML)
leaves the key out, and the generator draws the same lookups bit for bit. (The first
version of the knob, `hot_share` = h, put h on rank 1 on top of its power-law share; it
is refused with a pointer here.) A spec holds up to `MAX_HOT_SHARES` (20) hot values,
the heavy hitters FBGEMM's TBE reporter writes (`kHeavyHitterMaxEntries`,
`replay.workload.tbe_config`); `replay fit` tests at most `MAX_HOT_VALUES` (3) ranks of a
trace.

Features sharing a table (TorchRec's `feature_names`, FBGEMM's `feature_table_map`): a
table's lookups are what all its features look up, so `pooling` is their total per
sample and the access model is the table's. `features` names them (each name once in a
spec) and `feature_pooling` splits `pooling` among them (whole lookups, each at least 1,
summing to `pooling`); both are optional and change no lookup: the trace keeps tables,
not features. A spec without them has the manifest, digest and TOML it had before.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from replay._files import SPEC, read_text
from replay._memory import MAX_ROW_SPACE
from replay._toml import parse_toml
from replay.errors import ConfigError, unknown_key

MAPPINGS = ("permuted", "contiguous")
# the embedding optimizer (FBGEMM's EXACT_SGD, EXACT_ROWWISE_ADAGRAD, ADAM): which rows a
# step writes is the same for all three; the state each keeps (replay/system/optimizer.py)
# counts in memory, checkpoints and what a row weighs; a system's `model.optimizer` combines
UPDATE_RULES = ("sgd", "rowwise-adagrad", "adam")
# Rows of one table: the generator draws a popularity rank as a float64 (inversion of the
# power law, `unit(key) * rows` for the uniform law), which holds every integer only up
# to 2^53; above it some rows could never be drawn. (Traces keep 2^63 - 1: uint64 row ids
# in int64 flat keys, `replay.trace.format.MAX_TABLE_ROWS`.)
MAX_ROWS = 2**53
MAX_ROWS_TEXT = "2^53"
MAX_ALPHA = 10.0
MAX_POOLING = 1 << 20
# q of p(k) ~ (k + q)^-alpha: a head of up to about q equally likely ranks; beyond 2^40 the
# law is uniform over any table the generator can hold in a batch
MAX_RANK_OFFSET = float(2**40)
# hot values that `replay fit` tests per table: real tables show one to three (issue 28)
MAX_HOT_VALUES = 3
# hot values a spec may hold per table: FBGEMM's TBE reporter writes up to 20 heavy hitters
# (indices_estimator.h, kHeavyHitterMaxEntries_); every hot rank must be a head rank of each
# generator (the alias head holds 4,096 ranks, `sampler.HEAD_RANKS`)
MAX_HOT_SHARES = 20


@dataclass(frozen=True)
class TableSpec:
    """One embedding table and its access model."""

    name: str
    rows: int
    alpha: float = 1.05
    # the exact shares of the lookups on ranks 1..j; the power law shares the rest
    hot_shares: tuple[float, ...] = ()
    # q of the Zipf-Mandelbrot law p(k) ~ (k + q)^-alpha; 0 is the plain power law
    rank_offset: float = 0.0
    drift: float = 0.0
    drift_period_batches: int = 1
    reuse: float = 0.0
    reuse_window_batches: int = 1
    pooling: int = 1
    mapping: str = "permuted"
    frozen: bool = False
    # the model's features that look this table up (names only: lookups are per table)
    features: tuple[str, ...] = ()
    # each feature's lookups per sample, summing to pooling; () when not said
    feature_pooling: tuple[int, ...] = ()


@dataclass(frozen=True)
class UpdateRule:
    """How optimizer steps turn lookups into row updates."""

    rule: str = "sgd"
    accumulate_batches: int = 1


@dataclass(frozen=True)
class WorkloadSpec:
    """A whole workload: tables, batch shape, seed and update rule."""

    name: str
    tables: tuple[TableSpec, ...]
    batch_size: int = 128
    batches: int = 100
    seed: int = 0
    embedding_dim: int = 16
    update: UpdateRule = field(default_factory=UpdateRule)
    source: str = ""  # where the numbers come from (presets cite their origin)
    # samples in one epoch of the dataset the workload models (`replay plan --epochs`);
    # None: not said, and `to_dict` leaves the key out, so a spec without it has the
    # manifest, digest and TOML it had before the field existed
    dataset_samples: int | None = None

    @property
    def lookups_per_batch(self) -> int:
        return self.batch_size * sum(t.pooling for t in self.tables)

    @property
    def lookups(self) -> int:
        return self.batches * self.lookups_per_batch

    @property
    def total_rows(self) -> int:
        return sum(t.rows for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/TOML-ready) that `spec_from_dict` turns back into this spec."""
        # `asdict` of the whole spec would convert every table too, which `_table_dict`
        # does again (meta-2021's 856 tables: 0.25 s a call, twice on `replay run`'s path)
        data = {
            f.name: [_table_dict(t) for t in self.tables] if f.name == "tables"
            else _plain(getattr(self, f.name))
            for f in fields(self)
        }  # fmt: skip
        if data["dataset_samples"] is None:
            del data["dataset_samples"]
        return data

    def with_overrides(
        self,
        *,
        batches: int | None = None,
        batch_size: int | None = None,
        seed: int | None = None,
        alpha: float | None = None,
        drift: float | None = None,
        reuse: float | None = None,
    ) -> WorkloadSpec:
        """A validated copy with the CLI's overrides applied (per-table knobs to every table)."""
        data = self.to_dict()
        for key, value in (("batches", batches), ("batch_size", batch_size), ("seed", seed)):
            if value is not None:
                data[key] = value
        for key, knob in (("alpha", alpha), ("drift", drift), ("reuse", reuse)):
            if knob is not None:
                for table in data["tables"]:
                    table[key] = knob
        try:
            return spec_from_dict(data, where="overrides")
        except ConfigError as exc:  # name the option: "--batches: 0 is out of range ..."
            raise ConfigError(_OVERRIDE_KEY.sub(_option_name, str(exc))) from None


_TABLE_FIELDS = tuple(f.name for f in fields(TableSpec))


def _plain(value: Any) -> Any:
    """A spec field as `asdict` gives it (the fields besides the tables are scalars and
    small dataclasses)."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def _table_dict(table: TableSpec) -> dict[str, Any]:
    """A table as plain data; without `hot_shares` when there are none, so that a spec
    without hot values has the manifest, digest and TOML it had before the knob existed."""
    # the fields are scalars and tuples of scalars: `asdict`'s recursion would copy them
    data = {name: getattr(table, name) for name in _TABLE_FIELDS}
    if data["hot_shares"]:
        data["hot_shares"] = list(data["hot_shares"])
    else:
        del data["hot_shares"]
    if data["rank_offset"] == 0.0:
        del data["rank_offset"]
    for key in ("features", "feature_pooling"):
        if data[key]:
            data[key] = list(data[key])
        else:
            del data[key]
    return data


_OVERRIDE_KEY = re.compile(
    r"^overrides\.(?:tables\[\d+\]\.)?(batch_size|batches|seed|alpha|drift|reuse):"
)


def _option_name(match: re.Match[str]) -> str:
    return "--" + match.group(1).replace("_", "-") + ":"


# -- validation -----------------------------------------------------------------------


def _check_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    if "hot_share" in data and "hot_shares" in allowed:
        raise ConfigError(
            f"{where}: 'hot_share' (one hot value on top of the power law) is replaced by"
            " hot_shares = [s_1, ...], the exact shares of ranks 1, 2, ... (issue 28)"
        )
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise unknown_key(where, unknown[0], allowed)


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range [{lo}, {hi}]")
    return value


def _rows(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if value < 1:
        raise ConfigError(f"{where}: {value} is out of range [1, {MAX_ROWS}]")
    if value > MAX_ROWS:
        raise ConfigError(
            f"{where}: {value} is above the limit of {MAX_ROWS_TEXT} rows that the workload "
            "generator can draw (it draws popularity ranks as float64 numbers)"
        )
    return value


def _float(value: Any, where: str, lo: float, hi: float, *, hi_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        raise ConfigError(f"{where}: {value} is out of range [{lo}, {hi}]") from None
    if math.isnan(value) or math.isinf(value):
        raise ConfigError(f"{where}: must be a finite number, got {value}")
    if value < lo or value > hi or (hi_open and value >= hi):
        bracket = ")" if hi_open else "]"
        raise ConfigError(f"{where}: {value} is out of range [{lo}, {hi}{bracket}")
    return value


def _hot_shares(merged: dict[str, Any], where: str) -> tuple[float, ...]:
    """The table's hot values, trailing zeros dropped: each in [0, 1), their sum below 1,
    at most MAX_HOT_VALUES of them and fewer than its rows."""
    value = merged.get("hot_shares", [])
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}.hot_shares: expected a list of numbers, got {value!r}")
    shares = [
        _float(v, f"{where}.hot_shares[{i}]", 0.0, 1.0, hi_open=True) for i, v in enumerate(value)
    ]
    while shares and shares[-1] == 0.0:
        shares.pop()
    if len(shares) > MAX_HOT_SHARES:
        raise ConfigError(f"{where}.hot_shares: at most {MAX_HOT_SHARES} hot values")
    rows = merged.get("rows")
    if shares and isinstance(rows, int) and len(shares) >= rows:
        raise ConfigError(
            f"{where}.hot_shares: {len(shares)} hot values on {rows} rows leave no rank to the"
            " power law"
        )
    total = math.fsum(shares)
    if total >= 1.0:
        raise ConfigError(f"{where}.hot_shares: the shares sum to {total}, not below 1")
    return tuple(shares)


def _str(value: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if choices is not None and value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


_TABLE_KEYS = {f.name for f in fields(TableSpec)}
_DEFAULT_KEYS = _TABLE_KEYS - {"name", "rows", "frozen", "features", "feature_pooling"}
_UPDATE_KEYS = {f.name for f in fields(UpdateRule)}
_SPEC_KEYS = {f.name for f in fields(WorkloadSpec)} | {"defaults"}


def _table(data: Any, defaults: dict[str, Any], where: str) -> TableSpec:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys")
    _check_keys(data, _TABLE_KEYS, where)
    merged = {**defaults, **data}
    for required in ("name", "rows"):
        if required not in merged:
            raise ConfigError(f"{where}: missing required key {required!r}")
    frozen = merged.get("frozen", False)
    if not isinstance(frozen, bool):
        raise ConfigError(f"{where}.frozen: expected true or false, got {frozen!r}")
    pooling = _int(merged.get("pooling", 1), f"{where}.pooling", 1, MAX_POOLING)
    features, feature_pooling = _features(merged, pooling, where)
    return TableSpec(
        name=_str(merged["name"], f"{where}.name"),
        rows=_rows(merged["rows"], f"{where}.rows"),
        alpha=_float(merged.get("alpha", 1.05), f"{where}.alpha", 0.0, MAX_ALPHA),
        hot_shares=_hot_shares(merged, where),
        rank_offset=_float(
            merged.get("rank_offset", 0.0), f"{where}.rank_offset", 0.0, MAX_RANK_OFFSET
        ),
        drift=_float(merged.get("drift", 0.0), f"{where}.drift", 0.0, 1.0),
        drift_period_batches=_int(
            merged.get("drift_period_batches", 1), f"{where}.drift_period_batches", 1, 2**40
        ),
        reuse=_float(merged.get("reuse", 0.0), f"{where}.reuse", 0.0, 1.0, hi_open=True),
        reuse_window_batches=_int(
            merged.get("reuse_window_batches", 1), f"{where}.reuse_window_batches", 1, 1 << 20
        ),
        pooling=pooling,
        mapping=_str(merged.get("mapping", "permuted"), f"{where}.mapping", MAPPINGS),
        frozen=frozen,
        features=features,
        feature_pooling=feature_pooling,
    )


def _features(
    merged: dict[str, Any], pooling: int, where: str
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The table's features and their lookups per sample (module docstring)."""
    names = merged.get("features", [])
    split = merged.get("feature_pooling", [])
    if not isinstance(names, list | tuple):
        raise ConfigError(f"{where}.features: expected a list of names, got {names!r}")
    if not isinstance(split, list | tuple):
        raise ConfigError(f"{where}.feature_pooling: expected a list of integers, got {split!r}")
    features = tuple(_str(n, f"{where}.features[{i}]") for i, n in enumerate(names))
    if any(not n for n in features):
        raise ConfigError(f"{where}.features: a feature name is empty")
    if len(set(features)) != len(features):
        dup = next(n for n in features if features.count(n) > 1)
        raise ConfigError(f"{where}.features: feature {dup!r} appears twice")
    parts = tuple(
        _int(p, f"{where}.feature_pooling[{i}]", 1, MAX_POOLING) for i, p in enumerate(split)
    )
    if parts and len(parts) != len(features):
        raise ConfigError(
            f"{where}.feature_pooling: {len(parts)} values for {len(features)} features"
        )
    if parts and sum(parts) != pooling:
        raise ConfigError(
            f"{where}.feature_pooling: sums to {sum(parts)}, not the table's pooling {pooling}"
        )
    return features, parts


def spec_from_dict(data: Any, where: str = "spec") -> WorkloadSpec:
    """Validate plain data into a WorkloadSpec (unknown keys and bad ranges are errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys")
    _check_keys(data, _SPEC_KEYS, where)
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError(f"{where}.defaults: expected a table of keys")
    _check_keys(defaults, _DEFAULT_KEYS, f"{where}.defaults")
    tables_data = data.get("tables")
    if not isinstance(tables_data, list) or not tables_data:
        raise ConfigError(f"{where}: needs a non-empty list of [[tables]]")
    if len(tables_data) > 65535:
        raise ConfigError(f"{where}: at most 65535 tables (the table column is uint16)")
    tables = tuple(_table(t, defaults, f"{where}.tables[{i}]") for i, t in enumerate(tables_data))
    total = sum(t.rows for t in tables)
    if total > MAX_ROW_SPACE:
        raise ConfigError(
            f"{where}: {len(tables)} tables of {total} rows in all are above the limit of "
            "2^63 - 1 rows that the replay's int64 row keys can number"
        )
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"{where}: table name {dup!r} appears twice")
    owner: dict[str, str] = {}
    for t in tables:
        for feature in t.features:
            if feature in owner:
                raise ConfigError(
                    f"{where}: feature {feature!r} looks up two tables, {owner[feature]!r} "
                    f"and {t.name!r}"
                )
            owner[feature] = t.name
    update_data = data.get("update", {})
    if isinstance(update_data, UpdateRule):
        update_data = asdict(update_data)
    if not isinstance(update_data, dict):
        raise ConfigError(f"{where}.update: expected a table of keys")
    _check_keys(update_data, _UPDATE_KEYS, f"{where}.update")
    update = UpdateRule(
        rule=_str(update_data.get("rule", "sgd"), f"{where}.update.rule", UPDATE_RULES),
        accumulate_batches=_int(
            update_data.get("accumulate_batches", 1),
            f"{where}.update.accumulate_batches",
            1,
            1 << 20,
        ),
    )
    spec = WorkloadSpec(
        name=_str(data.get("name", "custom"), f"{where}.name"),
        tables=tables,
        batch_size=_int(data.get("batch_size", 128), f"{where}.batch_size", 1, 1 << 26),
        batches=_int(data.get("batches", 100), f"{where}.batches", 1, (1 << 32) - 1),
        seed=_int(data.get("seed", 0), f"{where}.seed", 0, 2**64 - 1),
        embedding_dim=_int(data.get("embedding_dim", 16), f"{where}.embedding_dim", 1, 1 << 16),
        update=update,
        source=_str(data.get("source", ""), f"{where}.source"),
        dataset_samples=(
            None
            if data.get("dataset_samples") is None
            else _int(data["dataset_samples"], f"{where}.dataset_samples", 1, 2**63 - 1)
        ),
    )
    if spec.lookups_per_batch > 1 << 31:
        raise ConfigError(f"{where}: {spec.lookups_per_batch} lookups per batch is too many")
    return spec


def load_spec(path: str | Path) -> WorkloadSpec:
    """Load a workload spec from a TOML file."""
    path = Path(path)
    # regular files only, of at most SPEC's limit: a FIFO or /dev/zero is refused
    text = read_text(path, SPEC, ConfigError, noun="spec file")
    return spec_from_dict(parse_toml(text, str(path)), where=str(path))


def toml_value(v: Any) -> str:
    """A TOML literal for a number, bool, string or list of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    # a TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML also escapes
    return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")


def spec_to_toml(spec: WorkloadSpec) -> str:
    """TOML text for a spec (round-trips through `load_spec`)."""
    value = toml_value

    lines = []
    data = spec.to_dict()
    for key in ("name", "source", "batch_size", "batches", "seed", "embedding_dim"):
        lines.append(f"{key} = {value(data[key])}")
    if "dataset_samples" in data:
        lines.append(f"dataset_samples = {value(data['dataset_samples'])}")
    lines.append("\n[update]")
    for key, v in data["update"].items():
        lines.append(f"{key} = {value(v)}")
    for table in data["tables"]:
        lines.append("\n[[tables]]")
        lines.extend(f"{key} = {value(v)}" for key, v in table.items())
    return "\n".join(lines) + "\n"


__all__ = [
    "MAX_HOT_SHARES",
    "MAX_HOT_VALUES",
    "TableSpec",
    "UpdateRule",
    "WorkloadSpec",
    "load_spec",
    "spec_from_dict",
    "spec_to_toml",
]
