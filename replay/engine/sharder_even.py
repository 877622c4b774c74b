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

The bytes pass (`bytes_pass`, once, for the replicas the sharder keeps): the fills
above balance the step first and the bytes second, so a table of many bytes stays whole
when splitting it costs a little time (the 400-table model on 64 GPUs: its largest 41
GiB table whole, 34.7 GiB on the fullest GPU). The pass puts the bytes first within a
step cap (`shard_cost.STEP_SLACK`, 10% over the time floor): for k = 1, 2, ... the k
tables of the most HBM bytes are split (table-row-wise, first fit into the nodes in
rank order while each GPU's blocks stay within a share of the cap, so that some nodes
keep room for the large whole tables; row-wise on one node), and the whole tables are
packed under a bytes cap of the largest whole table's bytes x 1.01 (then x 1.05) and
the step cap, largest first in either dimension, each to the GPU whose smaller room
(in cost or in bytes) stays largest (or the largest dot product of the table with the
GPU's room: vector bin packing's two rules); then a local search moves or swaps whole
tables off the busiest GPU while that lowers it. k stops where the splits' collectives
alone overrun W GPUs' step cap. The pass's fill of the fewest bytes replaces the plan
above when its fullest GPU holds at least `BYTES_GAIN` (10%) fewer bytes: a step at
most 10% over the floor for a tenth of the memory or more.

Where the pass finds no fill for a k past one it found and the whole tables' costs are
whole multiples of a unit q (`granularity`: a generated workload's lookups, batch x
pooling), the cap is lost to that unit: a GPU of whole tables fills its step cap only to
a multiple of q, and with the splits' collectives taking most of the slack (the
400-table model's 20 largest split leave 1% of it) the loss decides. `_granular` then
draws the split tables' nodes at random (seeded by k, so the plan is deterministic) and
keeps a draw when the GPUs' whole units under the cap, floor((cap - its splits' pieces -
D) / q) summed, cover the whole tables' units, D being what the m cheapest tiny tables
cost every GPU as replicas (their share of the lookups and their all-reduce; m chosen
per draw for the most units to spare); the kept draws are packed as above with those m
tables replicated. A heuristic, not a proof: it finds the 400-table model's plan with the 20
largest split (17.1 GiB, 1.100 of the floor) where the first fits stop at 18.

Bytes floor: no plan holds fewer HBM bytes on its fullest GPU than max(the tables' HBM
bytes / W, the largest unsplittable piece: a tiny table whole, any other table's even
block over the W GPUs), plus the replicas' bytes on every GPU (`bytes_floor`).
"""

from __future__ import annotations

import math
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
        self.model = model
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

    def table_row_wise_on(self, t: int, node: int) -> bool:
        """On `node`'s GPUs, if each has room for its block."""
        g = self.gpn
        gpus = slice(node * g, (node + 1) * g)
        need = self._need(t, self.local_rows[t])
        if np.any(self.free[gpus] < need):
            return False
        self._take(gpus, need, self.local[t])
        ranks = list(range(node * g, (node + 1) * g))
        self.chosen[t] = (TABLE_ROW_WISE, ranks, self.local_rows[t])
        self.units[t] = self.local[t]
        return True

    def whole_on(self, t: int, r: int) -> None:
        self._take(r, self.loads[t].hbm, self.cost_of[t])
        self.chosen[t] = (TABLE_WISE, [r], [(0, self.loads[t].rows)])
        self.units[t] = [self.cost_of[t]]

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
    fills: list[tuple[float, int, Best]] | None = None,
) -> Best | None:
    """Steps 2-4 for the TorchRec-executable mode (module docstring): the best fill, or
    None when no fill places every table in the GPUs' HBM. `front` receives the fills
    no other fill beats in both maximum cost and maximum HBM bytes: (max cost, max
    bytes, tables split), by cost; `fills` every fill (max cost, max bytes, fill)."""
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
    # as good in time: within BYTES_SLACK of the best, or within the search's own
    # tolerance of max(mean, floor)
    good = max(best_top * (1 + BYTES_SLACK), (1 + tolerance) * max(mean, floor))
    if front is not None:
        front.extend(pareto([(f[0], f[1], f[3][1]) for f in found]))
    if fills is not None:
        fills.extend((f[0], f[1], f[3]) for f in found)
    near = [f for f in found if f[0] <= good]
    return min(near, key=lambda f: (f[1], f[3][1], f[2]))[3]


