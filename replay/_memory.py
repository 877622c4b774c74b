"""Memory estimates: what a command will hold, checked against the machine before it starts.

The large allocations of every replaying command are per row of the row space (R = Σ
rows over the tables, whatever the trace's length): the policy's key map, the distinct
-row bitmap, the statistics' state word, the miss-ratio curve's last-access array. A
workload of 12 tables x 4e9 rows asks for ~45 GiB at 1 B per row; without a check the
first `mmap` fails with ENOMEM, which the CLI can only report as an operating-system
error that reads like a disk problem. So each command adds up its state here, from the
shape alone (row counts, lookups, batches: the manifest or the spec), and refuses with
the figure before it allocates anything.

Assumptions:

- An estimate is an upper bound on what the command allocates beyond the process it
  starts in (imports, numba's code) and the batches in flight (a few row groups of ~1 M
  lookups each, read ahead; `MARGIN_BYTES` covers both). Terms that depend on how many
  distinct rows a trace touches take every row the trace could touch, min(R, lookups):
  the estimate may be high for a skewed trace, never low.
- Per-key and per-lookup figures come from the classes that allocate them (a policy's
  `state_bytes_per_key`, ...), passed in by the caller: this module imports nothing of
  the engine, so it stays a pure foundation.
- What the machine has is its physical memory, lowered to the cgroup's limit (v2
  `memory.max`, v1 `memory.limit_in_bytes`) where one is set: the most a process can
  ever hold without swapping. Not MemAvailable: it moves with the page cache and other
  processes, so the same command on the same machine would pass or fail from one minute
  to the next, and the per-row kernels touch memory at random, so a workload that only
  fits by swapping is no workload to run either. `REPLAY_MEMORY_LIMIT` (bytes, or a
  number with K, M, G or T for KiB ... TiB) replaces the figure: to keep a command to a
  share of a shared machine, or to let it use swap on purpose. Under an address-space
  limit (RLIMIT_AS) the figure is at most the room the limit leaves (what the process
  may still map): there numpy fails at the limit whatever the machine has.
- Every setting that sizes a structure is in an estimate before anything is allocated:
  a cache is allocated no more slots than the rows it could hold (a larger one never
  evicts), so a capacity beyond them costs nothing; a cluster's state of each GPU (its
  cache, its policy, its columns per batch) is counted once per GPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from replay._units import format_bytes
from replay.errors import ConfigError

if TYPE_CHECKING:  # numpy is not imported at run time: the console's start
    import numpy as np

ENV_LIMIT = "REPLAY_MEMORY_LIMIT"
# imports, numba's code, the batch ranges in flight (read ahead, queued): not in an estimate
MARGIN_BYTES = 512 << 20
# the per-batch columns of a run (counters, lookups, times, checkpoint log), measured at
# 1.2-1.9 KB per batch (`replay run --workload tiny --batch-size 1`, 2,000 vs 400,000
# batches, hbm-lru and ssd), rounded up
RUN_BYTES_PER_BATCH = 4096
# a batch range in flight: its lookup columns (batch, table, row) and the replay stream's
# flat keys, bounds and update keys (measured for the plan's estimate, runs/plan_memory.py)
IN_FLIGHT_BYTES_PER_LOOKUP = 17
# Flat keys (offset of the table + row) are int64 in every kernel.
MAX_ROW_SPACE = 2**63 - 1

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Estimate:
    """The bytes a command needs, by part; `detail` says how the largest part is made."""

    what: str  # "replay run", ...
    parts: tuple[tuple[str, int], ...]  # (name, bytes), largest first
    detail: str = ""  # e.g. "12 tables x 4e9 rows x 4.1 B"
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> int:
        return sum(b for _, b in self.parts)


def format_count(n: int) -> str:
    """Row counts as people write them: 33,762,577 below 1e10, 4e+10 style above."""
    if n < 10**10:
        return f"{n:,}"
    mantissa, exponent = f"{n:.3g}".split("e+")
    return f"{mantissa}e{int(exponent)}"


def _bytes_per(value: float) -> str:
    return f"{value:.3g} B"


def row_space(table_rows: Iterable[int]) -> int:
    """Σ rows in Python integers (a numpy int64 sum wraps silently past 2^63)."""
    return sum(int(r) for r in table_rows)


def check_row_space(table_rows: Sequence[int], where: str = "") -> int:
    """R, or ConfigError when the flat int64 keys cannot number every row."""
    total = row_space(table_rows)
    if total > MAX_ROW_SPACE:
        prefix = f"{where}: " if where else ""
        raise ConfigError(
            f"{prefix}{len(table_rows)} tables of {format_count(total)} rows in all are "
            f"above the limit of 2^63 - 1 rows that the replay's int64 row keys can number"
        )
    return total


def _rows_detail(table_rows: Sequence[int] | np.ndarray, per_row: float) -> str:
    rows = [int(r) for r in table_rows]
    if len(rows) > 1 and len(set(rows)) == 1:
        shape = f"{len(rows)} tables x {format_count(rows[0])} rows"
    elif len(rows) == 1:
        shape = f"1 table of {format_count(rows[0])} rows"
    else:
        shape = f"{len(rows)} tables, {format_count(sum(rows))} rows"
    return f"{shape} x {_bytes_per(per_row)}"


def _ceil(x: float) -> int:
    return math.ceil(x)


# -- estimates --------------------------------------------------------------------------


INSPECT_BYTES_PER_ROW = 1  # replay.analysis.stats: one uint8 state word per row
INSPECT_BYTES_PER_WRAP = 8  # one int64 flat row per 63 lookups of a row, at most
INSPECT_WRAPS_HELD = 1 << 22  # wrap events held before they are folded into pairs
INSPECT_SMALL_ROWS = 1 << 16  # tables of at most this many rows count apart, 8 B a row
# the two per-batch lists of the rows a batch looked up first (`replay.analysis.stats`):
# room for a batch's lookups, at most max(INSPECT_LIST_MIN, R / INSPECT_LIST_DIVISOR)
# entries each (a batch that looks up more rows is swept), grown by a quarter
INSPECT_LIST_MIN = 1 << 16
INSPECT_LIST_DIVISOR = 512


def inspect_wraps_bytes(table_rows: Sequence[int], lookups: int) -> int:
    """The statistics beside their byte per row: the count wraps (events, then one
    (row, wraps) pair of 16 B per row that wrapped) and the small tables' counts."""
    rows = [int(r) for r in table_rows]
    events = min(max(lookups, 0) // 63 + 1, INSPECT_WRAPS_HELD) * INSPECT_BYTES_PER_WRAP
    pairs = min(max(lookups, 0) // 64 + 1, sum(rows)) * 16
    return events + pairs + 8 * sum(r for r in rows if r <= INSPECT_SMALL_ROWS)


def inspect_list_cap(total_rows: int) -> int:
    """Entries a per-batch list of first-looked-up rows holds at most
    (`replay.analysis.stats`: a batch that looks up more rows is swept)."""
    return max(INSPECT_LIST_MIN, int(total_rows) // INSPECT_LIST_DIVISOR)


def inspect_lists_bytes(total_rows: int, lookups: int) -> int:
    """The three per-batch lists of first-looked-up rows (`replay.analysis.stats`), at
    their largest (a batch holds `lookups` at most)."""
    entries = min(max(lookups, 0), inspect_list_cap(total_rows))
    itemsize = 4 if total_rows <= 2**32 else 8
    return 3 * _ceil(entries * 1.25) * itemsize


# Above this many rows (1 B of state each), `replay inspect` takes the tables in groups
# of at most `INSPECT_GROUP_ROWS` rows, each over every batch with a state of its own
# rows only (`replay.analysis.table_major`): meta-2021's 5.16 G rows in 5 groups of
# <= 1 GiB instead of 4.80 GiB at once. Below it, the one pass over the trace.
INSPECT_TABLE_MAJOR_ROWS = 1 << 31
INSPECT_GROUP_ROWS = 1 << 30
# the table-major pass's per-batch sums: the statistics' (lookups, distinct, reused) and
# the reuse histograms' (2 x 16 bins, lookups, distinct), int64 each
INSPECT_BATCH_SUMS_BYTES = 8 * (3 + 2 * 16 + 2)
# each batch's distinct rows, counted where an on-the-fly workload steps every batch
# (`replay.analysis.stats.inspect_trace`: int64 a batch)
INSPECT_BYTES_PER_BATCH = 8


def inspect_groups(
    table_rows: Sequence[int], pieces: Sequence[tuple[int, int]] = (), group_rows: int = 0
) -> list[tuple[int, int]]:
    """The groups of tables [t0, t1) of the table-major pass: consecutive pieces of a
    batch (`pieces`, table ranges; else single tables) while their rows add up to at
    most `group_rows` (`INSPECT_GROUP_ROWS` when 0), one piece at least."""
    limit = int(group_rows) or INSPECT_GROUP_ROWS
    rows = [int(r) for r in table_rows]
    units = list(pieces) or [(t, t + 1) for t in range(len(rows))]
    groups: list[tuple[int, int]] = []
    start, size = 0, 0
    for t0, t1 in units:
        n = sum(rows[t0:t1])
        if t0 > start and size + n > limit:
            groups.append((start, t0))
            start, size = t0, 0
        size += n
    groups.append((start, len(rows)))
    return groups


def inspect_table_major(table_rows: Sequence[int]) -> bool:
    """Whether `replay inspect` takes the tables in groups (a row space above
    `INSPECT_TABLE_MAJOR_ROWS`)."""
    return row_space(table_rows) > INSPECT_TABLE_MAJOR_ROWS


def inspect_estimate(
    table_rows: Sequence[int],
    lookups: int,
    in_flight: int = 0,
    run_lookups: int = 0,
    *,
    batches: int = 0,
    pieces: Sequence[tuple[int, int]] = (),
) -> Estimate:
    """`replay inspect`: 1 B per row, the count wraps and the small tables' counts, the
    per-batch lists, the batch ranges it holds at once (`in_flight`, bytes), and the
    reuse within a batch's keys of one (batch, table) run and their sorted copy
    (`run_lookups`: the largest run's lookups, 16 B each). Table-major (a row space
    above `INSPECT_TABLE_MAJOR_ROWS`): the state and lists of the largest group of
    tables (`inspect_groups` of the batch's `pieces`) and the per-batch sums instead.
    `batches`: each batch's distinct rows (8 B a batch)."""
    total = row_space(table_rows)
    detail = _rows_detail(table_rows, INSPECT_BYTES_PER_ROW)
    state = total
    grouped = inspect_table_major(table_rows)
    if grouped:
        groups = inspect_groups(table_rows, pieces)
        state = max(row_space(table_rows[t0:t1]) for t0, t1 in groups)
        detail = (
            f"{len(groups)} groups of tables taken in turn, the largest "
            f"{format_count(state)} rows x {_bytes_per(INSPECT_BYTES_PER_ROW)}"
        )
    if in_flight > (1 << 30):
        detail += f"; batches in flight {format_bytes(in_flight)}"
    parts = [
        ("row state", state * INSPECT_BYTES_PER_ROW),
        ("count wraps", inspect_wraps_bytes(table_rows, lookups)),
        ("per-batch lists", inspect_lists_bytes(state, lookups)),
    ]
    if grouped:
        parts.append(("per-batch sums", INSPECT_BATCH_SUMS_BYTES * max(int(batches), 0)))
    if batches > 0:
        per_batch = INSPECT_BYTES_PER_BATCH * int(batches)
        parts.append(("per-batch distinct rows", per_batch))
        if per_batch > state * INSPECT_BYTES_PER_ROW:
            detail = (
                f"{format_count(int(batches))} batches x {INSPECT_BYTES_PER_BATCH} B of "
                f"per-batch counts; and {detail}"
            )
    if in_flight > 0:
        parts.append(("batches in flight", in_flight))
    if run_lookups > 0:
        parts.append(("a table's run of lookups", 16 * run_lookups))
    return Estimate("replay inspect", tuple(parts), detail)


def mrc_index_bytes(total_rows: int, min_window: int = 1 << 16) -> int:
    """The position dtype of `replay.analysis.stack.StackDistances`: int32 while 4 R +
    window fits, else int64."""
    return 4 if 4 * total_rows + min_window + 64 < 2**31 else 8


def mrc_estimate(
    table_rows: Sequence[int], lookups: int, sample_rate: float | None, *, dense: bool = True
) -> Estimate:
    """`replay mrc` (and `replay plan`'s curves). Exact: a last position per row (4 or 8 B),
    or with `dense` False (both callers take it from `replay.analysis.stack.dense_rows`: a
    row space large against the lookups) a map of the rows seen (per row up to 2 last
    positions and 4 slots of a key and an id, each array grown by doubling); and per
    distinct key its window (>= 4 positions of `index` bytes plus the bitmap and tree:
    4.2 x index) and histogram bucket (8 B, grown by doubling: 16). Sampled: a hash map
    over the sampled keys only (per key: last position, 2 map slots of 8 + index bytes,
    window, histogram), in the full sample and in its 8 groups (twice the keys in all)."""
    total = row_space(table_rows)
    distinct = min(total, max(int(lookups), 0))
    index = mrc_index_bytes(total)
    per_distinct = 4.2 * index + 16
    if sample_rate is None:
        rows = (
            ("row state", total * index)
            if dense
            else ("rows seen", distinct * (2 * index + 4 * (8 + index)))
        )
        return Estimate(
            "replay mrc",
            (rows, ("distinct rows", _ceil(distinct * per_distinct))),
            _rows_detail(table_rows, index),
        )
    # a rate out of (0, 1] is refused later, by `replay.analysis.mrc.validate_options`
    rate = sample_rate if math.isfinite(sample_rate) and 0 < sample_rate <= 1 else 1.0
    sampled = _ceil(distinct * rate)
    # a hash map doubles when half full: up to 4 slots per key of (8 + 8) B, plus the
    # key's last position; twice over (the full sample and its 8 groups)
    per_key = 8 + 4 * 16 + per_distinct
    return Estimate(
        "replay mrc",
        (("sampled rows", _ceil(2 * sampled * per_key)),),
        f"{format_count(sampled)} sampled rows x {_bytes_per(2 * per_key)}",
    )


@dataclass(frozen=True)
class RunState:
    """What one replay holds, from the policy's and the strategy's classes (see
    `replay.runs.compare.run_state`)."""

    bytes_per_key: float  # policy + checkpoint strategy + bitmaps (+ statistics)
    slots: int  # slots of state per looked-up row (hot's selection)
    bytes_per_slot: float
    bytes_per_lookup: float  # oracles' next-use arrays
    label: str = ""  # "policy lru 4 B, distinct-row bitmap 0.125 B, ..."
    # what the settings size besides the rows and lookups: the caches (their slots, at
    # most the units of the rows; FBGEMM's ways as the capacity gives them), a cluster's
    # state of each GPU
    fixed_bytes: int = 0
    bytes_per_batch: int = 0  # beyond `RUN_BYTES_PER_BATCH`: a cluster's columns per GPU
    notes: tuple[str, ...] = ()  # how `fixed_bytes` and `bytes_per_batch` are made


# a worker process of `compare`/`sweep` before its run: the interpreter, numpy, numba's
# code and the engine (~190 MB RSS measured for a whole tiny `replay run`), rounded up
PROCESS_BYTES = 256 << 20


def run_estimate(
    table_rows: Sequence[int] | np.ndarray,
    lookups: int,
    batches: int,
    states: Sequence[RunState],
    *,
    parallel: int = 1,
    statistics: bool = False,
    what: str = "replay run",
    in_flight: int = 0,
) -> Estimate:
    """A replay of each of `states` (compare, sweep: `parallel` at once, the largest
    ones, each in its own process), plus, with `statistics`, the trace statistics that
    `compare`/`sweep` compute first (1 B per row); `in_flight`: the bytes of the batch
    ranges one replay holds at once (a batch is never split: a batch of 887 M lookups
    holds 15 GB)."""
    total = row_space(table_rows)
    per_run = [
        _ceil(total * s.bytes_per_key)
        + _ceil(s.slots * s.bytes_per_slot)
        + _ceil(max(lookups, 0) * s.bytes_per_lookup)
        + max(batches, 0) * (RUN_BYTES_PER_BATCH + max(s.bytes_per_batch, 0))
        + max(s.fixed_bytes, 0)
        + max(in_flight, 0)
        for s in states
    ]
    order = sorted(range(len(states)), key=lambda i: -per_run[i])
    chosen = order[: max(1, min(parallel, len(states)))]
    parts = [("row state", sum(per_run[i] for i in chosen))]
    if statistics:
        parts.append(("statistics", total * INSPECT_BYTES_PER_ROW))
    if len(chosen) > 1:
        parts.append(("worker processes", len(chosen) * PROCESS_BYTES))
    if not states:  # runs elsewhere (a remote cluster): the statistics alone
        return Estimate(what, tuple(parts), _rows_detail(table_rows, INSPECT_BYTES_PER_ROW))
    worst = states[order[0]]
    detail = _rows_detail(table_rows, worst.bytes_per_key)
    if worst.label:
        detail += f": {worst.label}"
    # the settings' parts first where they are larger than the rows'
    rows_part = total * worst.bytes_per_key
    columns = max(batches, 0) * RUN_BYTES_PER_BATCH
    lead = []
    if not worst.bytes_per_batch and columns > max(rows_part, worst.fixed_bytes):
        lead.append(
            f"{format_count(max(batches, 0))} batches x {format_bytes(RUN_BYTES_PER_BATCH)} "
            "of per-batch columns"
        )
    sized = worst.fixed_bytes + max(batches, 0) * worst.bytes_per_batch
    if worst.notes and sized > rows_part:
        lead += worst.notes
    if lead:
        detail = "; ".join(lead) + f"; and {detail}"
    if in_flight > (1 << 30):  # worth naming: batches too large to stream in pieces
        detail += f"; batches in flight {format_bytes(in_flight)}"
    if len(chosen) > 1:
        detail = f"{len(chosen)} runs at once, each {detail}"
    if statistics:
        detail += f"; and the statistics, {INSPECT_BYTES_PER_ROW} B per row"
    return Estimate(what, tuple(parts), detail)


# -- what the machine has ---------------------------------------------------------------


def parse_size(text: str) -> int:
    """`16G`, `16GiB`, `512M`, `1073741824` -> bytes (binary units); ValueError if not."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    number = float(raw[: len(raw) - len(unit)])
    if not math.isfinite(number) or number <= 0:
        raise ValueError(text)
    return int(number * _UNITS[unit])


def _cgroup_files() -> list[Path]:
    """Where this process's cgroup memory limit may be: its own cgroup's file (v2
    `memory.max`, v1 `memory.limit_in_bytes`), then the mount's root (a container sees
    its own cgroup there)."""
    root = Path("/sys/fs/cgroup")
    files = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:  # "ID:CONTROLLERS:PATH"; v2 is "0::PATH"
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.strip().lstrip("/")
        if controllers == "":
            files.append(root / relative / "memory.max")
        elif "memory" in controllers.split(","):
            files.append(root / "memory" / relative / "memory.limit_in_bytes")
    files += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    return files


def _cgroup_limit() -> int | None:
    """The smallest memory limit of this process's cgroup files, or None if unlimited."""
    limits = []
    for path in _cgroup_files():
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" (v2), ~2^63 (v1): no limit
            limits.append(int(text))
    return min(limits, default=None)


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def memory_available_now() -> int | None:
    """MemAvailable (`/proc/meminfo`): what the kernel could give a new process now without
    swapping, which other processes and the page cache move; None where unreadable. Said
    beside an estimate (`replay plan --dry-run`); `check_fits` keeps the steadier figure."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_room() -> int | None:
    """Bytes this process may still map under its address-space limit (RLIMIT_AS, e.g.
    `ulimit -v`): the limit less what it maps already (`VmSize`); None without a limit.
    Such a limit refuses an allocation the machine could hold (numpy's `MemoryError`), so
    an estimate is checked against it too."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    mapped = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                mapped = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    return max(int(soft) - mapped, 0)


def available_memory() -> tuple[int | None, str]:
    """(bytes, what they are): REPLAY_MEMORY_LIMIT, or physical memory lowered to the
    cgroup's limit; either lowered to the room under an address-space limit
    (`address_space_room`); (None, "") where none can be read (then nothing is
    refused)."""
    have, source = _memory_figure()
    room = address_space_room()
    if room is not None and (have is None or room < have):
        return room, "the room left under its address-space limit (RLIMIT_AS)"
    return have, source


def _memory_figure() -> tuple[int | None, str]:
    override = os.environ.get(ENV_LIMIT)
    if override:
        try:
            return parse_size(override), f"{ENV_LIMIT}={override}"
        except (ValueError, IndexError):
            raise ConfigError(
                f"{ENV_LIMIT}: {override!r} is not a size (give bytes, or e.g. 16G)"
            ) from None
    physical = physical_memory()
    limit = _cgroup_limit()
    if limit is not None and (physical is None or limit < physical):
        return limit, "its memory limit (cgroup)"
    if physical is None:
        return None, ""
    return physical, "physical memory"


def check_fits(estimate: Estimate) -> None:
    """ConfigError naming the estimate and what the machine has, if it does not fit."""
    have, source = available_memory()
    if have is None or estimate.total + MARGIN_BYTES <= have:
        return
    raise ConfigError(
        f"{estimate.what}: this workload needs about {format_bytes(estimate.total)} of "
        f"memory ({estimate.detail}); this machine has {format_bytes(have)} ({source})"
    )


__all__ = [
    "ENV_LIMIT",
    "MARGIN_BYTES",
    "MAX_ROW_SPACE",
    "Estimate",
    "RunState",
    "address_space_room",
    "available_memory",
    "check_fits",
    "check_row_space",
    "format_bytes",
    "format_count",
    "inspect_estimate",
    "memory_available_now",
    "mrc_estimate",
    "parse_size",
    "physical_memory",
    "row_space",
    "run_estimate",
]
