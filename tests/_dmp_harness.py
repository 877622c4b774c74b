"""A CPU `DistributedModelParallel` (TorchRec) run over gloo, for the tests that hold
replay's cluster model against the real training stack: which ids each rank receives, the
pooled embeddings it returns, and the bytes of every collective it issues.

Self-contained (torch and torchrec only, no replay import in the workers): `run_dmp`
writes a job (JSON + npz) to a folder and starts one Python process per rank running
this file; each joins a gloo process group (a `FileStore`, no port), builds an
`EmbeddingBagCollection` (one feature per table, sum pooling) behind a small dense layer,
shards it with a plan made by `torchrec.distributed.sharding_plan`'s generators
(`table_wise`, `row_wise`, `column_wise`, `table_row_wise`, `data_parallel`) or given as
TorchRec `ParameterSharding`s, copies the tables' weights from one seeded global array
into its shards (so every shard holds the same values an unsharded collection would),
and runs the batches forward and backward. `LOCAL_WORLD_SIZE` is the job's GPUs per node,
so table-row-wise sharding and TorchRec's intra- and cross-node groups see nodes of that
size (2 x 2 with 4 processes).

Counting. Every collective TorchRec calls through `torch.distributed` (`dist.X` at call
time in `torchrec/distributed/comm_ops.py` and `dist_data.py`) is wrapped in each process:
`all_to_all_single`, `reduce_scatter_tensor`, `all_gather_into_tensor`, `reduce_scatter`,
`all_gather`, `all_reduce`, `broadcast` (sync or async). A call's record: the batch, the
phase (`input`: an integer tensor sent during the forward, i.e. the KJT all-to-all of
splits, lengths and ids; `forward`: a float tensor during the forward; `backward`: during
`loss.backward()`), the op, the group's global ranks, the element size, the input and
output shapes and, for an all-to-all, the bytes to and from each peer (group order). The
data-parallel all-reduce of the dense and replicated gradients is DDP's (C++ reducer, not
`dist.all_reduce`): with `data_parallel=True` the DMP's `init_data_parallel()` wraps the
module in DDP and a comm hook records each bucket's bytes before all-reducing it.
Collectives before the first batch (groups, barriers, DDP's broadcast) are `init`.

Each process writes `rank{r}.json` (records, the ids its input all-to-all received per
batch) and `rank{r}.npz` (its local batch's pooled embeddings per batch). `run_dmp`
returns them as a `DmpResult`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# -- the parent's side ------------------------------------------------------------------


@dataclass(frozen=True)
class DmpTable:
    name: str
    rows: int
    dim: int
    # TorchRec sharding: "table_wise" (ranks: [r]), "row_wise", "column_wise" and
    # "table_column_wise" (ranks: the blocks' ranks), "table_row_wise" (host: the node),
    # "grid" (ranks: the column blocks' nodes), "data_parallel"; or a
    # ParameterSharding given as JSON (`parameter_sharding`, TorchRec's fields)
    sharding: str
    ranks: tuple[int, ...] = ()
    host: int = 0
    parameter_sharding: dict[str, Any] | None = None


@dataclass(frozen=True)
class DmpResult:
    world: int
    records: list[list[dict[str, Any]]]  # per rank, every collective call
    received_ids: list[list[int]]  # per rank, per batch: ids its input all-to-alls gave it
    pooled: list[list[np.ndarray]]  # per rank, per batch: [local batch, sum of dims]
    seconds: float
    logs: list[str] = field(default_factory=list)

    def calls(self, rank: int, phase: str | None = None, batch: int | None = None) -> list:
        return [
            c
            for c in self.records[rank]
            if (phase is None or c["phase"] == phase) and (batch is None or c["batch"] == batch)
        ]


def run_dmp(
    tables: list[DmpTable],
    batches: list[list[np.ndarray]],
    *,
    world: int,
    gpus_per_node: int,
    folder: Path,
    weights_seed: int = 0,
    data_parallel: bool = True,
    timeout_s: float = 300.0,
) -> DmpResult:
    """Run `batches` (per batch, per table: int64 ids of shape [global batch, pooling],
    sample-major) through a DMP of `world` CPU processes, `gpus_per_node` a node. The
    global batch is split evenly: rank r feeds samples [r B / W, (r + 1) B / W)."""
    folder.mkdir(parents=True, exist_ok=True)
    job = {
        "world": world,
        "gpus_per_node": gpus_per_node,
        "weights_seed": weights_seed,
        "data_parallel": data_parallel,
        "tables": [
            {
                "name": t.name,
                "rows": t.rows,
                "dim": t.dim,
                "sharding": t.sharding,
                "ranks": list(t.ranks),
                "host": t.host,
                "parameter_sharding": t.parameter_sharding,
            }
            for t in tables
        ],
        "batches": len(batches),
    }
    (folder / "job.json").write_text(json.dumps(job))
    arrays = {f"b{b}_t{t}": np.asarray(ids, dtype=np.int64) for b, batch in enumerate(batches)
              for t, ids in enumerate(batch)}  # fmt: skip
    np.savez(folder / "batches.npz", **arrays)
    store = folder / "store"
    if store.exists():
        store.unlink()
    codes, seconds, texts = launch_ranks(Path(__file__), folder, world, gpus_per_node, timeout_s)
    if any(codes):
        tail = "\n".join(f"-- rank {r} (exit {c}) --\n{t[-3000:]}" for r, (c, t) in
                         enumerate(zip(codes, texts, strict=True)))  # fmt: skip
        raise RuntimeError(f"DMP run failed:\n{tail}")
    records, received, pooled = [], [], []
    for r in range(world):
        out = json.loads((folder / f"rank{r}.json").read_text())
        records.append(out["records"])
        received.append(out["received_ids"])
        npz = np.load(folder / f"rank{r}.npz")
        pooled.append([npz[f"b{b}"] for b in range(len(batches))])
    return DmpResult(world, records, received, pooled, seconds, texts)


def launch_ranks(
    script: Path, folder: Path, world: int, local: int, timeout_s: float
) -> tuple[list[int], float, list[str]]:
    """Run `python SCRIPT FOLDER RANK` for every rank, with the environment
    `torch.distributed` reads (`LOCAL_WORLD_SIZE` = `local`, the GPUs of a node), each
    logging to `FOLDER/rank{r}.log`; killed at `timeout_s`. (exit codes, seconds, logs)."""
    started = time.perf_counter()
    procs, logs = [], []
    for r in range(world):
        env = dict(os.environ)
        env.update(
            RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r % local),
            LOCAL_WORLD_SIZE=str(local), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
        )  # fmt: skip
        log = open(folder / f"rank{r}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        command = [sys.executable, str(script), str(folder), str(r)]
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout_s
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1.0)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    seconds = time.perf_counter() - started
    return codes, seconds, [(folder / f"rank{r}.log").read_text() for r in range(world)]


# -- the worker's side (torch and torchrec imported here only) ---------------------------

_STATE: dict[str, Any] = {"batch": -1, "phase": "init", "records": []}


def _ranks_of(group: Any) -> list[int]:
    import torch.distributed as dist

    if group is None:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def _phase(tensor: Any) -> str:
    phase = _STATE["phase"]
    if phase == "forward" and not tensor.is_floating_point():
        return "input"
    return phase


def _record(op: str, group: Any, inp: Any, out: Any, **extra: Any) -> None:
    _STATE["records"].append(
        {
            "batch": _STATE["batch"],
            "phase": _phase(inp),
            "op": op,
            "ranks": _ranks_of(group),
            "dtype": str(inp.dtype).replace("torch.", ""),
            "element_bytes": int(inp.element_size()),
            "input_shape": list(inp.shape),
            "output_shape": list(out.shape) if out is not None else None,
            "input_bytes": int(inp.numel() * inp.element_size()),
            "output_bytes": int(out.numel() * out.element_size()) if out is not None else 0,
            **extra,
        }
    )


def _split_bytes(t: Any, splits: Any, n: int) -> list[int]:
    """Bytes of each of the n parts of `t` along dim 0 (`splits` rows each, or equal)."""
    row = (t.numel() // t.shape[0]) * t.element_size() if t.shape[0] else 0
    if splits is None or len(splits) == 0:
        return [t.shape[0] // n * row] * n
    return [int(s) * row for s in splits]


def _what(t: Any, splits: Any) -> str:
    """What an all-to-all carries: in the KJT all-to-all, the lengths are the batch's
    int32 lengths, the ids int64 with split sizes, the splits int64 without; floats are
    pooled embeddings (forward) or their gradients (backward)."""
    if t.is_floating_point():
        return "embeddings" if _STATE["phase"] == "forward" else "gradients"
    if t.element_size() == 4:
        return "lengths"
    return "ids" if splits is not None and len(splits) else "splits"


def _install_counters() -> None:
    """Wrap torch.distributed's collectives (module docstring)."""
    import torch.distributed as dist

    real = {
        name: getattr(dist, name)
        for name in (
            "all_to_all_single", "reduce_scatter_tensor", "all_gather_into_tensor",
            "reduce_scatter", "all_gather", "all_reduce", "broadcast",
        )
    }  # fmt: skip

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                          group=None, async_op=False):  # fmt: skip
        n = len(_ranks_of(group))
        _record(
            "all_to_all_single", group, input, output,
            sent_to=_split_bytes(input, input_split_sizes, n),
            received_from=_split_bytes(output, output_split_sizes, n),
            what=_what(input, input_split_sizes),
        )  # fmt: skip
        return real["all_to_all_single"](
            output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op
        )

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        _record("reduce_scatter_tensor", group, input, output)
        return real["reduce_scatter_tensor"](output, input, op=op, group=group, async_op=async_op)

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        _record("all_gather_into_tensor", group, input_tensor, output_tensor)
        return real["all_gather_into_tensor"](
            output_tensor, input_tensor, group=group, async_op=async_op
        )

    def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
        import torch

        _record("reduce_scatter", group, torch.cat([t.reshape(-1) for t in input_list]), output)
        return real["reduce_scatter"](output, input_list, op=op, group=group, async_op=async_op)

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        import torch

        _record("all_gather", group, tensor, torch.cat([t.reshape(-1) for t in tensor_list]))
        return real["all_gather"](tensor_list, tensor, group=group, async_op=async_op)

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        _record("all_reduce", group, tensor, tensor)
        return real["all_reduce"](tensor, op=op, group=group, async_op=async_op)

    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        _record("broadcast", group, tensor, tensor)
        return real["broadcast"](tensor, src, group=group, async_op=async_op, group_src=group_src)

    _STATE["all_reduce"] = real["all_reduce"]  # DDP's comm hook records its own calls
    for name, fn in list(locals().items()):
        if name in real:
            setattr(dist, name, fn)


