"""TorchRec's `ShardingPlan` and our sharding plans, both ways: a JSON form of TorchRec's
plan that needs no torch here, the `ShardingPlan` object built from it (torch needed),
and our plan from TorchRec's (object or JSON form).

Placement. Sharding plans are configuration data (`replay/system/sharding.py`); this
module maps them onto TorchRec's (`torchrec/distributed/types.py` `ShardingPlan`,
`ParameterSharding`, `EnumerableShardingSpec`, `ShardMetadata`, as of torchrec 1.8.0),
reads plan files in either form (`read_sharding_file`, what `cluster.sharding_file`
reads) and writes nothing (the CLI writes, `replay/cli/export.py`). torch and torchrec
are imported only inside the functions that build or read TorchRec's objects.

The JSON form (`replay export torchrec-plan`, `torchrec_plan_json`)::

    {"format": "torchrec-sharding-plan", "world_size": 4, "local_world_size": 2,
     "compute_device": "cuda", "source": "...",
     "plan": {"<module path>": {"C1": {
         "sharding_type": "row_wise", "compute_kernel": "fused", "ranks": [0, 1, 2, 3],
         "sharding_spec": [{"shard_offsets": [0, 0], "shard_sizes": [3, 16],
                            "placement": "rank:0/cuda:0"}, ...]}}}}

one entry per `ParameterSharding` (its table's name), its shards in TorchRec's order:
row-wise every rank in rank order (empty blocks included, as TorchRec's
`_calculate_rw_shard_sizes_and_offsets` lists them), table-row-wise and grid the node's
GPUs in local order (grid: column block after column block), column-wise the blocks in
the plan's order; data-parallel has no spec (``null``) and the `dense` kernel, as
TorchRec's `data_parallel()` gives it. A `ParameterSharding`'s other fields
(`cache_params`, `enforce_hbm`, `stochastic_rounding`, `bounds_check_mode`,
`output_dtype`) are kept when they are plain values; the reader ignores keys it does not
know, at every level, since TorchRec adds fields between versions.

Kernels (our `kernel` <-> TorchRec's `EmbeddingComputeKernel`, `replay.engine.kernels`):
`hbm` `fused`, `uvm-caching` `fused_uvm_caching` (with `cache_params.load_factor`, which
TorchRec requires of it), `uvm` `fused_uvm`, `ssd` `key_value`; data-parallel `dense`. A
plan without kernels exports `compute_kernel` (`fused`) for every sharded table; another
TorchRec kernel read back (quant, virtual tables) is a one-line error.

Mapping (our type <-> TorchRec's `ShardingType`): table-wise `table_wise`, row-wise
`row_wise`, column-wise `column_wise`, table-row-wise `table_row_wise`, data-parallel
`data_parallel`, table-column-wise `table_column_wise`, grid `grid_shard`. Our ranks are
the shards' placements in spec order; our explicit `shards` the row (column; grid:
column) ranges where they differ from the even rule. TorchRec's own checks and what its
training path executes: `replay.system.sharding_rules`. An export of a plan it would not
execute as planned is refused with that reason (`ConfigError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from replay._files import SHARDING_PLAN, read_json
from replay.errors import ConfigError
from replay.system.sharding import (
    COLUMN_SPLIT,
    DATA_PARALLEL,
    ROW_SPLIT,
    TABLE_WISE,
    Placement,
    ShardingPlan,
    TableShape,
    TableSharding,
    column_blocks,
    plan_from_json,
    resolve_plan,
    row_blocks,
)

FORMAT = "torchrec-sharding-plan"
SHARDING_FILE = "sharding.json"  # what a run or plan folder holds
TORCHREC_TYPES = {
    "table-wise": "table_wise",
    "row-wise": "row_wise",
    "column-wise": "column_wise",
    "table-row-wise": "table_row_wise",
    "data-parallel": "data_parallel",
    "table-column-wise": "table_column_wise",
    "grid": "grid_shard",
}
OUR_TYPES = {v: k for k, v in TORCHREC_TYPES.items()}
DEFAULT_KERNEL = "fused"  # TorchRec's `EmbeddingComputeKernel.FUSED`: the table in HBM
# our kernels (replay.system.spec.KERNELS) <-> TorchRec's `EmbeddingComputeKernel` values
TORCHREC_KERNELS = {
    "hbm": "fused",
    "uvm-caching": "fused_uvm_caching",
    "uvm": "fused_uvm",
    "ssd": "key_value",
}
OUR_KERNELS = {v: k for k, v in TORCHREC_KERNELS.items()}
CACHED_TORCHREC = ("fused_uvm_caching", "key_value")  # kernels with a load factor
DENSE_KERNEL = "dense"  # data-parallel's (`sharding_plan._get_compute_kernel`)
TESTED = "torchrec 1.8.0 (fbgemm-gpu-cpu 1.8.0, torch 2.13.0)"
INSTALL = (
    "pip install 'replay[torchrec]' (a CPU-only machine: pip install torch, then "
    "pip install --no-deps fbgemm-gpu-cpu torchrec and their pure-Python dependencies; "
    "docs/torchrec.md)"
)
_PARAMETER_FIELDS = ("enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype")
_CACHE_FIELDS = ("algorithm", "load_factor", "reserved_memory", "precision", "prefetch_pipeline")


def _placement(rank: int, device: str, local: int) -> str:
    """TorchRec's `sharding_plan.placement`: rank:r/cuda:(r mod local) on GPUs."""
    return (
        f"rank:{rank}/{device}:{rank % local}"
        if device in ("cuda", "mtia")
        else f"rank:{rank}/{device}"
    )


