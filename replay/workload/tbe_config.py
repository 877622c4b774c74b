"""FBGEMM's TBE reports (`TBEDataConfig` JSON) as workload specs, and specs as such reports.

FBGEMM's table-batched embedding (TBE) op writes, with `FBGEMM_TBE_REPORT_INPUT_PARAMS=1`,
a `TBEDataConfig` per reported batch (`fbgemm_gpu/tbe/monitoring/bench_params_reporter.py`,
`extract_params`; the class and its JSON in `fbgemm_gpu/tbe/bench/tbe_data_config.py` and
`tbe_data_config_param_models.py`; FBGEMM's benchmarks generate requests from it,
`tbe_data_config_bench_helper.py`). What a file says, per feature f of T (a feature is a
table's input; `feature_table_map[f]` names the physical table when features share one,
`embedding_specs` the tables' (rows, dim)):

- `Es[f]` rows and `Ds[f]` columns of its table (`E`, `D`: their means, used when the lists
  are absent), `batch_params.Bs[f]` its batch size (`B` their mean, `sigma_B` their spread
  under variable batch sizes), `pooling_params.Ls[f]` its mean bag size (`L` the ceiling
  of the mean over all bags, `sigma_L` the bags' spread);
- `indices_params_list[f]` (`indices_params` over all features' indices together, used
  when the list is absent): up to 20 `heavy_hitters`, the shares of the most frequent
  indices of that one batch, and the Zipf fit (q, s) of the rest, p(i) ~ (i + q)^-s over
  0-based frequency ranks i >= j (`replay.workload.tbe_estimate`, the estimator).

`spec_from_tbe_configs` turns files into a spec, one table per physical table:

- **heavy hitters exactly**: ranks 1..j take the stated shares (`hot_shares`; FBGEMM's own
  generator puts them on indices 0..j-1, ours on j rows scattered by the rank permutation:
  the same statistics by rank). The calibrated tail (below) keeps every rank above j no
  likelier than the least heavy hitter (FBGEMM's estimator's own consistency condition),
  so the heavy hitters stay the most frequent rows. Shares summing to 1 or more (every
  index a heavy hitter) are scaled to 1 - 1e-6 (a spec's tail must keep some mass); on a
  table of rows <= j the last rank keeps the rest.
- **the Zipf fit**: our law over ranks k > j is (k + rank_offset)^-alpha, so FBGEMM's
  generator's law is alpha = s, rank_offset = q - 1 (1-based k = i + 1). Since the
  estimator fits the ranks a batch saw and the generator draws over the whole table, a
  batch regenerated from (q, s) reads back as another (q, s) where a batch sees a small
  part of its table; by default (`calibrate`) each table's tail is the one whose batches
  of the reported size (B_f x L_f lookups) FBGEMM's estimator reads as the stated (q, s)
  (`tbe_estimate.calibrate_tail`: within 2% of s and half a q grid step, or the closest
  found, as the diagnostics say). A file that `replay export tbe-config` wrote states the
  generative law itself (its `replay` key says so) and is read as it stands.
- **pooling**: a table's lookups per sample are sum over its features of Bs[f] / B x Ls[f]
  (B the spec's batch size: the first file's `B`), whole numbers per table (a spec's
  pooling is whole lookups): each table gets the floor or the ceiling of its own (at
  least 1), largest remainders first, so the total over tables is the stated total
  rounded. Fractional bag sizes therefore keep the mean over all tables to within 0.5 /
  (its total) but a table's own to within one lookup (the diagnostics list each table's
  stated and written pooling). Bag-size spreads (`sigma_L`) and batch-size spreads
  (`sigma_B`, VBE) are not modelled (a trace keeps no bags, a spec one batch size), nor
  per-sample weights (they change no lookup).
- **features sharing a table**: the table's `features` and `feature_pooling`; its hot
  shares are the features' mixture on ranks 1..max j (each feature's law weighted by its
  lookups, FBGEMM's generator putting every feature's heavy hitters on the same indices),
  its tail the law of the feature with the most tail lookups, uncalibrated (a mixture of
  two Zipf laws is no Zipf law; the diagnostics name the table).
- **dimension**: a spec has one `embedding_dim`; mixed dimensions give the rows-weighted
  mean (so the tables' bytes are kept to rounding), noted.

Several files: the reporter names its files `tbe-{op}-config-estimation-{iteration}.json`;
files of the same op (or, named otherwise, the same file) are reports of one TBE at
several iterations, and their statistics are averaged (shares rank by rank over the ranks
all have, log q, s, pooling); different ops are different TBEs of one model, whose tables
are all in the spec (named `t{i}`, or `{op}.t{i}` with several ops).

`tbe_config_from_spec` writes FBGEMM's `TBEDataConfig.dict()` layout (loaded by
`TBEDataConfig.from_json`; `generate_requests` makes FBGEMM's benchmark requests from it):
one feature per table (or per named feature), Ls the whole pooling factors (FBGEMM's
generator takes `int(Ls[f])`), each feature's heavy hitters the table's hot shares and
(q, s) = (rank_offset + 1, alpha) (alpha 0, the uniform law, as s = 1e-9: FBGEMM requires
s > 0; the law differs from uniform by under 1e-7 relative). Drift, reuse and the rank
permutation have no field there, nor do frozen tables: `export_notes` lists what is lost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.workload.spec import (
    MAX_ALPHA,
    MAX_HOT_SHARES,
    MAX_ROWS,
    WorkloadSpec,
    spec_from_dict,
)

REPORT_NAME = re.compile(r"^tbe-(?P<op>.*)-config-estimation-(?P<iteration>\d+)\.json$")
HOT_SUM_CAP = 1.0 - 1e-6  # the most a spec's hot shares may take (module docstring)
UNIFORM_S = 1e-9  # alpha 0 as FBGEMM's s (it requires s > 0)
EXPORT_MARK = "replay"  # the key a file of ours carries (FBGEMM ignores unknown keys)


@dataclass(frozen=True)
class Feature:
    """One feature of one report: its table and what the report says of its batch."""

    table: int
    rows: int
    dim: int
    batch: float
    pooling: float  # mean bag size
    heavy_hitters: tuple[float, ...]
    q: float
    s: float


@dataclass(frozen=True)
class TbeReport:
    """One TBEDataConfig file, checked."""

    path: str
    batch_size: int  # B
    features: tuple[Feature, ...]
    tables: tuple[tuple[int, int], ...]  # (rows, dim) of each physical table
    generative: bool  # written by `replay export tbe-config`: (q, s) is the law itself
    per_feature: bool  # indices_params_list given (else the global parameters for all)
    notes: tuple[str, ...] = ()
    table_names: tuple[str, ...] | None = None  # a file of ours names its tables

    @property
    def shape(self) -> tuple[Any, ...]:
        return (self.tables, tuple((f.table, f.rows, f.dim) for f in self.features))


# -- reading ----------------------------------------------------------------------------------


def _num(value: Any, where: str, lo: float = 0.0, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < lo:
        raise ConfigError(f"{where}: {value!r} is out of range (at least {lo:g})")
    if integer and value != int(value):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    return float(value)


def _int(value: Any, where: str, lo: int = 1) -> int:
    return int(_num(value, where, lo, integer=True))


def _list(data: dict[str, Any], key: str, where: str, count: int) -> list[Any] | None:
    """data[key] as a list of `count` entries, or None when absent; a list of another
    length is a config that lies about its feature count."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ConfigError(f"{where}.{key}: expected a list, got {type(value).__name__}")
    if len(value) != count:
        raise ConfigError(
            f"{where}: T says {count} features but {key} lists {len(value)} (a config whose "
            "lists disagree with its table count cannot be read)"
        )
    return value


