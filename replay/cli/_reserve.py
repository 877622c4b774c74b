"""`replay run`'s large arrays mapped and faulted in before its heavy imports.

A one-GPU LRU replay of a trace folder allocates arrays whose size it knows from the
trace's manifest and the system alone: the policy's key -> slot table (32 MB for a
1,000,000-row cache, in huge pages), its slots' keys (with their dirty flags) and links
(12 MB, faulted in here only where the trace's lookups can fill the cache) and the trace
statistics' state byte per row (188 MB at criteo-terabyte's rows). Faulting them in took the first
0.05-0.2 s of the replay (more right after another process freed its memory:
`replay._malloc`), the table's and the slots' on the caller's thread, whose kernel touches
the table at random from its first lookups and the slots as the cache fills. Sized here,
before numpy, numba and pyarrow are imported (0.2 s of one thread holding the GIL), they
are faulted in on the core those imports leave idle (`replay._malloc.reserve_state`), and
`state_array` takes them when the policy and the statistics are made.

The sizes repeat the policy's and the statistics' own (`LRUPolicy`, `table_shape`,
`capacity_units`, `Inspector`); tests/test_startup.py pins them. A size that differs
(a setting read differently here) only leaves a reservation unused, which
`release_reserved` unmaps after the replay: the results never depend on this. Anything
this cannot read (a bad system, a bad trace) is left for the command's own checks, which
say what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from replay.errors import ReplayError

# what reading a manifest or a system can raise here: left for the command's own checks
_UNREADABLE = (
    ReplayError,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    ArithmeticError,
)

# the policy whose table is sized here, and its table's entries per usable slot
_LRU = "lru"
_TABLE_ENTRY_BYTES = 8


def lru_table_entries(total_keys: int, slots: int) -> int:
    """Entries of the LRU's key -> slot table (`replay.policies.lru.table_shape`)."""
    used = max(1, min(int(slots), int(total_keys)))
    return 1 << max(4, (4 * used - 1).bit_length())


def _manifest(trace: Path) -> dict[str, Any] | None:
    """The trace folder's manifest, or None where it cannot be read."""
    from replay._files import MANIFEST, read_bytes

    try:
        manifest = json.loads(read_bytes(trace / "manifest.json", MANIFEST))
        rows = [int(t["rows"]) for t in manifest["tables"]]
    except (*_UNREADABLE, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) and sum(rows) > 0 else None


def _total_rows(manifest: dict[str, Any]) -> int:
    return sum(int(t["rows"]) for t in manifest["tables"])


def _lru_bytes(
    manifest: dict[str, Any], system: str, overrides: list[str]
) -> list[tuple[int, bool]]:
    """The LRU's table (huge pages) and, where the trace's lookups can fill the cache,
    its slots' arrays; none for another policy, a cluster or a system that cannot be
    read."""
    from replay.system.optimizer import with_workload_rule
    from replay.system.spec import (
        BYTES_PER_VALUE,
        apply_overrides,
        build_system,
        load_system_data,
        optimizer_bytes_per_row,
    )

    try:
        workload = manifest.get("workload") or {}
        data, origin = load_system_data(system)
        spec = build_system(apply_overrides(data, overrides) if overrides else data, origin)
        spec = with_workload_rule(spec, workload)
        p = spec.policy
        if spec.cluster is not None or p.name != _LRU:
            return []
        if p.capacity_rows > 0:
            capacity = p.capacity_rows
        else:
            dim = spec.model.embedding_dim or int(workload.get("embedding_dim", 0))
            state = BYTES_PER_VALUE * dim + optimizer_bytes_per_row(spec.model.optimizer, dim)
            if state <= 0:  # no dimension known here: the command's own checks say why
                return []
            budget = p.capacity_bytes or spec.tier(p.fast_tier).capacity_bytes
            capacity = int(budget // state)
    except _UNREADABLE:
        return []
    if capacity < 1:
        return []
    total = _total_rows(manifest)
    lookups = int(manifest.get("lookups", 0))
    # no more slots than rows nor than lookups (`PolicyContext.slots`)
    slots = max(1, min(capacity, total, lookups) if lookups > 0 else min(capacity, total))
    sizes = [(lru_table_entries(total, slots) * _TABLE_ENTRY_BYTES, True)]
    if lookups >= slots:  # the trace may fill them (always, where it has lookups)
        key = 4 if total + 1 < 2**31 else 8  # `index_dtype`
        index = 4 if slots + 1 < 2**31 else 8
        # each slot's key (and dirty flag), its two links (and the sentinel's)
        sizes += [(key * slots, False), (index * (2 * slots + 2), False)]
    return sizes


def replay_state_bytes(
    trace: Path, system: str, overrides: list[str], *, inspect: bool
) -> list[tuple[int, bool]]:
    """(bytes, huge pages) of the arrays a one-GPU `replay run` of the trace folder
    `trace` on `system` allocates at its start: the LRU's (for policy `lru`) and, with
    `inspect`, the statistics' state. Empty where the trace cannot be read, and without
    the LRU's where the system cannot be (the command then says why)."""
    manifest = _manifest(trace)
    if manifest is None:
        return []
    stats = [(_total_rows(manifest), False)] if inspect else []
    return [*_lru_bytes(manifest, system, overrides), *stats]


def reserve_replay_state(
    trace: Path | None,
    workload: str | None,
    system: str,
    overrides: list[str],
    *,
    inspect: bool | None,
    resume: bool,
) -> None:
    """Start faulting in the arrays of `replay_state_bytes` (a trace folder's replay
    only: not --workload, whose statistics are off by default and sized otherwise, and
    not --resume, which may replay nothing): the statistics' state (the largest) as soon
    as the manifest is read, the LRU's once the system is (its modules take 10-20 ms to
    import)."""
    if trace is None or workload is not None or resume:
        return
    from replay._malloc import reserve_state, touches_most_pages

    manifest = _manifest(trace)
    room = _room()
    if manifest is None or room is None:
        return

    def reserve(sizes: list[tuple[int, bool]]) -> None:
        nonlocal room
        for nbytes, huge in sizes:
            # before the run's memory check: never more than half of what the machine
            # has, so that a run it refuses is refused, not killed
            if nbytes <= room:
                room -= nbytes
                reserve_state(nbytes, huge=huge)

    rows = _total_rows(manifest)
    # the statistics' byte per row, where the trace may touch most of its pages
    if inspect is not False and touches_most_pages(rows, int(manifest.get("lookups", 0))):
        reserve([(rows, False)])
    reserve(_lru_bytes(manifest, system, overrides))


def _room() -> int | None:
    """Bytes that may be reserved: half of the memory available (the smaller of the
    run's memory check's figure and what the kernel could give now); None where unknown."""
    from replay._memory import available_memory, memory_available_now

    try:
        figures = [available_memory()[0], memory_available_now()]
    except ReplayError:  # a bad REPLAY_MEMORY_LIMIT: the command says so
        return None
    known = [f for f in figures if f is not None]
    return min(known) // 2 if known else None


__all__ = ["lru_table_entries", "replay_state_bytes", "reserve_replay_state"]