def bytes_pass(
    loads: Sequence[TableLoad], dp: list[int], cost_of: list[float], dp_cost: float,
    room: int, world: int, gpus_per_node: int, model: CostModel, step_cap: float,
    best: Best, front: list[tuple[float, int, int]] | None = None,
    fills: Sequence[tuple[float, int, Best]] = (),
) -> tuple[Best, list[int]]:  # fmt: skip
    """The bytes pass (module docstring) after `search_executable` chose `best` for the
    replicas `dp`: the fill of the fewest HBM bytes on its fullest GPU, among the pass's
    and the search's `fills`, whose busiest GPU costs at most `step_cap` and whose
    fullest GPU holds at most 1 - `BYTES_GAIN` of `best`'s, or `best` when none does,
    with the tables the pass replicates besides `dp` (`_granular`). `front` (the
    search's) takes the pass's fills and keeps the points no other beats in both."""
    rest = [t for t in range(len(loads)) if t not in dp]
    fill = _Fill(loads, cost_of, rest, world, gpus_per_node, dp_cost, room, model)
    held = np.zeros(world, dtype=np.int64)
    for t, (_, ranks, blocks) in best[2].items():
        for r, (a, b) in zip(ranks, blocks, strict=True):
            held[r] += loads[t].hbm_of(a, b)
    splittable = [t for t in rest if t in fill.rw]
    must = {t for t in splittable if loads[t].hbm > room}
    b_floor = bytes_floor(loads, rest, world)
    limit = (1 - BYTES_GAIN) * float(held.max())
    if limit <= 0 or step_cap <= 0:
        return best, []  # no bytes to gain (every table outside HBM), or no step to spend
    packed = _bytes_pass(fill, rest, splittable, must, step_cap, b_floor, limit)
    if front is not None:
        front[:] = pareto(front + [(top, b, got[1]) for top, b, got, _ in packed])
    ok: list[tuple[float, int, Best, list[int]]] = [
        (*f, []) for f in fills if f[0] <= step_cap and f[1] <= limit
    ]
    ok += packed
    if not ok:
        return best, []
    chosen = min(ok, key=lambda p: (p[1], p[0], p[2][1]))
    return chosen[2], list(chosen[3])


PACK_MARGINS = (0.01, 0.05, 0.15, 0.35)  # the bytes cap: the largest piece x (1 + margin)
PACK_NODE_FILL = (0.6, 0.8, 1.0)  # split tables' blocks fill a node up to this x the cap
PACK_PATIENCE = 2  # the bytes pass stops after this many k in a row without a fill
BYTES_GAIN = 0.1  # the bytes pass's fill wins when its fullest GPU holds 10% fewer bytes