def _dict(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _indices(data: Any, where: str) -> tuple[tuple[float, ...], float, float]:
    data = _dict(data, where)
    for key in ("heavy_hitters", "zipf_q", "zipf_s"):
        if key not in data:
            raise ConfigError(f"{where}: missing {key!r}")
    hitters = data["heavy_hitters"]
    if not isinstance(hitters, list):
        raise ConfigError(f"{where}.heavy_hitters: expected a list of shares")
    if len(hitters) > MAX_HOT_SHARES:
        raise ConfigError(
            f"{where}.heavy_hitters: {len(hitters)} entries, more than FBGEMM's "
            f"{MAX_HOT_SHARES} (kHeavyHitterMaxEntries)"
        )
    shares = tuple(_num(h, f"{where}.heavy_hitters[{i}]") for i, h in enumerate(hitters))
    if any(h > 1.0 for h in shares):
        raise ConfigError(f"{where}.heavy_hitters: a share above 1")
    q = _num(data["zipf_q"], f"{where}.zipf_q")
    s = _num(data["zipf_s"], f"{where}.zipf_s")
    if q < 1.0:
        raise ConfigError(
            f"{where}.zipf_q: {q:g} is below 1, which a spec's rank offset (q - 1 >= 0) cannot "
            "express (FBGEMM's estimator writes q >= 1)"
        )
    if not 0.0 < s <= MAX_ALPHA:
        raise ConfigError(f"{where}.zipf_s: {s:g} is out of range (0, {MAX_ALPHA:g}]")
    return shares, q, s


def parse_tbe_config(data: Any, where: str) -> TbeReport:
    """A TBEDataConfig's JSON object, checked (each failure one ConfigError naming `where`)."""
    data = _dict(data, where)
    for key in ("T", "E", "D", "batch_params", "pooling_params", "indices_params"):
        if key not in data:
            raise ConfigError(f"{where}: missing {key!r} (not an FBGEMM TBEDataConfig?)")
    count = _int(data["T"], f"{where}.T")
    batch = _dict(data["batch_params"], f"{where}.batch_params")
    pooling = _dict(data["pooling_params"], f"{where}.pooling_params")
    rows_all = _list(data, "Es", where, count)
    dims_all = _list(data, "Ds", where, count)
    batches = _list(batch, "Bs", f"{where}.batch_params", count)
    bags = _list(pooling, "Ls", f"{where}.pooling_params", count)
    params = _list(data, "indices_params_list", where, count)
    table_map = _list(data, "feature_table_map", where, count)
    notes: list[str] = []
    b = _int(batch.get("B"), f"{where}.batch_params.B")
    mean_rows = _num(data["E"], f"{where}.E", 1)
    mean_dim = _num(data["D"], f"{where}.D", 1)
    mean_bag = _num(pooling.get("L"), f"{where}.pooling_params.L")
    glob = _indices(data["indices_params"], f"{where}.indices_params")
    specs = data.get("embedding_specs")
    if specs is not None:
        if not isinstance(specs, list) or not specs:
            raise ConfigError(f"{where}.embedding_specs: expected a list of [rows, dim]")
        tables_given = []
        for i, entry in enumerate(specs):
            if not isinstance(entry, list | tuple) or len(entry) < 2:
                raise ConfigError(f"{where}.embedding_specs[{i}]: expected [rows, dim]")
            tables_given.append(
                (_int(entry[0], f"{where}.embedding_specs[{i}][0]"),
                 _int(entry[1], f"{where}.embedding_specs[{i}][1]"))
            )  # fmt: skip
    features: list[Feature] = []
    for f in range(count):
        rows = _int(rows_all[f], f"{where}.Es[{f}]") if rows_all else math.ceil(mean_rows)
        if rows > MAX_ROWS:
            raise ConfigError(f"{where}.Es[{f}]: {rows} rows, above the spec's 2^53")
        dim = _int(dims_all[f], f"{where}.Ds[{f}]") if dims_all else round(mean_dim)
        table = f
        if table_map is not None:
            table = _int(table_map[f], f"{where}.feature_table_map[{f}]", 0)
            if specs is not None and table >= len(tables_given):
                raise ConfigError(
                    f"{where}.feature_table_map[{f}]: table {table}, but embedding_specs "
                    f"lists {len(tables_given)} tables"
                )
        hitters, q, s = _indices(params[f], f"{where}.indices_params_list[{f}]") if params else glob
        features.append(
            Feature(
                table=table,
                rows=rows,
                dim=dim,
                batch=_num(batches[f], f"{where}.batch_params.Bs[{f}]") if batches else b,
                pooling=_num(bags[f], f"{where}.pooling_params.Ls[{f}]") if bags else mean_bag,
                heavy_hitters=hitters,
                q=q,
                s=s,
            )
        )
    # the physical tables: embedding_specs, else the features' own (rows, dim)
    used = sorted({f.table for f in features})
    if specs is not None:
        tables = tables_given
    else:
        tables = [(0, 0)] * (max(used) + 1)
        for feature in features:
            tables[feature.table] = (feature.rows, feature.dim)
    for i, feature in enumerate(features):
        if tables[feature.table] == (0, 0):
            continue
        if feature.rows != tables[feature.table][0]:
            raise ConfigError(
                f"{where}: feature {i} has {feature.rows} rows (Es) but its table "
                f"{feature.table} has {tables[feature.table][0]}"
            )
    if not params:
        notes.append(
            f"{where}: no indices_params_list; every table takes the global indices_params "
            "(fitted over all features' indices together)"
        )
    if batch.get("sigma_B") or batch.get("vbe_num_ranks"):
        notes.append(f"{where}: variable batch sizes (sigma_B, VBE) are not modelled: B_f used")
    if pooling.get("sigma_L"):
        notes.append(
            f"{where}: bag sizes vary (sigma_L {pooling['sigma_L']} over all features' bags); "
            "each feature's mean is modelled (a trace keeps no bags)"
        )
    mark = data.get(EXPORT_MARK)
    generative = isinstance(mark, dict) and mark.get("indices_params") == "generative"
    names = mark.get("tables") if generative and isinstance(mark, dict) else None
    if not (isinstance(names, list) and len(names) == len(tables)
            and all(isinstance(n, str) and n for n in names)):  # fmt: skip
        names = None
    return TbeReport(
        path=where, batch_size=b, features=tuple(features), tables=tuple(tables),
        generative=generative, per_feature=bool(params), notes=tuple(notes),
        table_names=tuple(names) if names else None,
    )  # fmt: skip


def read_tbe_config(path: str | Path) -> TbeReport:
    """Read and check one TBEDataConfig JSON file (`replay._files`: regular files only,
    TBE_CONFIG's size limit)."""
    from replay._files import TBE_CONFIG, read_json

    data = read_json(path, TBE_CONFIG, ConfigError, noun="TBE config",
                     bad="not an FBGEMM TBE config (JSON)")  # fmt: skip
    return parse_tbe_config(data, str(path))


# -- a spec from reports -------------------------------------------------------------------------


@dataclass(frozen=True)
class TableFit:
    """One spec table from a report: what was stated and what the spec generates."""

    name: str
    features: tuple[str, ...]
    rows: int
    pooling_stated: float  # lookups per sample the reports say (Bs / B x Ls, summed)
    pooling: int
    heavy_hitters: tuple[float, ...]
    q: float
    s: float
    alpha: float
    rank_offset: float
    refit_q: float | None = None  # FBGEMM's estimator on the spec's batches (calibrated)
    refit_s: float | None = None
    calibrated: str = "no"  # "converged", "closest" or why not

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "features": list(self.features), "rows": self.rows,
            "pooling_stated": self.pooling_stated, "pooling": self.pooling,
            "heavy_hitters": list(self.heavy_hitters), "zipf_q": self.q, "zipf_s": self.s,
            "alpha": self.alpha, "rank_offset": self.rank_offset, "refit_zipf_q": self.refit_q,
            "refit_zipf_s": self.refit_s, "calibrated": self.calibrated,
        }  # fmt: skip


