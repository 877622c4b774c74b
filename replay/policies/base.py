"""The placement-policy plug-in interface, its registry and its counters.

A policy sees every lookup, in trace order, as one request for the flat key (table, row)
(`replay.trace.keys`); a lookup is a hit when its row is resident in the fast tier. After
a batch's lookups come its update rows (the optimizer step): an updated row that is
resident becomes dirty (written back when evicted); one that is not resident is updated
where it lives, in the backing tier.

`process` fills one row of integer counters per batch (columns below). Counters are the
ground truth; bytes, time and energy are derived from them by `replay.engine.account`.
Units: *lookups* for HITS, MISSES and BYPASS; *units* (rows, or chunks for `chunk`) for
FILLS, EVICTIONS, WRITEBACKS and the RESIDENT columns; *rows* for UPDATES_* and NEEDED_ROWS.

Every policy module defines its numba kernel and a slow, obviously correct pure-Python
reference (`reference_*`) that the tests compare the kernel with on random traces.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from replay._malloc import state_array
from replay._registry import Registry
from replay._units import format_bytes
from replay.errors import ConfigError

if TYPE_CHECKING:
    from replay.system.spec import PolicySpec, SystemSpec
    from replay.trace.stream import BatchRange
    from replay.workload.source import Source

# per-batch counter columns (int64)
HITS = 0  # lookups whose row was resident in the fast tier
MISSES = 1  # lookups whose row was not
BYPASS = 2  # misses served straight from the backing tier, nothing cached
FILLS = 3  # units copied into the fast tier
EVICTIONS = 4  # units dropped from the fast tier
WRITEBACKS = 5  # evicted units that were dirty (copied back to the backing tier)
UPDATES_FAST = 6  # updated rows resident in the fast tier after the batch's lookups
UPDATES_BACKING = 7  # updated rows updated in the backing tier
RESIDENT = 8  # units resident at the end of the batch
RESIDENT_MAX = 9  # most units resident at any time during the batch
NEEDED_ROWS = 10  # distinct rows used from the units filled (amplification's denominator)
NUM_COUNTERS = 11
COUNTER_NAMES = (
    "hits",
    "misses",
    "bypass",
    "fills",
    "evictions",
    "writebacks",
    "updates_fast",
    "updates_backing",
    "resident",
    "resident_max",
    "needed_rows",
)


_SMALL_PAGE_BYTES = 4096
_LOOKUPS_PER_SMALL_PAGE = 16


@dataclass(frozen=True)
class PolicyContext:
    """What a policy needs to know about the trace and the system."""

    total_keys: int  # Σ rows over tables: keys are in [0, total_keys)
    table_rows: np.ndarray  # int64 rows per table
    offsets: np.ndarray  # int64 key offset per table (len tables + 1)
    num_batches: int
    row_state_bytes: int  # one row plus its optimizer state
    capacity_units: int  # rows (or chunks) the fast tier may hold; 0 for static
    unit_rows: int = 1  # rows per unit (chunk_rows for chunk)
    num_lookups: int = 0  # lookups the policy will see; 0: not known (a long run)

    def row_array(self, dtype: type | np.dtype, fill: int = 0) -> np.ndarray:
        """One item per key, set to `fill`: in 2 MiB pages only where the trace has
        `_LOOKUPS_PER_SMALL_PAGE` lookups per 4 KiB page of the array or more. A short
        trace touches a few of a large row space's pages (a skewed one fewer still), each
        2 MiB page it touches is zeroed whole, and a VM that backs a fresh huge page again
        page by page (`replay._malloc`) makes that far dearer: Criteo Terabyte's 750 MB
        per-row map took 11-15 s in huge pages against 0.7-1.0 s in 4 KiB ones (2-core VM,
        load 6-7), and Belady's kernel over the docs' quickstart trace (672,000 lookups,
        3.7 a page) 7.9 s, nearly all of it faults."""
        nbytes = self.total_keys * np.dtype(dtype).itemsize
        pages = nbytes // _SMALL_PAGE_BYTES
        dense = self.num_lookups == 0 or self.num_lookups >= _LOOKUPS_PER_SMALL_PAGE * pages
        return state_array(self.total_keys, dtype, fill, huge=dense)

    @property
    def slots(self) -> int:
        """Cache slots to allocate: `capacity_units`, but no more than the units of the
        rows (`usable_units`) nor, where known, the lookups the policy will see: a cache
        holds at most one unit per lookup, so one of that many slots never evicts either
        (a short trace on a cache of gigabytes allocates for its lookups, not for the
        gigabytes)."""
        return usable_units(self.capacity_units, self.total_keys, self.unit_rows, self.num_lookups)


class Policy(ABC):
    """A placement policy: fills per-batch counters for consecutive batch ranges."""

    name: ClassVar[str]
    cached: ClassVar[bool] = True  # False: no fast tier (static)
    evicts: ClassVar[bool] = True  # False: what is cached stays (hot's pinned set)
    #: True: a row enters the fast tier only when a lookup of that row misses, one row per
    #: fill (or not even then: Belady's bypass). Belady's MIN with bypass has the fewest
    #: misses of every such cache of the same capacity (Belady 1966; Mattson et al. 1970);
    #: policies that copy rows in ahead of their lookups (hot's pinned set, chunk's
    #: neighbours and backward-pass fills) are not bounded by it and can miss less.
    demand_fill: ClassVar[bool] = False
    #: documented per-key state, bytes (the memory a run needs besides the batches in flight)
    state_bytes_per_key: ClassVar[int] = 0
    #: True: `process` takes ranges whose update rows are their batches' distinct lookups
    #: without their keys (`BatchRange.updates_are_lookups`); the engine asks for such
    #: ranges only then (`iter_batch_ranges(updates_from_lookups=True)`)
    updates_from_lookups: ClassVar[bool] = False
    #: True: `process` takes a piece of one batch (`BatchRange.tables`, asked for with
    #: `iter_batch_ranges(pieces=True)` when a batch is too large for a row group): it
    #: adds the piece's counts to out[0], the batch's row, and closes the batch (what
    #: waits for its end: the update pass) at the piece that `ends_batch`
    takes_pieces: ClassVar[bool] = False
    #: True: `process` takes ranges with each batch's distinct lookups in order
    #: (`iter_batch_ranges(with_order=True)`, `BatchRange.order`) where their update rows
    #: are those rows, and `warm_up` on `empty_range(ordered=True)` loads what they take
    takes_order: ClassVar[bool] = False
    #: True: the cache is allocated `ctx.slots` (no more slots than units of its rows)
    sized_to_rows: ClassVar[bool] = False

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        self.spec = spec
        self.ctx = ctx

    @classmethod
    def check_spec(cls, system: SystemSpec, tier_names: set[str], where: str) -> None:
        """Validate the policy's knobs against the system (names, capacities)."""
        p = system.policy
        for key in ("fast_tier", "backing_tier"):
            value = getattr(p, key)
            if value not in tier_names:
                raise ConfigError(f"{where}.{key}: no tier named {value!r}")
        if p.fast_tier == p.backing_tier:
            raise ConfigError(f"{where}: fast_tier and backing_tier must differ")
        if system.lookup.location != "gpu":
            raise ConfigError(
                f"{where}.name: policy {p.name!r} caches rows beside the GPU; it needs "
                f'lookup.location = "gpu" (got {system.lookup.location!r})'
            )

    @classmethod
    def unit_rows(cls, spec: PolicySpec) -> int:
        return 1

    @classmethod
    def capacity(
        cls, system: SystemSpec, unit_rows: int, row_state_bytes: int, total_keys: int
    ) -> int:
        """Units the fast tier holds for this policy (`capacity_units` unless a policy
        sizes its cache its own way, as `tbe` does with a load factor and whole sets)."""
        return capacity_units(system, unit_rows, row_state_bytes)

    def summary_extra(self) -> dict[str, object]:
        """Policy-specific totals for summary.json's `policy` section (none by default)."""
        return {}

    def sizing_notes(self) -> list[str]:
        """What was allocated smaller than the settings asked, and why the counters are
        still those of the settings (meta.json's `sizing`)."""
        ctx = self.ctx
        if not type(self).sized_to_rows or ctx.slots >= ctx.capacity_units:
            return []
        unit = "chunks" if ctx.unit_rows > 1 else "rows"
        tables = usable_units(ctx.capacity_units, ctx.total_keys, ctx.unit_rows)
        bound = f"the {unit} of the tables" if ctx.slots == tables else "the trace's lookups"
        return [
            f"policy: a cache of {ctx.capacity_units:,} {unit} allocated as {ctx.slots:,} "
            f"slots, {bound}: it can hold no more, and its counters "
            "are those of the capacity given"
        ]

    def store_rows(self) -> np.ndarray | None:
        """Rows per batch moved behind the backing tier, for a policy with a third level
        (`ssd-tbe`'s L2 and store: `replay.policies.ssd_tbe.STORE_NAMES` columns, one row
        per batch of the run, filled by `process`); None for two levels."""
        return None

    def prepare(self, trace: Source | None) -> None:  # noqa: B027 - optional hook
        """An optional pass over the whole trace before `process` (oracles)."""

    @abstractmethod
    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        """Fill out[i, :] for batch batch_range.batch_start + i (out is zeroed)."""

    def needs_prepare(self) -> bool:
        return False

    def warm_up(self, empty: BatchRange) -> None:  # noqa: B027 - optional hook
        """Get ready for the first `process` call, on a helper thread while the first
        batch range is still being read: load the kernels (`empty` is a range of no
        batches, made the way the stream makes every range, so a kernel sees the
        argument types it will see) and fault in the per-key state. Must not change
        what `process` computes."""

    def prefault(self) -> None:  # noqa: B027 - optional hook
        """Fault in large state while `process` may already run (on a helper thread,
        after `warm_up`, not waited for): only what leaves the state's contents as they
        are, such as `replay._malloc.populate`."""