# -- our plan -> the JSON form ------------------------------------------------------------


def torchrec_plan_document(
    placement: Placement,
    *,
    compute_device: str = "cuda",
    module_path: str = "",
    compute_kernel: str = DEFAULT_KERNEL,
) -> dict[str, Any]:
    """The JSON form of a resolved plan, one `ParameterSharding` per table; a one-line
    ConfigError when TorchRec's training path would not execute it as planned."""
    plan = placement.plan
    if plan.torchrec_executable is False:
        raise ConfigError(
            f"only replay can replay this plan, TorchRec would not execute it as planned: "
            f"{plan.torchrec_executable_reason} (plan it with cluster.sharding=auto)"
        )
    local = placement.gpus_per_node
    params: dict[str, Any] = {}
    for t, shape in enumerate(placement.tables):
        entry = placement.entry(t)
        shards = [s for s in placement.shards if s.table == t]
        kernel = compute_kernel
        if entry.kernel is not None and compute_kernel == DEFAULT_KERNEL:
            kernel = TORCHREC_KERNELS[entry.kernel]  # the plan's own (replay.engine.kernels)
        item: dict[str, Any] = {
            "sharding_type": TORCHREC_TYPES[entry.type],
            "compute_kernel": DENSE_KERNEL if entry.type == DATA_PARALLEL else kernel,
            "ranks": [s.rank for s in shards],
            "sharding_spec": None,
        }
        if entry.cache_load_factor is not None and kernel in CACHED_TORCHREC:
            # TorchRec's fused_uvm_caching asserts without CacheParams (its load factor)
            item["cache_params"] = {"load_factor": entry.cache_load_factor}
        if entry.type != DATA_PARALLEL:
            item["sharding_spec"] = [
                {
                    "shard_offsets": [s.row_start, s.col_start],
                    "shard_sizes": [s.rows, s.cols],
                    "placement": _placement(s.rank, compute_device, local),
                }
                for s in shards
            ]
        params[shape.name] = item
    return {
        "format": FORMAT,
        "world_size": placement.world,
        "local_world_size": local,
        "compute_device": compute_device,
        "source": plan.source,
        "tested_with": TESTED,
        "plan": {module_path: params},
    }


# -- the JSON form -> our plan ------------------------------------------------------------


def is_torchrec_form(document: Any) -> bool:
    """Whether a parsed JSON document is TorchRec's plan in our JSON form (else ours)."""
    return isinstance(document, dict) and "plan" in document and "tables" not in document


def _whole(value: Any, where: str, what: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{where}: {what} must be a whole number >= {least}, got {value!r}")
    return value


def _rank_of(shard: Any, where: str) -> int:
    """The rank of a shard's placement, "rank:3/cuda:3" (TorchRec's `_remote_device`)."""
    text = shard.get("placement") if isinstance(shard, dict) else None
    if not isinstance(text, str) or not text.startswith("rank:"):
        raise ConfigError(f"{where}: placement must be 'rank:R/DEVICE', got {text!r}")
    head = text[len("rank:") :].split("/", 1)[0]
    if not head.isdigit():
        raise ConfigError(f"{where}: placement must be 'rank:R/DEVICE', got {text!r}")
    return int(head)


def _pair(value: Any, where: str, what: str) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"{where}: {what} must be [rows, columns], got {value!r}")
    return _whole(value[0], where, what), _whole(value[1], where, what)