@dataclass(frozen=True)
class TbeFit:
    """The spec written from TBE reports, and per table how it was made."""

    spec: WorkloadSpec
    tables: tuple[TableFit, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "batch_size": self.spec.batch_size,
            "embedding_dim": self.spec.embedding_dim,
            "tables": [t.to_dict() for t in self.tables],
            "notes": list(self.notes),
        }


def _group(reports: Sequence[TbeReport]) -> list[tuple[str, list[TbeReport]]]:
    """Reports of one op (by the reporter's file names) together, in first-seen order."""
    groups: dict[str, list[TbeReport]] = {}
    for report in reports:
        match = REPORT_NAME.match(Path(report.path).name)
        key = match.group("op") if match else report.path
        groups.setdefault(key, []).append(report)
    out = []
    for key, members in groups.items():
        for other in members[1:]:
            if other.shape != members[0].shape:
                raise ConfigError(
                    f"{other.path}: a report of TBE op {key!r} with other tables than "
                    f"{members[0].path} (reports of one op must describe the same tables)"
                )
        out.append((key, members))
    return out


def _mean_feature(features: Sequence[Feature]) -> Feature:
    """One feature's statistics averaged over reports (module docstring)."""
    n = len(features)
    j = min(len(f.heavy_hitters) for f in features)
    hitters = tuple(math.fsum(f.heavy_hitters[i] for f in features) / n for i in range(j))
    return Feature(
        table=features[0].table, rows=features[0].rows, dim=features[0].dim,
        batch=math.fsum(f.batch for f in features) / n,
        pooling=math.fsum(f.pooling for f in features) / n,
        heavy_hitters=hitters,
        q=math.exp(math.fsum(math.log(f.q) for f in features) / n),
        s=math.fsum(f.s for f in features) / n,
    )  # fmt: skip