def _generator(t: dict[str, Any]) -> Any:
    from torchrec.distributed import sharding_plan as sp

    kind = t["sharding"]
    if kind == "table_wise":
        return sp.table_wise(rank=t["ranks"][0])
    if kind == "row_wise":
        return sp.row_wise()
    if kind == "column_wise":
        return sp.column_wise(ranks=list(t["ranks"]))
    if kind == "table_column_wise":  # no generator of its own: column-wise, so named
        import dataclasses

        from torchrec.distributed.types import ShardingType

        inner = sp.column_wise(ranks=list(t["ranks"]))

        def twcw(*args: Any, **kwargs: Any) -> Any:
            ps = inner(*args, **kwargs)
            return dataclasses.replace(ps, sharding_type=ShardingType.TABLE_COLUMN_WISE.value)

        return twcw
    if kind == "grid":
        return sp.grid_shard(host_indexes=list(t["ranks"]))
    if kind == "table_row_wise":
        return sp.table_row_wise(host_index=t["host"])
    if kind == "data_parallel":
        return sp.data_parallel()
    raise ValueError(f"unknown sharding {kind!r}")


def _fill_weights(dmp: Any, tables: list[dict[str, Any]], seed: int) -> None:
    """Every shard of table t holds rows/columns of one seeded global array (per table:
    np.random.default_rng([seed, t]).standard_normal((rows, dim)), float32)."""
    import torch

    full = {
        t["name"]: np.random.default_rng([seed, i]).standard_normal((t["rows"], t["dim"]))
        .astype(np.float32)
        for i, t in enumerate(tables)
    }  # fmt: skip
    with torch.no_grad():
        for key, value in dmp.state_dict().items():
            if not key.endswith(".weight") or "embedding_bags" not in key:
                continue
            name = key.split(".")[-2]
            shards = getattr(value, "local_shards", None)
            if shards is None:  # data-parallel: the whole table on every rank
                value.copy_(torch.from_numpy(full[name]))
                continue
            for shard in shards():
                r0, c0 = shard.metadata.shard_offsets
                r1 = r0 + shard.metadata.shard_sizes[0]
                c1 = c0 + shard.metadata.shard_sizes[1]
                shard.tensor.copy_(torch.from_numpy(full[name][r0:r1, c0:c1]))