def _entry(name: str, item: Any, world: int, local: int, where: str) -> TableSharding:
    """Our entry of one `ParameterSharding` in the JSON form."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected an object with sharding_type, got {item!r}")
    kind = OUR_TYPES.get(item.get("sharding_type"))  # type: ignore[arg-type]  # None: refused below
    if kind is None:
        raise ConfigError(
            f"{where}: unknown sharding_type {item.get('sharding_type')!r} "
            f"(TorchRec's: {', '.join(OUR_TYPES)})"
        )
    spec = item.get("sharding_spec")
    if kind == DATA_PARALLEL:
        return TableSharding(name, kind, tuple(range(world)))
    kernel, clf = _kernel_of(item, where)
    if not isinstance(spec, list) or not spec:
        raise ConfigError(f"{where}: {item['sharding_type']} needs a non-empty sharding_spec")
    ranks: list[int] = []
    offsets: list[tuple[int, int]] = []
    sizes: list[tuple[int, int]] = []
    for i, shard in enumerate(spec):
        at = f"{where}: sharding_spec[{i}]"
        ranks.append(_rank_of(shard, at))
        offsets.append(_pair(shard.get("shard_offsets"), at, "shard_offsets"))
        sizes.append(_pair(shard.get("shard_sizes"), at, "shard_sizes"))
    rows = max(o[0] + s[0] for o, s in zip(offsets, sizes, strict=True))
    dim = max(o[1] + s[1] for o, s in zip(offsets, sizes, strict=True))
    row_ranges = tuple((o[0], o[0] + s[0]) for o, s in zip(offsets, sizes, strict=True))
    col_ranges = tuple((o[1], o[1] + s[1]) for o, s in zip(offsets, sizes, strict=True))
    shards: tuple[tuple[int, int], ...] | None = None
    if kind == TABLE_WISE:
        if len(spec) != 1:
            raise ConfigError(f"{where}: table_wise has one shard, got {len(spec)}")
    elif kind in ROW_SPLIT:
        if any(c != (0, dim) for c in col_ranges):
            raise ConfigError(f"{where}: {item['sharding_type']} shards must hold every column")
        if list(row_ranges) != row_blocks(rows, len(ranks)):
            shards = row_ranges
    elif kind in COLUMN_SPLIT:
        if any(r != (0, rows) for r in row_ranges):
            raise ConfigError(f"{where}: {item['sharding_type']} shards must hold every row")
        if dim % len(ranks) or list(col_ranges) != column_blocks(dim, len(ranks)):
            shards = col_ranges
    else:  # grid: column blocks of `local` ranks each, rows even over them
        n = len(spec) // local if len(spec) % local == 0 else 0
        even = n > 0 and dim % n == 0
        if even and list(col_ranges) != [c for c in column_blocks(dim, n) for _ in range(local)]:
            even = False
        shards = None if even else col_ranges
    return TableSharding(name, kind, tuple(ranks), shards, rows, dim, kernel, clf)


def _kernel_of(item: dict[str, Any], where: str) -> tuple[str | None, float | None]:
    """Our kernel and load factor of a `ParameterSharding`'s compute kernel and
    CacheParams (none said: None, the table in HBM); a kernel we do not model (quant,
    customized, virtual tables) is a one-line error, not a table read as in HBM."""
    ck = item.get("compute_kernel")
    if ck is None or ck == DENSE_KERNEL:  # dense: a plain EmbeddingBag on the device
        return None, None
    if ck not in OUR_KERNELS:
        raise ConfigError(
            f"{where}: compute_kernel {ck!r} is not modelled (kernels: "
            f"{', '.join(OUR_KERNELS)}; data-parallel: {DENSE_KERNEL})"
        )
    cache = item.get("cache_params")
    clf = cache.get("load_factor") if isinstance(cache, dict) else None
    if ck not in CACHED_TORCHREC or clf is None:
        return OUR_KERNELS[ck], None
    if isinstance(clf, bool) or not isinstance(clf, int | float) or not 0 < clf < 1:
        raise ConfigError(f"{where}: cache_params.load_factor must be in (0, 1), got {clf!r}")
    return OUR_KERNELS[ck], float(clf)


def plan_from_torchrec_json(document: Any, where: str | Path = "TorchRec plan") -> ShardingPlan:
    """Our plan (unresolved, with its tables' shapes and cluster where the form says
    them) from TorchRec's plan in the JSON form; one-line ConfigErrors."""
    if not is_torchrec_form(document):
        raise ConfigError(f'{where}: expected TorchRec\'s plan as {{"plan": {{...}}}}')
    world = document.get("world_size")
    local = document.get("local_world_size")
    modules = document["plan"]
    if not isinstance(modules, dict) or not all(isinstance(m, dict) for m in modules.values()):
        raise ConfigError(f"{where}: 'plan' must map module paths to their parameters' shardings")
    if world is None:  # the largest rank of any shard or list
        ranks = [
            r
            for m in modules.values()
            for item in m.values()
            if isinstance(item, dict)
            for r in (item.get("ranks") or [])
            if isinstance(r, int) and not isinstance(r, bool)
        ]
        world = max(ranks, default=0) + 1
    world = _whole(world, str(where), "world_size", 1)
    local = _whole(world if local is None else local, str(where), "local_world_size", 1)
    if world % local:
        raise ConfigError(f"{where}: world_size {world} is not a multiple of local_world_size")
    entries: list[TableSharding] = []
    seen: dict[str, str] = {}
    for module, params in modules.items():
        for name, item in params.items():
            if name in seen:
                raise ConfigError(
                    f"{where}: table {name!r} is in modules {seen[name]!r} and {module!r}"
                )
            seen[name] = module
            entries.append(_entry(name, item, world, local, f"{where}: {module or '.'}.{name}"))
    source = document.get("source")
    return ShardingPlan(
        tuple(entries),
        source if isinstance(source, str) and source else "TorchRec's plan",
        world,
        local,
    )