def whole_pooling(exact: Sequence[float]) -> list[int]:
    """Whole lookups per sample per table: each the floor or the ceiling of its own (at
    least 1), the total the stated total rounded (largest remainders first)."""
    base = [max(math.floor(x), 1) for x in exact]
    target = max(round(math.fsum(exact)), sum(base))
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[: target - sum(base)]:
        if exact[i] > base[i]:
            base[i] += 1
    return base


def _shares(hitters: Sequence[float], rows: int) -> tuple[tuple[float, ...], str]:
    """Heavy hitters as a spec's hot shares (module docstring), and what was changed."""
    shares = [float(f"{h:.9g}") for h in hitters]
    note = ""
    if len(shares) >= rows:  # the last rank takes what the others leave
        shares = shares[: rows - 1]
        note = f"the table's {rows} rows hold every heavy hitter: rank {rows} keeps the rest"
    total = math.fsum(shares)
    if total >= HOT_SUM_CAP:
        shares = [h * HOT_SUM_CAP / total for h in shares]
        note = f"heavy hitters sum to {total:.6f}: scaled to {HOT_SUM_CAP} (the tail keeps 1e-6)"
    return tuple(shares), note


def _tail_share(feature: Feature, rank: int) -> float:
    """Feature's probability of 1-based rank `rank` under FBGEMM's generator's law."""
    from replay.workload.tbe_estimate import zipf_constants

    j = len(feature.heavy_hitters)
    if rank <= j:
        return feature.heavy_hitters[rank - 1]
    rest = max(1.0 - math.fsum(feature.heavy_hitters), 0.0)
    n = feature.rows - j
    if n <= 0 or rank > feature.rows:
        return 0.0
    const = float(zipf_constants([feature.s], feature.q + j, n)[0])
    return rest * (rank - 1 + feature.q) ** -feature.s / const