def _bytes_pass(
    fill: _Fill, rest: list[int], splittable: list[int], must: set[int], s_cap: float,
    b_floor: float, b_limit: float,
) -> list[tuple[float, int, Best, list[int]]]:  # fmt: skip
    """Fills that put the fullest GPU's bytes first (module docstring, the bytes pass):
    the k tables of the most HBM bytes split (k = 1, 2, ...; table-row-wise across
    nodes, first fit into the nodes in order while each GPU's bytes stay within a share
    of the cap, else row-wise), then the whole tables packed under a bytes cap (the
    largest whole table's bytes x (1 + margin)) and the step cap `s_cap`, then
    polished. (max cost, max HBM bytes, best) of each k's first fill within both caps
    and under `b_limit` bytes; the search stops when the splits alone overrun W x
    `s_cap`, `PACK_PATIENCE` k in a row find none, or `_granular` finds none."""
    loads = fill.loads
    by_bytes = sorted(splittable, key=lambda t: (-loads[t].hbm, t))
    multi = fill.world // fill.gpn > 1
    ways = fill.local if multi else fill.rw
    rows = fill.local_rows if multi else fill.rw_rows
    total = fill.dp_cost * fill.world + sum(fill.cost_of[t] for t in rest)
    out: list[tuple[float, int, Best, list[int]]] = []
    misses = 0
    for k in range(1, len(by_bytes) + 1):  # (the `must` tables are split whatever the k)
        t_k = by_bytes[k - 1]
        total += sum(ways[t_k]) - fill.cost_of[t_k]  # what splitting it adds in all
        if total > fill.world * s_cap:
            break  # W GPUs within s_cap cannot carry the splits
        split = set(by_bytes[:k]) | must
        left = max((loads[t].hbm for t in rest if t not in split), default=0)
        block = max(float(max(fill._need(t, rows[t]))) for t in split)
        target = max(float(left), b_floor, block)
        if target <= 0 or target * (1 + PACK_MARGINS[0]) > b_limit:
            continue
        got: tuple[float, int] | None = None
        # past a found fill, with costs in whole units, a miss is the units' (`_granular`)
        units = bool(out) and multi and granularity([fill.cost_of[t] for t in rest]) > 0
        for margin in PACK_MARGINS:
            b_cap = target * (1 + margin)
            if b_cap > b_limit or (units and margin > PACK_MARGINS[0]):
                break
            for share in PACK_NODE_FILL if multi else (1.0,):
                for dot in (False, True):
                    node_cap = max(share * b_cap, block)
                    got = _pack(fill, rest, split, b_cap, node_cap, s_cap, dot)
                    if got is not None and got[0] <= s_cap and got[1] <= b_limit:
                        break
                    got = None
                if got:
                    break
            if got:
                break
        extra: list[int] = []
        if got is None and multi and out:  # the frontier past the first fits
            cap = target * (1 + GRANULAR_MARGIN)
            found = _granular(fill, rest, by_bytes[:k], must, s_cap, cap, b_limit, seed=k)
            if found is None:
                break  # the frontier: more splits only leave less of the cap
            got, extra = found
        if got is None:
            misses += 1
            if misses >= PACK_PATIENCE:
                break
            continue
        misses = 0
        largest = max((max(u) for u in fill.units.values()), default=0.0)
        held = got[1] + sum(loads[t].hbm for t in extra)
        out.append((got[0], held, (got[0], len(split), dict(fill.chosen), largest), extra))
    return out


GRANULAR_TRIES = 20_000  # node assignments drawn for a k the bytes pass misses
GRANULAR_PACKS = 40  # packs tried among them, up to GRANULAR_M an assignment
GRANULAR_M = 6
GRANULAR_MARGIN = 0.005  # its bytes cap: the largest table left whole x (1 + margin)
GRANULAR_REPLICAS = 40  # the cheapest tiny tables it may replicate, in that order


def granularity(costs: Sequence[float]) -> float:
    """The largest q every cost is a whole multiple of, when every cost is a whole
    number (a generated workload's lookups: batch x pooling); 0 otherwise."""
    whole = []
    for c in costs:
        r = round(c)
        if r <= 0 or abs(c - r) > 1e-9 * max(1.0, abs(c)):
            return 0.0
        whole.append(int(r))
    return float(math.gcd(*whole)) if whole else 0.0


