"""The automatic sharder's TorchRec-executable mode (`cluster.sharding = "auto"`, the
default): steps 2-4 of `replay.engine.sharder`'s rule when every split must be one that
TorchRec's training path executes.

Placement. Called by `replay.engine.sharder.auto_shard` after its step 1 (the
replicas); below it, beside the cost model (`shard_cost.py`). Pure.

A table is whole (table-wise, on any GPU), table-row-wise over all GPUs of one node in
order, or row-wise over every rank in order, always in TorchRec's even blocks
(`replay.system.sharding_rules`), so only the whole tables and the node of a
table-row-wise one are free to place. A split adds its collective to every GPU holding
a block (`CostModel.row_wise`, `table_row_wise`); a table of fewer than `TINY_ROWS`
rows is never split. The search: the costliest k tables are split (k = 0, 1, 2, 3, 4,
then steps of a third), with and without the tables whose HBM bytes alone exceed the
bytes floor (below); the rest are placed largest first, either on the least-loaded GPU
(longest processing time first) or on the GPU that raises the maximum cost least, then
the maximum HBM bytes least (ties: the least loaded). Among every fill that places all
tables, the lowest maximum cost wins; a fill within `BYTES_SLACK` of it (or within
`tolerance` of max(mean, floor), what the search calls good enough) with fewer HBM bytes
on its fullest GPU wins instead (ties: fewer splits, then the order tried): a plan
2% slower in a model whose own error is larger is no worse, and its GPUs keep room for
caches and activations. The search stops at the first k whose best is within
`tolerance` of max(mean, floor).

Bytes floor: no plan holds fewer HBM bytes on its fullest GPU than max(the tables' HBM
bytes / W, the largest unsplittable piece: a tiny table whole, any other table's even
block over the W GPUs), plus the replicas' bytes on every GPU (`bytes_floor`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replay.engine.shard_cost import CostModel, TableLoad, even_shares
from replay.system.sharding import ROW_WISE, TABLE_ROW_WISE, TABLE_WISE, row_blocks

BYTES_SLACK = 0.02  # a fill this close to the best maximum cost may win on bytes

# (max cost, tables split, table -> (type, ranks, row blocks), largest shard cost)
Best = tuple[float, int, dict[int, tuple[str, list[int], list[tuple[int, int]]]], float]


def bytes_floor(loads: Sequence[TableLoad], rest: Sequence[int], world: int) -> float:
    """The fewest HBM bytes the fullest GPU can hold for the tables `rest` (module
    docstring), replicas not included."""
    total = sum(loads[t].hbm for t in rest) / world
    piece = max(
        (loads[t].hbm if loads[t].tiny else -(-loads[t].hbm // world) for t in rest), default=0
    )
    return float(max(total, piece))


class _Fill:
    """One fill of the executable mode: each GPU's load, HBM bytes held and free, and the
    tables placed (type, ranks, row blocks)."""

    def __init__(self, loads: Sequence[TableLoad], cost_of: list[float], rest: list[int],
                 world: int, gpus_per_node: int, dp_cost: float, room: int,
                 model: CostModel) -> None:  # fmt: skip
        self.loads, self.cost_of = loads, cost_of
        self.world, self.gpn = world, gpus_per_node
        g = gpus_per_node
        self.rw: dict[int, list[float]] = {}
        self.local: dict[int, list[float]] = {}
        self.rw_rows: dict[int, list[tuple[int, int]]] = {}
        self.local_rows: dict[int, list[tuple[int, int]]] = {}
        for t in rest:
            if loads[t].tiny:
                continue
            rw_fix, tw_fix = model.row_wise(loads[t]), model.table_row_wise(loads[t])
            self.rw[t] = [cost_of[t] * f + rw_fix for f in even_shares(loads[t], world)]
            self.rw_rows[t] = row_blocks(loads[t].rows, world)
            self.local[t] = [cost_of[t] * f + tw_fix for f in even_shares(loads[t], g)]
            self.local_rows[t] = row_blocks(loads[t].rows, g)
        self.dp_cost, self.room = dp_cost, room
        self.time_ref = 1.0
        self.bytes_ref = 1.0
        self.reset(False)

    def reset(self, two_d: bool) -> None:
        self.two_d = two_d
        self.load = np.full(self.world, self.dp_cost, dtype=np.float64)
        self.held = np.zeros(self.world, dtype=np.int64)
        self.free = np.full(self.world, self.room, dtype=np.int64)
        self.chosen: dict[int, tuple[str, list[int], list[tuple[int, int]]]] = {}
        self.units: dict[int, list[float]] = {}

    def _need(self, t: int, blocks: list[tuple[int, int]]) -> np.ndarray:
        return np.array([self.loads[t].hbm_of(a, b) for a, b in blocks], dtype=np.int64)

    def _take(
        self, gpus: slice | np.ndarray | int, need: np.ndarray | int, cost: list[float] | float
    ) -> None:
        self.free[gpus] -= need
        self.held[gpus] += need
        self.load[gpus] += cost

    def row_wise(self, t: int) -> bool:
        if t not in self.rw:
            return False
        need = self._need(t, self.rw_rows[t])
        if np.any(self.free < need):
            return False
        self._take(slice(None), need, self.rw[t])
        self.chosen[t] = (ROW_WISE, list(range(self.world)), self.rw_rows[t])
        self.units[t] = self.rw[t]
        return True

    def table_row_wise(self, t: int) -> bool:
        """On the node where the table's blocks leave the lowest maximum, with room."""
        g = self.gpn
        if t not in self.local or self.world // g < 2:
            return False
        need = self._need(t, self.local_rows[t])
        pick: tuple[float, int] | None = None
        for node in range(self.world // g):
            gpus = slice(node * g, (node + 1) * g)
            if np.all(self.free[gpus] >= need):
                top = float((self.load[gpus] + self.local[t]).max())
                if pick is None or top < pick[0]:
                    pick = (top, node)
        if pick is None:
            return False
        gpus = slice(pick[1] * g, (pick[1] + 1) * g)
        self._take(gpus, need, self.local[t])
        ranks = list(range(pick[1] * g, (pick[1] + 1) * g))
        self.chosen[t] = (TABLE_ROW_WISE, ranks, self.local_rows[t])
        self.units[t] = self.local[t]
        return True

    def table_wise(self, t: int) -> bool:
        """Longest processing time: the least-loaded GPU with room (ties: the lower
        rank); two-dimensional (`two_d`): the GPU that raises the maximum load least,
        then the maximum HBM bytes least (ties: the least loaded, the lower rank)."""
        need = self.loads[t].hbm
        fits = np.flatnonzero(self.free >= need)
        if len(fits) == 0:
            return False
        cost = self.cost_of[t]
        if self.two_d:
            load, held = self.load[fits] + cost, self.held[fits] + need
            top_t = np.maximum(load, self.load.max()) / self.time_ref
            top_b = np.maximum(held, self.held.max()) / self.bytes_ref
            mix = load / self.time_ref + held / self.bytes_ref
            r = int(fits[np.lexsort((fits, mix, top_b, np.round(top_t, 9)))[0]])
        else:
            r = int(fits[np.argmin(self.load[fits])])
        self._take(r, need, cost)
        self.chosen[t] = (TABLE_WISE, [r], [(0, self.loads[t].rows)])
        self.units[t] = [cost]
        return True


def _doublings(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n (none for n = 0)."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return [*out, n] if n else []


def _splits(n: int) -> list[int]:
    """How many tables to split, tried in turn: 0-4, then steps of about a third, n."""
    out, k = [], 0
    while k < n:
        out.append(k)
        k = k + 1 if k < 4 else k + max(1, k // 3)
    return [*out, n]


def search_executable(
    loads: Sequence[TableLoad],
    dp: list[int],
    cost_of: list[float],
    dp_cost: float,
    room: int,
    world: int,
    gpus_per_node: int,
    tolerance: float,
    floor: float,
    model: CostModel,
    front: list[tuple[float, int, int]] | None = None,
) -> Best | None:
    """Steps 2-4 for the TorchRec-executable mode (module docstring): the best fill, or
    None when no fill places every table in the GPUs' HBM. `front` receives the fills
    no other fill beats in both maximum cost and maximum HBM bytes: (max cost, max
    bytes, tables split), by cost."""
    rest = [t for t in range(len(loads)) if t not in dp]
    multi = world // gpus_per_node > 1
    mean = dp_cost + sum(cost_of[t] for t in rest) / world
    fill = _Fill(loads, cost_of, rest, world, gpus_per_node, dp_cost, room, model)
    splittable = [t for t in rest if t in fill.rw]
    order = sorted(splittable, key=lambda t: (-cost_of[t], max(fill.rw[t]), t))
    must = {t for t in splittable if loads[t].hbm > room}  # split whatever the k
    b_floor = bytes_floor(loads, rest, world)
    fill.time_ref = max(mean, floor, 1e-300)
    fill.bytes_ref = max(b_floor, 1.0)
    # the n largest of the tables whose bytes alone exceed the bytes floor, n = 1, 2, 4, ...
    over = sorted(
        (t for t in splittable if loads[t].hbm > b_floor * (1 + tolerance)),
        key=lambda t: (-loads[t].hbm, t),
    )
    fats = {frozenset(over[:n]) for n in _doublings(len(over))}
    fat = set().union(*fats) if fats else set()
    found: list[tuple[float, int, int, Best]] = []  # (max cost, max bytes, try, best)
    best_top = np.inf
    for k in _splits(len(order)):
        base = set(order[:k]) | must
        for split in [base] + [base | f for f in sorted(fats, key=len) if f - base]:
            for local_ok in (True, False) if multi else (False,):
                for two_d in (False, True):
                    got = _fill(fill, rest, split, local_ok, two_d, mean, cost_of, fat)
                    if got is None:
                        continue
                    top, held = got
                    largest = max((max(u) for u in fill.units.values()), default=0.0)
                    best = (top, len(split), dict(fill.chosen), largest)
                    found.append((top, held, len(found), best))
                    best_top = min(best_top, top)
        if found and (mean <= 0 or best_top <= (1 + tolerance) * max(mean, floor)):
            break
    if not found:
        return None
    if front is not None:
        front.extend(pareto([(f[0], f[1], f[3][1]) for f in found]))
    # as good in time: within BYTES_SLACK of the best, or within the search's own
    # tolerance of max(mean, floor)
    good = max(best_top * (1 + BYTES_SLACK), (1 + tolerance) * max(mean, floor))
    near = [f for f in found if f[0] <= good]
    return min(near, key=lambda f: (f[1], f[3][1], f[2]))[3]


def pareto(points: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    """The points no other beats in both of the first two (lower is better), by the
    first; of equal points the first."""
    out: list[tuple[float, int, int]] = []
    for p in sorted(points, key=lambda p: (p[0], p[1], p[2])):
        if not out or p[1] < out[-1][1]:
            out.append(p)
    return out


def _fill(
    fill: _Fill, rest: list[int], split: set[int], local_ok: bool, two_d: bool, mean: float,
    cost_of: list[float], fat: set[int],
) -> tuple[float, int] | None:  # fmt: skip
    """One fill: row-wise blocks on their fixed ranks, table-row-wise tables (largest
    block first) on the node of the lowest maximum with room, then whole tables
    (costliest first); a table that finds no room is split instead. (max cost, max HBM
    bytes), or None when a table finds no room at all."""
    fill.reset(two_d)
    twrw = [t for t in rest if t in split and local_ok and (t in fat or max(fill.local[t]) <= mean)]
    placed = all(fill.row_wise(t) for t in rest if t in split and t not in twrw)
    for t in sorted(twrw, key=lambda t: (-max(fill.local[t]), t)):
        placed = placed and (fill.table_row_wise(t) or fill.row_wise(t))
    whole = [t for t in rest if t not in split]
    if two_d:  # the largest first in either dimension
        key = {
            t: max(cost_of[t] / fill.time_ref, fill.loads[t].hbm / fill.bytes_ref) for t in whole
        }
        whole.sort(key=lambda t: (-key[t], t))
    else:
        whole.sort(key=lambda t: (-cost_of[t], t))
    for t in whole:
        if not placed:
            break
        placed = fill.table_wise(t) or fill.table_row_wise(t) or fill.row_wise(t)
    if not placed:
        return None
    return float(fill.load.max()), int(fill.held.max())


__all__ = ["BYTES_SLACK", "Best", "bytes_floor", "pareto", "search_executable"]