def spec_from_tbe_configs(
    reports: Sequence[TbeReport],
    *,
    batches: int = 100,
    seed: int = 0,
    name: str | None = None,
    calibrate: bool = True,
    progress: Callable[[str], None] | None = None,
) -> TbeFit:
    """A workload spec that reproduces the reports' statistics (module docstring)."""
    from replay.workload.tbe_estimate import calibrate_tail

    if not reports:
        raise ConfigError("give at least one TBE config")
    say = progress or (lambda _: None)
    groups = _group(reports)
    batch_size = reports[0].batch_size
    notes: list[str] = [n for r in reports for n in r.notes]
    entries: list[dict[str, Any]] = []
    fits: list[TableFit] = []
    exact: list[float] = []
    for op, members in groups:
        prefix = f"{op}." if len(groups) > 1 else ""
        features = [
            _mean_feature([m.features[f] for m in members]) for f in range(len(members[0].features))
        ]
        for table, (rows, dim) in enumerate(members[0].tables):
            owned = [(f, feat) for f, feat in enumerate(features) if feat.table == table]
            if not owned:
                notes.append(f"{members[0].path}: table {table} has no feature: left out")
                continue
            lookups = [feat.batch / batch_size * feat.pooling for _, feat in owned]
            own = members[0].table_names
            entries.append({
                "name": prefix + (own[table] if own else f"t{table}"),
                "features": [f"{prefix}f{f}" for f, _ in owned],
                "rows": rows, "dim": dim, "mine": [feat for _, feat in owned],
                "feature_lookups": lookups, "generative": members[0].generative,
            })  # fmt: skip
            exact.append(math.fsum(lookups))
    if not entries:
        raise ConfigError(f"{reports[0].path}: no table has a feature")
    whole = whole_pooling(exact)
    for entry, pooling, stated in zip(entries, whole, exact, strict=True):
        mine: list[Feature] = entry["mine"]
        rows = entry["rows"]
        table_notes: list[str] = []
        if len(mine) == 1:
            feat = mine[0]
            hot, changed = _shares(feat.heavy_hitters, rows)
            q, s = feat.q, feat.s
        else:  # a mixture on the hot ranks, the dominant feature's tail (docstring)
            weights = [x / math.fsum(entry["feature_lookups"]) for x in entry["feature_lookups"]]
            top = max(len(f.heavy_hitters) for f in mine)
            mixed = [
                math.fsum(w * _tail_share(f, k) for w, f in zip(weights, mine, strict=True))
                for k in range(1, top + 1)
            ]
            hot, changed = _shares(mixed, rows)
            lead = max(
                zip(weights, mine, strict=True),
                key=lambda wf: wf[0] * (1.0 - math.fsum(wf[1].heavy_hitters)),
            )[1]
            q, s = lead.q, lead.s
        if changed:
            table_notes.append(changed)
        alpha, offset = s, q - 1.0
        refit_q = refit_s = None
        how = "no"
        if entry["generative"]:
            how = "no: the file states the generative law (replay export)"
        elif len(mine) > 1:
            how = "no: features share the table (a mixture's tail is no Zipf law)"
        elif calibrate and rows > len(hot):
            say(f"calibrating {entry['name']}'s tail to FBGEMM's estimator")
            n = max(round(mine[0].batch * mine[0].pooling), 1)
            cal = calibrate_tail(rows, hot, q, s, n, seed=seed)
            alpha, offset = cal.alpha, cal.rank_offset
            refit_q, refit_s = cal.q, cal.s
            how = "converged" if cal.converged else "closest found (not within the tolerance)"
            if not cal.ordered:
                how += "; a tail rank stays likelier than the least heavy hitter at any offset"
        feature_pooling = whole_pooling(entry["feature_lookups"])
        split = feature_pooling if sum(feature_pooling) == pooling else []
        fits.append(
            TableFit(
                name=entry["name"],
                features=tuple(entry["features"]),
                rows=rows,
                pooling_stated=round(stated, 6),
                pooling=pooling,
                heavy_hitters=tuple(hot),
                q=q,
                s=s,
                alpha=round(alpha, 6),
                rank_offset=round(offset, 6),
                refit_q=refit_q,
                refit_s=refit_s,
                calibrated=how,
            )
        )
        entry["table"] = {
            "name": entry["name"], "rows": rows, "alpha": min(round(alpha, 6), MAX_ALPHA),
            **({"hot_shares": list(hot)} if hot else {}),
            **({"rank_offset": round(offset, 6)} if offset > 0 else {}),
            "pooling": pooling, "features": entry["features"],
            **({"feature_pooling": split} if len(split) > 1 else {}),
        }  # fmt: skip
        notes.extend(f"{entry['name']}: {n}" for n in table_notes)
    dims = {e["dim"] for e in entries}
    if len(dims) == 1:
        dim = dims.pop()
    else:
        total = sum(e["rows"] for e in entries)
        dim = max(round(math.fsum(e["rows"] * e["dim"] for e in entries) / total), 1)
        notes.append(
            f"tables of {len(dims)} dimensions ({min(dims)}-{max(dims)}): embedding_dim is "
            f"their rows-weighted mean, {dim} (a spec has one dimension)"
        )
    if any(abs(w - x) >= 0.005 for w, x in zip(whole, exact, strict=True)):
        notes.append(
            f"bag sizes are not whole: {sum(whole)} lookups per sample written for "
            f"{math.fsum(exact):.3f} stated (each table the floor or the ceiling of its own)"
        )
    stems = ", ".join(Path(r.path).name for r in reports[:4]) + (
        f" and {len(reports) - 4} more" if len(reports) > 4 else ""
    )
    data = {
        "name": name or _spec_name(reports[0].path),
        "source": f"FBGEMM TBE configs {stems} (replay fit --tbe-config)",
        "batch_size": batch_size,
        "batches": batches,
        "seed": seed,
        "embedding_dim": dim,
        "tables": [e["table"] for e in entries],
    }
    spec = spec_from_dict(data, where="spec from TBE configs")
    return TbeFit(spec=spec, tables=tuple(fits), notes=tuple(notes))


