"""Child processes of tests/test_record.py.

- `python _record_worker.py FOLDER RANK`: one rank of a 2-process CPU
  `DistributedModelParallel` (gloo, a `FileStore`) over an `EmbeddingBagCollection`
  whose table `item` is read by two features; it records with `replay.record` into
  `FOLDER/rank{RANK}`, fed its half of every batch of `FOLDER/batches.npz` (per table,
  the generated trace's ids of the batch; rank r takes the r-th half of each table's ids,
  each feature of a shared table half of that), so that merging the ranks gives back the
  generated order.
- `python _record_worker.py plain FOLDER`: a plain-PyTorch model recording every batch
  of `batches.npz` into `FOLDER/trace`, printing `batch N` after each (the interrupt
  tests signal it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _split(ids: np.ndarray, parts: int, samples: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`ids` cut into `parts` consecutive slices, each as (values, lengths over
    `samples` bags)."""
    out = []
    n = len(ids)
    for p in range(parts):
        values = ids[p * n // parts : (p + 1) * n // parts]
        cuts = (np.arange(samples + 1) * len(values)) // samples
        out.append((values, np.diff(cuts).astype(np.int32)))
    return out


def _dmp(folder: Path, rank: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    import replay

    job = json.loads((folder / "job.json").read_text())
    world, tables, batch_size = job["world"], job["tables"], job["batch_size"]
    dist.init_process_group(
        "gloo", init_method=f"file://{folder / 'store'}", rank=rank, world_size=world
    )
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed import sharding_plan as sp
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingEnv, ShardingPlan

    features = {t["name"]: t["features"] for t in tables}
    configs = [
        EmbeddingBagConfig(
            name=t["name"], embedding_dim=t["dim"], num_embeddings=t["rows"],
            feature_names=t["features"],
        )
        for t in tables
    ]  # fmt: skip
    dims = sum(t["dim"] * len(t["features"]) for t in tables)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
            self.dense = nn.Linear(dims, 1)

        def forward(self, kjt: Any) -> Any:
            return self.dense(self.ebc(kjt).values())

    torch.manual_seed(0)
    model = Model()
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.01}
    )
    generators = {
        t["name"]: sp.row_wise() if i == 0 else sp.table_wise(rank=i % world)
        for i, t in enumerate(tables)
    }
    module_plan = construct_module_sharding_plan(
        model.ebc, generators, sharder=sharder, local_size=world, world_size=world,
        device_type="cpu",
    )  # fmt: skip
    dmp = DistributedModelParallel(
        module=model, device=torch.device("cpu"), plan=ShardingPlan({"ebc": module_plan}),
        sharders=[sharder], env=ShardingEnv.from_process_group(dist.group.WORLD),
    )  # fmt: skip
    dense = torch.optim.SGD(dmp.module.dense.parameters(), lr=0.01)
    batches = np.load(folder / "batches.npz")
    local = batch_size // world
    with replay.record(dmp, out=folder / f"rank{rank}", optimizer=dense):
        for b in range(job["batches"]):
            keys, values, lengths = [], [], []
            for i, t in enumerate(tables):
                mine = _split(batches[f"b{b}_t{i}"], world, local)[rank][0]
                names = features[t["name"]]
                for v, n in _split(mine, len(names), local):
                    values.append(v)
                    lengths.append(n)
                keys.extend(names)
            # the KJT lists the features in another order than the configs: TorchRec
            # (and the recording) read a table's features in the config's order
            order = list(range(len(keys)))[::-1]
            kjt = KeyedJaggedTensor.from_lengths_sync(
                keys=[keys[i] for i in order],
                values=torch.from_numpy(
                    np.concatenate([values[i] for i in order]).astype(np.int64)
                ),
                lengths=torch.from_numpy(np.concatenate([lengths[i] for i in order])),
            )
            loss = dmp(kjt).sum()
            loss.backward()
            dense.step()
            dense.zero_grad()
    dist.barrier()
    dist.destroy_process_group()


def _plain(folder: Path) -> None:
    import torch

    import replay

    job = json.loads((folder / "job.json").read_text())
    rows = job["rows"]
    batches = np.load(folder / "batches.npz")

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embs = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, 4) for r in rows)

        def forward(self, ids: list[Any]) -> Any:
            return torch.cat([e(x, o) for e, (x, o) in zip(self.embs, ids, strict=True)], 1)

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    size = job["batch_size"]
    with replay.record(model, out=folder / "trace", optimizer=opt):
        for b in range(job["batches"]):
            ids = []
            for t in range(len(rows)):
                a = batches[f"b{b}_t{t}"]
                offsets = (np.arange(size) * len(a)) // size
                ids.append((torch.from_numpy(a), torch.from_numpy(offsets)))
            model(ids).sum().backward()
            opt.step()
            opt.zero_grad()
            print(f"batch {b}", flush=True)
            time.sleep(job.get("sleep_s", 0.0))


if __name__ == "__main__":
    if sys.argv[1] == "plain":
        _plain(Path(sys.argv[2]))
    else:  # FOLDER RANK, as tests/_dmp_harness.launch_ranks starts a rank
        _dmp(Path(sys.argv[1]), int(sys.argv[2]))