def _granular(
    fill: _Fill, rest: list[int], split: list[int], must: set[int], s_cap: float,
    b_cap: float, b_limit: float, seed: int,
) -> tuple[tuple[float, int], list[int]] | None:  # fmt: skip
    """The bytes pass where whole tables' costs come in units of q (`granularity`): a
    GPU of whole tables fills its step cap only to a multiple of q, and with the splits'
    collectives taking most of the cap that loss decides. Draws node assignments of the
    split tables (seeded by `seed`) and, for each within `b_cap` bytes, the number m of
    the cheapest tiny tables to replicate (their cost / W and all-reduce on every GPU
    shift what is left of each GPU's cap against the lattice): where the GPUs' whole
    units under the cap cover the whole tables', packs it. ((max cost, max HBM bytes),
    the tables replicated) of the first pack within both caps, or None."""
    loads, g, world = fill.loads, fill.gpn, fill.world
    split_set = set(split) | must
    if must - set(split):
        return None
    whole = [t for t in rest if t not in split_set]
    q = granularity([fill.cost_of[t] for t in whole])
    if q <= 0 or not whole:
        return None
    model = fill.model
    tiny = sorted((t for t in whole if loads[t].tiny),
                  key=lambda t: (model.allreduce(loads[t], world), t))  # fmt: skip
    cheap = tiny[:GRANULAR_REPLICAS]
    shift = np.cumsum([0.0] + [fill.cost_of[t] / world + model.allreduce(loads[t], world)
                               for t in cheap])  # fmt: skip
    gone = np.cumsum([0.0] + [fill.cost_of[t] for t in cheap])
    units = (sum(fill.cost_of[t] for t in whole) - gone) / q
    piece = np.array([fill.local[t] for t in split])
    block = np.array([fill._need(t, fill.local_rows[t]) for t in split], dtype=np.float64)
    rng = np.random.default_rng(seed)
    packs = 0
    for _ in range(GRANULAR_TRIES):
        at = rng.integers(0, world // g, size=len(split))
        cost = np.zeros((world // g, g))
        held = np.zeros((world // g, g))
        np.add.at(cost, at, piece)
        np.add.at(held, at, block)
        if held.max() > b_cap:
            continue
        left = s_cap - fill.dp_cost - cost.ravel()
        slack = np.floor((left[None, :] - shift[:, None]) / q).sum(axis=1) - units
        for m in np.argsort(-slack, kind="stable")[:GRANULAR_M].tolist():
            if slack[m] < 0:
                break
            for dot in (False, True):
                nodes = {t: int(n) for t, n in zip(split, at, strict=True)}
                got = _pack(fill, rest, split_set, b_cap, np.inf, s_cap, dot, nodes, cheap[:m])
                if got is not None and got[0] <= s_cap and got[1] <= b_limit:
                    return got, cheap[:m]
                packs += 1
                if packs >= GRANULAR_PACKS:
                    return None
    return None


def _pack(
    fill: _Fill, rest: list[int], split: set[int], b_cap: float, node_cap: float,
    s_cap: float, dot: bool, nodes: dict[int, int] | None = None, extra: Sequence[int] = (),
) -> tuple[float, int] | None:  # fmt: skip
    """One fill of the bytes pass (`_bytes_pass`): (max cost, max HBM bytes), or None
    when a table finds no GPU with room under `b_cap`. Whole tables go largest first in
    either dimension (cost over `s_cap`, bytes over `b_cap`), each to the GPU with room
    in both (room in bytes alone if none has both) that leaves the most of its smaller
    room (`dot`: the largest dot product of the table with the GPU's room; vector bin
    packing's two rules); ties the lower rank. `nodes` fixes each split table's node;
    `extra` tables are replicated (their bytes count against `b_cap`, like the
    replicas')."""
    fill.reset(False)
    loads, g = fill.loads, fill.gpn
    for t in extra:
        fill.load += fill.cost_of[t] / fill.world + fill.model.allreduce(loads[t], fill.world)
        fill.free -= loads[t].hbm
        b_cap -= loads[t].hbm
    for t in sorted(split, key=lambda t: (-loads[t].hbm, t)):
        placed = False
        if nodes is not None:
            placed = fill.table_row_wise_on(t, nodes[t])
        elif fill.world // g > 1:
            need = fill._need(t, fill.local_rows[t])
            for node in range(fill.world // g):
                top = fill.held[node * g : (node + 1) * g] + need
                if top.max() <= node_cap and fill.table_row_wise_on(t, node):
                    placed = True
                    break
        if not placed and not fill.row_wise(t):
            return None
    whole = [t for t in rest if t not in split and t not in extra]
    hbm = {t: loads[t].hbm for t in whole}
    if b_cap <= 0:
        return None
    whole.sort(key=lambda t: (-max(fill.cost_of[t] / s_cap, hbm[t] / b_cap), t))
    for t in whole:
        c, h = fill.cost_of[t], hbm[t]
        ok = np.flatnonzero((fill.held + h <= b_cap) & (fill.free >= h))
        if len(ok) == 0:
            return None
        in_time = ok[fill.load[ok] + c <= s_cap]
        if len(in_time):
            ok = in_time
        rc, rb = (s_cap - fill.load[ok]) / s_cap, (b_cap - fill.held[ok]) / b_cap
        score = (
            rc * c / s_cap + rb * h / b_cap if dot else np.minimum(rc - c / s_cap, rb - h / b_cap)
        )
        fill.whole_on(t, int(ok[np.argmax(score)]))
    _polish(fill, whole, b_cap)
    return float(fill.load.max()), int(fill.held.max())


POLISH_ROUNDS = 4  # moves and swaps per whole table at most


def _polish(fill: _Fill, whole: list[int], b_cap: float) -> None:
    """Local search on the busiest GPU: move one of its whole tables to another GPU, or
    swap it for a cheaper one, whichever leaves the pair's larger cost lowest, while
    that is below the busiest's cost and every GPU stays within `b_cap` and its memory;
    until none does (each step lowers the loads' sorted vector, so it ends)."""
    if not whole:
        return
    cost = np.array([fill.cost_of[t] for t in whole])
    hbm = np.array([fill.loads[t].hbm for t in whole], dtype=np.int64)
    at = np.array([fill.chosen[t][1][0] for t in whole])
    cap = np.minimum(np.float64(b_cap), (fill.held + fill.free).astype(np.float64))
    for _ in range(POLISH_ROUNDS * len(whole)):
        g = int(np.argmax(fill.load))
        top = float(fill.load[g])
        eps = 1e-9 * max(top, 1e-300)
        best: tuple[float, int, int, int] | None = None  # (new top, i, to GPU, swap j or -1)
        for i in np.flatnonzero(at == g).tolist():
            c, h = cost[i], hbm[i]
            ok = (fill.held + h <= cap) & (fill.load + c < top - eps)
            ok[g] = False
            if ok.any():
                r = int(np.flatnonzero(ok)[np.argmin(fill.load[ok])])
                new = max(float(fill.load[r]) + c, top - c)
                if best is None or new < best[0]:
                    best = (new, i, r, -1)
            d = c - cost
            ok = (d > eps) & (at != g)
            ok &= (fill.held[at] - hbm + h <= cap[at]) & (fill.held[g] - h + hbm <= cap[g])
            if ok.any():
                new_s = np.where(ok, np.maximum(fill.load[at] + d, top - d), np.inf)
                j = int(np.argmin(new_s))
                if new_s[j] < top - eps and (best is None or new_s[j] < best[0]):
                    best = (float(new_s[j]), i, int(at[j]), j)
        if best is None or best[0] >= top - eps:
            return
        _, i, r, j = best
        _move(fill, whole[i], g, r)
        at[i] = r
        if j >= 0:
            _move(fill, whole[j], r, g)
            at[j] = g


def _move(fill: _Fill, t: int, src: int, dst: int) -> None:
    h, c = fill.loads[t].hbm, fill.cost_of[t]
    fill._take(src, -h, -c)
    fill.whole_on(t, dst)


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


__all__ = [
    "BYTES_SLACK",
    "Best",
    "bytes_floor",
    "bytes_pass",
    "granularity",
    "pareto",
    "search_executable",
]
