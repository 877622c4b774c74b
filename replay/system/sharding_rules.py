"""TorchRec's sharding types as data, their even rules, the grid's blocks, and which
plans TorchRec's training path executes as planned.

Placement. The rules every sharding plan obeys, below `replay/system/sharding.py` (which
re-exports the types and rules, and resolves plans with them) and
`replay/system/torchrec_plan.py` (TorchRec's plans in and out). No imports of `replay`
beyond the errors: data and pure functions.

What TorchRec 1.8.0's training path executes (read in its source, and run: a
`DistributedModelParallel` on CPU processes over gloo, tests/test_torchrec_sharding_dmp.py):

- row-wise: `sharding/rw_sharding.py` `RwSparseFeaturesDist` buckets each id into the
  even block ``id // ceil(rows / world)`` and sends it to that rank
  (`bucketize_kjt_before_all2all`), and `BaseRwEmbeddingSharding._shard` gives rank r the
  shard metadata at index r (``shards[rank]``, for every rank in range(world)): the
  offsets a plan states are not read. Only even blocks over every rank in rank order read
  the rows the plan says; uneven blocks, a subset of the ranks or another order pass the
  planner's own checks and then read other rows, silently (FBGEMM logs a bounds check).
  Uneven row-wise (`row_wise(sizes_placement=...)`) is inference-only
  (`InferRwSparseFeaturesDist`).
- table-row-wise: `twrw_sharding.py` takes the node of ``ranks[0]`` and gives each of
  the node's ``local_size`` GPUs the shard at its local index; `TwRwSparseFeaturesDist`
  buckets ids in even blocks of ceil(rows / local_size): all GPUs of the node, in order.
- grid: `grid_sharding.py` treats each column block as a table-row-wise table of its
  node (the same `TwRwSparseFeaturesDist`): each block over all GPUs of one node, in
  order.
- table-wise, column-wise, table-column-wise (`twcw_sharding.py`: column-wise), and
  data-parallel: each shard is its own table on the rank its metadata names, so any rank
  (column blocks of any width, `column_wise(size_per_rank=...)`) executes as planned.
- and the kernels: TorchRec's fused kernels (`fused`, `fused_uvm`, `fused_uvm_caching`,
  what its planner proposes for a sharded table) assert that every shard's columns are a
  multiple of 4 (`batched_embedding_kernel.py` `_assert_local_cols_divisible_by_4`), so a
  shard of 2 columns, or a table of dim 6, does not build; data-parallel tables take the
  dense kernel, which has no such rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from replay.errors import ConfigError

TABLE_WISE = "table-wise"
ROW_WISE = "row-wise"
COLUMN_WISE = "column-wise"
TABLE_ROW_WISE = "table-row-wise"
DATA_PARALLEL = "data-parallel"
TABLE_COLUMN_WISE = "table-column-wise"
GRID = "grid"
SHARDING_TYPES = (TABLE_WISE, ROW_WISE, COLUMN_WISE, TABLE_ROW_WISE, DATA_PARALLEL)
# every type a plan may name: TorchRec's two more, which its planner also proposes
PLAN_TYPES = (*SHARDING_TYPES, TABLE_COLUMN_WISE, GRID)
ROW_SPLIT = (ROW_WISE, TABLE_ROW_WISE)  # types whose blocks are row ranges
COLUMN_SPLIT = (COLUMN_WISE, TABLE_COLUMN_WISE)  # each column block sees every lookup
EXPLICIT = (ROW_WISE, TABLE_ROW_WISE, COLUMN_WISE, TABLE_COLUMN_WISE, GRID)  # may list blocks
REPEATS = (COLUMN_WISE, TABLE_COLUMN_WISE, GRID)  # types whose ranks may repeat
ONE_NODE = (TABLE_ROW_WISE, TABLE_COLUMN_WISE)  # types that keep a table in one node
# the columns of a shard in TorchRec's fused kernels are a multiple of this
# (batched_embedding_kernel.py `_assert_local_cols_divisible_by_4`: FBGEMM's TBE)
FUSED_COLUMNS = 4


class Entry(Protocol):
    """What the rules read of a plan's entry (`replay.system.sharding.TableSharding`)."""

    @property
    def table(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def ranks(self) -> tuple[int, ...]: ...
    @property
    def shards(self) -> tuple[tuple[int, int], ...] | None: ...


def row_blocks(rows: int, n: int) -> list[tuple[int, int]]:
    """TorchRec's even row-wise rule: `n` blocks of ceil(rows / n) rows in order, the
    last short, those after it empty ([start, stop) each)."""
    size = -(-rows // n) if rows else 0
    return [(min(i * size, rows), min((i + 1) * size, rows)) for i in range(n)]


def column_blocks(dim: int, n: int) -> list[tuple[int, int]]:
    """`n` equal column blocks of `dim` (the caller checked `dim % n == 0`)."""
    size = dim // n
    return [(i * size, (i + 1) * size) for i in range(n)]


def coverage(blocks: Sequence[tuple[int, int]], extent: int, what: str, where: str) -> None:
    """One-line errors for explicit blocks out of range, overlapping or leaving a gap."""
    for start, stop in blocks:
        if not start <= stop <= extent:
            raise ConfigError(f"{where}: shard [{start}, {stop}) is not within the {extent} {what}")
    done = 0
    for start, stop in sorted(b for b in blocks if b[1] > b[0]):
        if start < done:
            raise ConfigError(f"{where}: shards overlap ({what} {start}-{done - 1} are held twice)")
        if start > done:
            raise ConfigError(f"{where}: {what} {done}-{start - 1} are left uncovered")
        done = stop
    if done < extent:
        raise ConfigError(f"{where}: {what} {done}-{extent - 1} are left uncovered")


def shown_ranks(ranks: Sequence[int], most: int = 6) -> str:
    text = ", ".join(str(r) for r in ranks[:most])
    return text + (f" and {len(ranks) - most} more" if len(ranks) > most else "")


def one_node(ranks: Sequence[int], gpus_per_node: int, what: str, where: str) -> None:
    nodes = sorted({r // gpus_per_node for r in ranks})
    if len(nodes) > 1:
        a = next(r for r in ranks if r // gpus_per_node == nodes[0])
        b = next(r for r in ranks if r // gpus_per_node == nodes[1])
        raise ConfigError(
            f"{where}: {what} keeps {'each column block' if what == 'grid' else 'a table'} in "
            f"one node, but rank {a} is on node "
            f"{nodes[0]} and rank {b} on node {nodes[1]} ({gpus_per_node} GPUs per node)"
        )


def grid_runs(entry: Entry, gpus_per_node: int) -> list[tuple[int, ...]]:
    """A grid entry's ranks cut into its column blocks (module docstring)."""
    ranks = entry.ranks
    if entry.shards is None:
        return [ranks[i : i + gpus_per_node] for i in range(0, len(ranks), gpus_per_node)]
    runs: list[list[int]] = []
    for i, r in enumerate(ranks):
        if i and entry.shards[i] == entry.shards[i - 1]:
            runs[-1].append(r)
        else:
            runs.append([r])
    return [tuple(g) for g in runs]


def grid_groups(
    entry: Entry, dim: int, gpus_per_node: int, where: str = "grid"
) -> list[tuple[tuple[int, ...], tuple[int, int]]]:
    """A grid entry's column blocks: (their ranks in row-block order, [start, stop) of
    their columns), checked (module docstring: the grid)."""
    runs = grid_runs(entry, gpus_per_node)
    if entry.shards is None:
        if len(entry.ranks) % gpus_per_node:
            raise ConfigError(
                f"{where}: grid splits each column block over a node's {gpus_per_node} GPUs, "
                f"and {len(entry.ranks)} ranks are not whole nodes (give 'shards' for others)"
            )
        if dim % len(runs):
            raise ConfigError(
                f"{where}: grid splits the {dim} columns equally, which {len(runs)} column "
                "blocks do not divide (give 'shards' for uneven blocks)"
            )
        groups = list(zip(runs, column_blocks(dim, len(runs)), strict=True))
    else:
        firsts = np.cumsum([0] + [len(g) for g in runs[:-1]])
        groups = [(g, entry.shards[int(i)]) for g, i in zip(runs, firsts, strict=True)]
        coverage([c for _, c in groups], dim, "columns", where)
    for granks, _ in groups:
        if len(set(granks)) != len(granks):
            twice = next(r for r in granks if granks.count(r) > 1)
            raise ConfigError(f"{where}: rank {twice} is listed twice in one column block")
        one_node(granks, gpus_per_node, "grid", where)
    return groups


def executable_reason(
    entry: Entry, rows: int, world: int, gpus_per_node: int, widths: Sequence[int] = ()
) -> str | None:
    """Why TorchRec's training path would not execute a checked entry as planned (module
    docstring), or None when it would. `widths`: the columns of each of its shards."""
    ranks = entry.ranks
    name = f"table {entry.table!r}"
    odd = [w for w in widths if w % FUSED_COLUMNS]
    if odd and entry.type != DATA_PARALLEL:
        return (
            f"{name} has a shard of {odd[0]} columns: TorchRec's fused kernels need a "
            f"multiple of {FUSED_COLUMNS}"
        )
    if entry.type == ROW_WISE:
        if ranks != tuple(range(world)):
            return (
                f"{name} is row-wise over ranks {shown_ranks(ranks)}: TorchRec's row-wise "
                f"uses every rank (0-{world - 1}) in rank order"
            )
        if entry.shards is not None and list(entry.shards) != row_blocks(rows, world):
            return (
                f"{name} is row-wise in uneven blocks: TorchRec's training path routes ids "
                f"in even blocks of ceil(rows / {world})"
            )
    elif entry.type in (TABLE_ROW_WISE, GRID):
        groups = grid_runs(entry, gpus_per_node) if entry.type == GRID else [ranks]
        for g in groups:
            node = g[0] // gpus_per_node
            full = tuple(range(node * gpus_per_node, (node + 1) * gpus_per_node))
            if g != full:
                return (
                    f"{name} is {entry.type} over ranks {shown_ranks(g)}: TorchRec's "
                    f"{entry.type} uses all {gpus_per_node} GPUs of a node, in order"
                )
        uneven = entry.shards is not None and list(entry.shards) != row_blocks(rows, len(ranks))
        if entry.type == TABLE_ROW_WISE and uneven:
            return (
                f"{name} is table-row-wise in uneven blocks: TorchRec's training path "
                f"routes ids in even blocks of ceil(rows / {gpus_per_node})"
            )
    return None


__all__ = [
    "COLUMN_SPLIT",
    "COLUMN_WISE",
    "DATA_PARALLEL",
    "EXPLICIT",
    "FUSED_COLUMNS",
    "GRID",
    "ONE_NODE",
    "PLAN_TYPES",
    "REPEATS",
    "ROW_SPLIT",
    "ROW_WISE",
    "SHARDING_TYPES",
    "TABLE_COLUMN_WISE",
    "TABLE_ROW_WISE",
    "TABLE_WISE",
    "Entry",
    "column_blocks",
    "coverage",
    "executable_reason",
    "grid_groups",
    "grid_runs",
    "one_node",
    "row_blocks",
]