def read_sharding_file(path: str | Path) -> ShardingPlan:
    """The plan in a JSON file, ours or TorchRec's in the JSON form (`cluster.sharding_file`;
    untrusted: every failure is one ConfigError)."""
    document = read_json(
        path, SHARDING_PLAN, ConfigError, noun="sharding plan", bad="not a sharding plan (JSON)"
    )
    if is_torchrec_form(document):
        return plan_from_torchrec_json(document, path)
    return plan_from_json(document, path)


def _sharding_path(source: str | Path) -> Path:
    path = Path(source)
    if path.is_dir():
        if not (path / SHARDING_FILE).is_file():
            raise ConfigError(
                f"{path}: no {SHARDING_FILE} (a cluster plan or run folder holds one)"
            )
        return path / SHARDING_FILE
    return path


def placement_of(source: str | Path, *, world_size: int | None = None) -> Placement:
    """The resolved plan of a sharding file or a folder holding `sharding.json` (a cluster
    plan or run), from the shapes and cluster it says; `world_size` must agree."""
    path = _sharding_path(source)
    plan = read_sharding_file(path)
    missing = [e.table for e in plan.tables if e.rows is None or e.dim is None]
    if missing:
        raise ConfigError(
            f"{path}: table {missing[0]!r} has no rows and dim (a sharding.json of replay run "
            "or replay plan says them)"
        )
    world = plan.world_size
    if world is None:
        raise ConfigError(f"{path}: the plan says no world_size")
    if world_size is not None and world_size != world:
        raise ConfigError(f"{path}: the plan is for {world} GPUs, not world_size={world_size}")
    gpn = plan.gpus_per_node or world
    if world % gpn:
        raise ConfigError(f"{path}: world_size {world} is not a multiple of gpus_per_node {gpn}")
    shapes = [TableShape(e.table, int(e.rows or 0), int(e.dim or 0)) for e in plan.tables]
    return resolve_plan(plan, shapes, nodes=world // gpn, gpus_per_node=gpn, where=path)


def _shapes(tables: Any) -> tuple[list[str], list[TableShape] | None]:
    """Names, and shapes when `tables` gives them: names, `TableShape`s, or a mapping of
    name -> (rows, dim)."""
    if isinstance(tables, Mapping):
        shapes = [TableShape(str(n), int(v[0]), int(v[1])) for n, v in tables.items()]
        return [s.name for s in shapes], shapes
    items = list(tables)
    if all(isinstance(t, TableShape) for t in items):
        return [t.name for t in items], items
    return [str(t) for t in items], None


def sharding_from_torchrec(
    plan: Any,
    tables: Sequence[str] | Sequence[TableShape] | Mapping[str, tuple[int, int]] | None = None,
    *,
    world_size: int | None = None,
    local_world_size: int | None = None,
) -> dict[str, Any]:
    """Our sharding document (what `cluster.sharding_file` reads) of TorchRec's plan: a
    `ShardingPlan` object, its JSON form (a dict) or a JSON file of it. `tables`: the
    workload's tables (names, `TableShape`s, or name -> (rows, dim)): every table of the
    plan must be one of them and every one of them in the plan; with shapes the plan is
    resolved and says whether TorchRec executes it as planned. One-line ConfigErrors."""
    if isinstance(plan, str | Path):
        document = read_json(
            plan, SHARDING_PLAN, ConfigError, noun="TorchRec plan", bad="not a TorchRec plan"
        )
        where: str | Path = plan
    elif isinstance(plan, dict):
        document, where = plan, "TorchRec plan"
    else:
        document, where = torchrec_plan_json(plan, world_size, local_world_size), "ShardingPlan"
    ours = plan_from_torchrec_json(document, where)
    if world_size is not None and world_size != ours.world_size:
        raise ConfigError(
            f"{where}: the plan is for {ours.world_size} GPUs, not world_size={world_size}"
        )
    if tables is None:
        return ours.to_json()
    names, shapes = _shapes(tables)
    known = set(names)
    for e in ours.tables:
        if e.table not in known:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise ConfigError(
                f"{where}: table {e.table!r} is not in the workload ({len(names)} tables: {shown})"
            )
    if shapes is None:
        missing = sorted(known - {e.table for e in ours.tables})
        if missing:
            raise ConfigError(f"{where}: table {missing[0]!r} of the workload is not in the plan")
        return ours.to_json()
    world, gpn = int(ours.world_size or 1), int(ours.gpus_per_node or ours.world_size or 1)
    placement = resolve_plan(ours, shapes, nodes=world // gpn, gpus_per_node=gpn, where=where)
    return placement.plan.to_json()


# -- TorchRec's objects (torch needed) ----------------------------------------------------


def _import_torchrec() -> Any:
    try:
        from torchrec.distributed import types
    except ImportError as exc:
        raise ConfigError(f"TorchRec is not installed ({exc}): {INSTALL}") from None
    return types


def _plain(value: Any) -> Any:
    """A field's JSON value: an enum's name, a plain value, or None for anything else."""
    if hasattr(value, "name") and hasattr(value, "value") and not isinstance(value, type):
        return value.name
    return value if isinstance(value, bool | int | float | str) else None


def torchrec_plan_json(
    plan: Any, world_size: int | None = None, local_world_size: int | None = None
) -> dict[str, Any]:
    """The JSON form of a TorchRec `ShardingPlan` object (read by its attributes; no
    import of torch here). The world size defaults to the largest rank + 1, the local
    world size to a table-row-wise table's shards (one per GPU of its node), else to the
    GPUs per node the placements' device indices imply (cuda:i on rank r: r mod local)."""
    modules = getattr(plan, "plan", None)
    if not isinstance(modules, dict):
        raise ConfigError(f"expected a TorchRec ShardingPlan, got {type(plan).__name__}")
    out: dict[str, Any] = {}
    ranks: list[int] = []
    local_seen = 0
    twrw = 0
    for module, params in modules.items():
        items: dict[str, Any] = {}
        for name, ps in params.items():
            spec = getattr(ps, "sharding_spec", None)
            shards = getattr(spec, "shards", None)
            item: dict[str, Any] = {
                "sharding_type": str(ps.sharding_type),
                "compute_kernel": str(ps.compute_kernel),
                "ranks": list(ps.ranks) if ps.ranks is not None else None,
                "sharding_spec": None,
            }
            if shards is not None:
                item["sharding_spec"] = [
                    {
                        "shard_offsets": [int(x) for x in s.shard_offsets],
                        "shard_sizes": [int(x) for x in s.shard_sizes],
                        "placement": str(s.placement),
                    }
                    for s in shards
                ]
                for s in shards:
                    device = str(s.placement).split("/", 1)[-1]
                    if ":" in device and device.rsplit(":", 1)[1].isdigit():
                        local_seen = max(local_seen, int(device.rsplit(":", 1)[1]) + 1)
            ranks += [int(r) for r in item["ranks"] or []]
            if item["sharding_type"] == "table_row_wise" and shards:  # one a GPU of the node
                twrw = len(shards)
            for key in _PARAMETER_FIELDS:
                if _plain(getattr(ps, key, None)) is not None:
                    item[key] = _plain(getattr(ps, key))
            cache = getattr(ps, "cache_params", None)
            if cache is not None:
                item["cache_params"] = {
                    k: _plain(getattr(cache, k, None))
                    for k in _CACHE_FIELDS
                    if _plain(getattr(cache, k, None)) is not None
                }
            items[str(name)] = item
        out[str(module)] = items
    world = world_size if world_size is not None else max(ranks, default=0) + 1
    local = local_world_size or next((n for n in (twrw, local_seen) if n and world % n == 0), world)
    return {
        "format": FORMAT,
        "world_size": world,
        "local_world_size": local,
        "source": "TorchRec's ShardingPlan",
        "plan": out,
    }


def sharding_plan_from_json(document: dict[str, Any]) -> Any:
    """TorchRec's `ShardingPlan` object of the JSON form (torchrec imported here)."""
    types = _import_torchrec()
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel  # noqa: F401

    modules: dict[str, Any] = {}
    for module, params in document["plan"].items():
        plan = types.EmbeddingModuleShardingPlan()
        for name, item in params.items():
            spec = item.get("sharding_spec")
            kwargs: dict[str, Any] = {}
            for key in ("enforce_hbm", "stochastic_rounding"):
                if isinstance(item.get(key), bool):
                    kwargs[key] = item[key]
            cache = item.get("cache_params")
            if isinstance(cache, dict) and cache:
                kwargs["cache_params"] = _cache_params(cache, types)
            plan[name] = types.ParameterSharding(
                sharding_type=item["sharding_type"],
                compute_kernel=item["compute_kernel"],
                ranks=list(item["ranks"]) if item.get("ranks") is not None else None,
                sharding_spec=None
                if spec is None
                else types.EnumerableShardingSpec(
                    [
                        types.ShardMetadata(
                            shard_offsets=list(s["shard_offsets"]),
                            shard_sizes=list(s["shard_sizes"]),
                            placement=s["placement"],
                        )
                        for s in spec
                    ]
                ),
                **kwargs,
            )
        modules[module] = plan
    return types.ShardingPlan(modules)


def _cache_params(cache: dict[str, Any], types: Any) -> Any:
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import CacheAlgorithm

    kwargs: dict[str, Any] = {}
    if isinstance(cache.get("load_factor"), int | float):
        kwargs["load_factor"] = float(cache["load_factor"])
    if isinstance(cache.get("reserved_memory"), int | float):
        kwargs["reserved_memory"] = float(cache["reserved_memory"])
    if isinstance(cache.get("prefetch_pipeline"), bool):
        kwargs["prefetch_pipeline"] = cache["prefetch_pipeline"]
    if cache.get("algorithm") in CacheAlgorithm.__members__:
        kwargs["algorithm"] = CacheAlgorithm[cache["algorithm"]]
    return types.CacheParams(**kwargs)


def torchrec_sharding_plan(
    source: str | Path | dict[str, Any],
    *,
    world_size: int | None = None,
    compute_device: str = "cuda",
    module_path: str = "",
    compute_kernel: str = DEFAULT_KERNEL,
) -> Any:
    """TorchRec's `ShardingPlan` of our plan (a `sharding.json`, or a cluster plan or run
    folder holding one) or of the JSON form (a dict, or its file); `world_size` must
    agree with the plan's. A plan TorchRec would not execute as planned, or torchrec not
    installed: one-line ConfigErrors."""
    if isinstance(source, dict):
        document = source
        if not is_torchrec_form(document):
            raise ConfigError('expected TorchRec\'s plan in the JSON form {"plan": {...}}')
    else:
        path = _sharding_path(source)
        raw = read_json(
            path, SHARDING_PLAN, ConfigError, noun="sharding plan", bad="not a sharding plan"
        )
        if is_torchrec_form(raw):
            document = raw
        else:
            placement = placement_of(path, world_size=world_size)
            document = torchrec_plan_document(
                placement,
                compute_device=compute_device,
                module_path=module_path,
                compute_kernel=compute_kernel,
            )
    said = plan_from_torchrec_json(document).world_size
    if world_size is not None and said != world_size:
        raise ConfigError(f"the plan is for {said} GPUs, not world_size={world_size}")
    _import_torchrec()
    return sharding_plan_from_json(document)


__all__ = [
    "FORMAT",
    "OUR_KERNELS",
    "OUR_TYPES",
    "TORCHREC_KERNELS",
    "TORCHREC_TYPES",
    "is_torchrec_form",
    "placement_of",
    "plan_from_torchrec_json",
    "read_sharding_file",
    "sharding_from_torchrec",
    "sharding_plan_from_json",
    "torchrec_plan_document",
    "torchrec_plan_json",
    "torchrec_sharding_plan",
]