# the built-in policies, each in the module `replay.policies` imports on its first look-up
POLICIES: Registry[type[Policy]] = Registry(
    "policy", ("belady", "chunk", "hot", "lfu", "lru", "ssd-tbe", "static", "tbe")
)


def register_policy(name: str) -> Callable[[type[Policy]], type[Policy]]:
    """Class decorator: register a policy under `name` (a duplicate name is an error)."""

    def deco(cls: type[Policy]) -> type[Policy]:
        POLICIES.register(name, cls)
        cls.name = name
        return cls

    return deco


def usable_units(capacity: int, total_keys: int, unit_rows: int = 1, lookups: int = 0) -> int:
    """The units a cache of `capacity` units over `total_keys` rows can ever hold, at
    least 1: min(capacity, ceil(rows / unit_rows)), and for a cache of rows no more than
    `lookups` where it is known (> 0: only a lookup's miss brings a row in; a chunk also
    enters for a backward request, and `chunk` sizes its heap by its budgets). A cache at
    least that large holds every row it is asked for and never evicts, so slots beyond it
    would never be filled: caches are allocated to this size and report the capacity they
    were given (a run's counters are those of the capacity as given; `study_warnings`
    says when the cache held everything)."""
    units = -(-max(int(total_keys), 0) // max(int(unit_rows), 1))
    if int(lookups) > 0 and int(unit_rows) == 1:
        units = min(units, int(lookups))
    return max(1, min(int(capacity), units))


def index_dtype(largest: int) -> np.dtype:
    """The narrowest signed integer dtype (int32 or int64) that holds 0 .. `largest` + 1:
    slot numbers, heap positions and slot + 1 maps of a cache of `largest` slots."""
    return np.dtype(np.int32 if int(largest) + 1 < 2**31 else np.int64)


def capacity_units(system: SystemSpec, unit_rows: int, row_state_bytes: int) -> int:
    """How many units the fast tier holds: capacity_rows if given, else the byte budget
    (or the whole fast tier) over the unit's bytes, rounded down."""
    p = system.policy
    if p.capacity_rows > 0:
        rows = p.capacity_rows
        units = rows // unit_rows
        budget: float = rows * row_state_bytes
    else:
        budget = p.capacity_bytes or system.tier(p.fast_tier).capacity_bytes
        units = int(budget // (unit_rows * row_state_bytes))
    fast = system.tier(p.fast_tier)
    if budget > fast.capacity_bytes:
        raise ConfigError(
            f"policy: a cache of {format_bytes(budget)} does not fit tier {fast.name!r} "
            f"({format_bytes(fast.capacity_bytes)})"
        )
    if units < 1:
        raise ConfigError(
            f"policy: the capacity holds no {'chunk' if unit_rows > 1 else 'row'} "
            f"({unit_rows * row_state_bytes} bytes each)"
        )
    return units