def _spec_name(path: str) -> str:
    match = REPORT_NAME.match(Path(path).name)
    return f"tbe-{match.group('op')}" if match else f"tbe-{Path(path).stem}"


# -- a report from a spec -------------------------------------------------------------------------


def export_notes(spec: WorkloadSpec) -> list[str]:
    """What of `spec` a TBEDataConfig cannot say."""
    notes = []
    for what, test in (
        ("drift", lambda t: t.drift > 0),
        ("reuse", lambda t: t.reuse > 0),
        ("frozen tables", lambda t: t.frozen),
    ):
        names = [t.name for t in spec.tables if test(t)]
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            notes.append(f"{what} ({shown}): a TBE config has no field for it; left out")
    if any(t.mapping == "contiguous" for t in spec.tables):
        notes.append("FBGEMM's generator puts hot indices first, as the contiguous mapping does")
    return notes


def tbe_config_from_spec(spec: WorkloadSpec) -> dict[str, Any]:
    """`spec` as FBGEMM's `TBEDataConfig.dict()` (module docstring)."""
    rows: list[int] = []
    bags: list[float] = []
    table_map: list[int] = []
    params: list[dict[str, Any]] = []
    lookups: list[float] = []
    for t, table in enumerate(spec.tables):
        if table.feature_pooling:
            split = list(table.feature_pooling)
        elif table.features:
            n = len(table.features)
            split = [table.pooling // n + (i < table.pooling % n) for i in range(n)]
        else:
            split = [table.pooling]
        law = {
            "heavy_hitters": list(table.hot_shares),
            "zipf_q": table.rank_offset + 1.0,
            "zipf_s": table.alpha if table.alpha > 0 else UNIFORM_S,
            "index_dtype": "torch.int64",
            "offset_dtype": "torch.int64",
        }
        for bag in split:
            rows.append(table.rows)
            bags.append(float(bag))
            table_map.append(t)
            params.append(dict(law))
        lookups.append(float(table.pooling))
    count = len(rows)
    mean_bag = math.fsum(bags) / count
    busiest = max(range(len(spec.tables)), key=lambda t: (lookups[t], -t))
    glob = params[table_map.index(busiest)]
    return {
        "T": count,
        "E": rows[0] if len(set(rows)) == 1 else math.ceil(math.fsum(rows) / count),
        "D": spec.embedding_dim,
        "mixed_dim": False,
        "weighted": False,
        "batch_params": {
            "B": spec.batch_size,
            "sigma_B": None,
            "vbe_distribution": None,
            "vbe_num_ranks": None,
            "Bs": [spec.batch_size] * count,
        },
        "indices_params": dict(glob),
        "pooling_params": {
            "L": math.ceil(mean_bag - 1e-12),
            "sigma_L": None,
            "length_distribution": None,
            "Ls": bags,
        },
        "use_cpu": False,
        "Es": rows,
        "Ds": [spec.embedding_dim] * count,
        "max_indices": None,
        "embedding_specs": [[t.rows, spec.embedding_dim] for t in spec.tables],
        "feature_table_map": table_map,
        "indices_params_list": params,
        EXPORT_MARK: {
            "indices_params": "generative",
            "spec": spec.name,
            "tables": [t.name for t in spec.tables],
            "note": "written by replay export tbe-config: heavy_hitters, zipf_q and zipf_s are "
            "the law FBGEMM's generator draws, not an estimate of one batch",
        },
    }