def _hook(state, bucket):  # type: ignore[no-untyped-def]
    # unannotated: DDP checks the annotations of a hook, and this module's are strings
    import torch.distributed as dist

    buf = bucket.buffer()
    _record("all_reduce", None, buf, buf, what="data-parallel gradients")
    work = _STATE["all_reduce"](buf, op=dist.ReduceOp.SUM, async_op=True)
    return work.get_future().then(lambda f: f.value()[0])


def _worker(folder: Path, rank: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    job = json.loads((folder / "job.json").read_text())
    world, tables = job["world"], job["tables"]
    dist.init_process_group(
        "gloo", init_method=f"file://{folder / 'store'}", rank=rank, world_size=world
    )
    _install_counters()
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ParameterSharding, ShardingEnv, ShardingPlan
    from torchrec.modules.embedding_configs import PoolingType

    configs = [
        EmbeddingBagConfig(
            name=t["name"], embedding_dim=t["dim"], num_embeddings=t["rows"],
            feature_names=[f"f_{t['name']}"], pooling=PoolingType.SUM,
        )
        for t in tables
    ]  # fmt: skip
    dims = sum(t["dim"] for t in tables)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
            self.dense = nn.Linear(dims, 1)

        def forward(self, kjt: Any) -> tuple[Any, Any]:
            pooled = self.ebc(kjt).values()
            return pooled, self.dense(pooled)

    torch.manual_seed(0)
    model = Model()
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.0}
    )
    given = {t["name"]: t["parameter_sharding"] for t in tables if t["parameter_sharding"]}
    module_plan = construct_module_sharding_plan(
        model.ebc,
        {t["name"]: _generator(t if not t["parameter_sharding"] else
                               {**t, "sharding": "table_wise", "ranks": [0]})
         for t in tables},
        sharder=sharder, local_size=job["gpus_per_node"], world_size=world, device_type="cpu",
    )  # fmt: skip
    for name, ps in given.items():
        module_plan[name] = ParameterSharding(**ps)
    plan = ShardingPlan({"ebc": module_plan})
    dmp = DistributedModelParallel(
        module=model, device=torch.device("cpu"), plan=plan, sharders=[sharder],
        env=ShardingEnv.from_process_group(dist.group.WORLD), init_data_parallel=False,
    )  # fmt: skip
    _fill_weights(dmp, tables, job["weights_seed"])
    if job["data_parallel"]:
        dmp.init_data_parallel()
    # TorchRec wraps a data-parallel table's lookup in a DDP of its own
    # (`embeddingbag.py`), DMP the dense rest: every DDP's buckets are counted
    ddps = []
    for m in dmp.modules():
        ddps.append(m) if isinstance(m, nn.parallel.DistributedDataParallel) else None
        for inner in getattr(m, "_lookups", None) or []:
            if isinstance(inner, nn.parallel.DistributedDataParallel):
                ddps.append(inner)
    for m in ddps:
        m.register_comm_hook(None, _hook)
    batches = np.load(folder / "batches.npz")
    received: list[int] = []
    pooled_out: dict[str, np.ndarray] = {}
    for b in range(job["batches"]):
        ids = [batches[f"b{b}_t{t}"] for t in range(len(tables))]
        size = ids[0].shape[0]
        lo, hi = rank * size // world, (rank + 1) * size // world
        values, lengths = [], []
        for a in ids:
            local = a[lo:hi]
            lengths.append(np.full(hi - lo, local.shape[1], dtype=np.int32))
            values.append(local.reshape(-1))
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=[f"f_{t['name']}" for t in tables],
            values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
            lengths=torch.from_numpy(np.concatenate(lengths)),
        )
        _STATE["batch"], _STATE["phase"] = b, "forward"
        before = len(_STATE["records"])
        pooled, out = dmp(kjt)
        _STATE["phase"] = "backward"
        out.sum().backward()
        _STATE["phase"] = "idle"
        # the ids the input all-to-alls left here, summed over the sharding groups
        received.append(
            sum(sum(c["received_from"]) // c["element_bytes"]
                for c in _STATE["records"][before:] if c.get("what") == "ids")
        )  # fmt: skip
        pooled_out[f"b{b}"] = pooled.detach().numpy()
    (folder / f"rank{rank}.json").write_text(
        json.dumps({"records": _STATE["records"], "received_ids": received})
    )
    np.savez(folder / f"rank{rank}.npz", **pooled_out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), int(sys.argv[2]))
