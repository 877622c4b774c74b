"""A CPU `DistributedModelParallel` (TorchRec) built from a sharding plan in the JSON form
of `replay.system.torchrec_plan`, for the tests that hold our exported plans against the
real training path: the ids each rank's lookups receive, and the pooled embeddings against
an unsharded `EmbeddingBagCollection` holding the same weights.

`run_plan_dmp` writes a job (JSON + npz) to a folder and starts one Python process per
rank running this file, with `LOCAL_WORLD_SIZE` the plan's GPUs per node (TorchRec's
table-row-wise and grid groups see nodes of that size). Each process joins a gloo group
(a `FileStore` in the folder: no port), builds the `ShardingPlan` with replay's own
builder (`sharding_plan_from_json`), shards an `EmbeddingBagCollection` (one feature per
table, sum pooling, the module itself at path "") with `init_data_parallel=False`, fills
every shard and the unsharded collection from one seeded array per table
(np.random.default_rng([seed, t]), float32), and runs the forward of each batch on its
local batch (rank r: samples [r B / W, (r + 1) B / W) of the global batch B). A forward
pre-hook on each of the sharded collection's lookups records the ids it receives (per
feature, as TorchRec hands them over: row-wise and table-row-wise ids are local to the
rank's block). Each process writes `rank{r}.json` (per batch, per lookup: keys, lengths
per key, values) and `rank{r}.npz` (per batch: the sharded and the unsharded pooled
embeddings).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _dmp_harness import launch_ranks


@dataclass(frozen=True)
class PlanDmpResult:
    world: int
    received: list[list[list[dict[str, Any]]]]  # rank -> batch -> lookup -> keys/lengths/values
    pooled: list[list[np.ndarray]]  # rank -> batch: the sharded collection's [local B, dims]
    reference: list[list[np.ndarray]]  # the unsharded collection's, same batch
    seconds: float

    def rows(self, rank: int, batch: int) -> dict[str, list[int]]:
        """The ids rank `rank`'s lookups received in `batch`, per feature (as given)."""
        out: dict[str, list[int]] = {}
        for lookup in self.received[rank][batch]:
            at = 0
            for key, n in zip(lookup["keys"], lookup["length_per_key"], strict=True):
                out.setdefault(key, []).extend(lookup["values"][at : at + n])
                at += n
        return out


def run_plan_dmp(
    form: dict[str, Any],
    tables: list[tuple[str, int, int]],
    batches: list[list[tuple[np.ndarray, np.ndarray]]],
    *,
    folder: Path,
    seed: int = 0,
    timeout_s: float = 300.0,
) -> PlanDmpResult:
    """`batches`: per batch, per table (name, rows, dim of `tables`, in order): the global
    batch's (lengths per sample, ids), sample-major."""
    folder.mkdir(parents=True, exist_ok=True)
    world, local = int(form["world_size"]), int(form["local_world_size"])
    job = {"form": form, "tables": tables, "batches": len(batches), "seed": seed}
    (folder / "job.json").write_text(json.dumps(job))
    arrays = {}
    for b, batch in enumerate(batches):
        for t, (lengths, ids) in enumerate(batch):
            arrays[f"l{b}_{t}"] = np.asarray(lengths, dtype=np.int64)
            arrays[f"v{b}_{t}"] = np.asarray(ids, dtype=np.int64)
    np.savez(folder / "batches.npz", **arrays)
    codes, seconds, _ = launch_ranks(Path(__file__), folder, world, local, timeout_s)
    if any(codes):
        tails = [(folder / f"rank{r}.log").read_text()[-3000:] for r in range(world)]
        lines = [f"-- rank {r} (exit {codes[r]}) --\n{t}" for r, t in enumerate(tails)]
        raise RuntimeError("DMP run failed:\n" + "\n".join(lines))
    received, pooled, reference = [], [], []
    for r in range(world):
        received.append(json.loads((folder / f"rank{r}.json").read_text()))
        npz = np.load(folder / f"rank{r}.npz")
        pooled.append([npz[f"dmp{b}"] for b in range(len(batches))])
        reference.append([npz[f"ref{b}"] for b in range(len(batches))])
    return PlanDmpResult(world, received, pooled, reference, seconds)


def _worker(folder: Path, rank: int) -> None:
    import torch
    import torch.distributed as dist

    job = json.loads((folder / "job.json").read_text())
    form, tables = job["form"], job["tables"]
    world = int(form["world_size"])
    dist.init_process_group(
        "gloo", init_method=f"file://{folder / 'store'}", rank=rank, world_size=world
    )
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    from torchrec.modules.embedding_configs import PoolingType

    from replay.system.torchrec_plan import sharding_plan_from_json

    configs = [
        EmbeddingBagConfig(
            name=name, embedding_dim=dim, num_embeddings=rows, feature_names=[name],
            pooling=PoolingType.SUM,
        )
        for name, rows, dim in tables
    ]  # fmt: skip
    full = {
        name: np.random.default_rng([job["seed"], t]).standard_normal((rows, dim)).astype("f4")
        for t, (name, rows, dim) in enumerate(tables)
    }
    unsharded = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    dmp = DistributedModelParallel(
        EmbeddingBagCollection(tables=configs, device=torch.device("meta")),
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=sharding_plan_from_json(form),
        device=torch.device("cpu"),
        init_data_parallel=False,
    )
    with torch.no_grad():
        for name, _, _ in tables:
            unsharded.embedding_bags[name].weight.copy_(torch.from_numpy(full[name]))
        for key, value in dmp.state_dict().items():
            name = key.split(".")[-2]
            shards = getattr(value, "local_shards", None)
            if shards is None:  # data-parallel: the whole table on every rank
                value.copy_(torch.from_numpy(full[name]))
                continue
            for shard in shards():
                (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.copy_(torch.from_numpy(full[name][r0 : r0 + nr, c0 : c0 + nc]))
    seen: list[dict[str, Any]] = []

    def hook(module: Any, args: Any) -> None:
        kjt = args[0]
        seen.append(
            {
                "keys": list(kjt.keys()),
                "length_per_key": [int(n) for n in kjt.length_per_key()],
                "values": [int(v) for v in kjt.values().tolist()],
            }
        )

    for lookup in dmp.module._lookups:
        lookup.register_forward_pre_hook(hook)
    data = np.load(folder / "batches.npz")
    received: list[list[dict[str, Any]]] = []
    out: dict[str, np.ndarray] = {}
    for b in range(job["batches"]):
        lengths, values = [], []
        for t in range(len(tables)):
            lens, ids = data[f"l{b}_{t}"], data[f"v{b}_{t}"]
            size = len(lens)
            lo, hi = rank * size // world, (rank + 1) * size // world
            starts = np.concatenate([[0], np.cumsum(lens)])
            lengths.append(lens[lo:hi])
            values.append(ids[starts[lo] : starts[hi]])
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=[name for name, _, _ in tables],
            values=torch.from_numpy(np.concatenate(values)),
            lengths=torch.from_numpy(np.concatenate(lengths)),
        )
        seen.clear()
        with torch.no_grad():
            got = dmp(kjt)
            got = got.wait() if hasattr(got, "wait") else got
            want = unsharded(kjt)
        received.append(list(seen))
        out[f"dmp{b}"] = got.values().numpy()
        out[f"ref{b}"] = want.values().numpy()
    (folder / f"rank{rank}.json").write_text(json.dumps(received))
    np.savez(folder / f"rank{rank}.npz", **out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), int(sys.argv[2]))
