"""Calibrate the step model (`replay.engine.step_model`) on a lent GPU: time FBGEMM's TBE
forward + backward for each kernel (`hbm`, `uvm`, `uvm-caching`) and one-GPU TorchRec
training steps under each pipeline class, and write what was measured beside what the
model predicts for the same shapes.

Nothing in replay depends on this script; the tests only import it. It needs a CUDA GPU
with torch, fbgemm_gpu and torchrec installed (CUDA builds):

    python benchmarks/calibrate_step.py --out calibration.json [--rows 2000000 --dim 256 \\
        --batch 16384 --pooling 30 --iters 20]

Without a GPU it says so in one line and exits 2. What it writes (JSON): the GPU's name;
the HBM and PCIe bandwidths the model was given (`--hbm-gbps`, `--pcie-gbps`: defaults,
TorchRec PR #4099's 2 TB/s and 50 GB/s); per kernel the measured forward and backward
seconds (CUDA events, median of `--iters` after 3 warm-ups) and the predicted parts; per
pipeline the measured step and the predicted one (`pipeline_runs`). The TBE's ids are
uniform over the table's rows, as in the EMO benchmark, so the predicted loads are in
closed form (`replay.engine.step_emo.unique_rows`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine.step_emo import unique_rows
from replay.engine.step_model import KernelLoad, StepConstants, kernel_parts


def _load(kernel: str, rows: int, dim: int, batch: int, pooling: int, lf: float) -> KernelLoad:
    lookups = batch * pooling
    uniq = unique_rows(lookups, rows)
    base = {"lookups": lookups, "bags": batch, "dim": dim, "row_bytes": dim * 4}
    if kernel == "uvm":
        return KernelLoad("uvm", host_lookups=lookups, host_rows=uniq, **base)
    if kernel == "uvm-caching":
        misses = uniq * (1.0 - min(lf, 1.0))  # uniform ids: hit = cached share of rows
        return KernelLoad("uvm-caching", fetched_rows=misses, evicted_rows=misses, **base)
    return KernelLoad("hbm", **base)


def _predicted(kernel: str, a: argparse.Namespace) -> dict[str, float]:
    c = StepConstants(a.hbm_gbps * 1e9, a.pcie_gbps * 1e9, a.pcie_gbps * 1e9)
    return kernel_parts(_load(kernel, a.rows, a.dim, a.batch, a.pooling, a.load_factor), c)


PREDICTED = {
    "hbm": lambda a: _predicted("hbm", a),
    "uvm": lambda a: _predicted("uvm", a),
    "uvm-caching": lambda a: _predicted("uvm-caching", a),
}


def _time(fn: Any, iters: int) -> float:
    import torch

    for _ in range(3):
        fn()
    out = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(out)


def measure_tbe(kernel: str, a: argparse.Namespace) -> dict[str, float]:
    """FBGEMM's training TBE of one table: forward alone, and forward + backward."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    location = {
        "hbm": EmbeddingLocation.DEVICE,
        "uvm": EmbeddingLocation.MANAGED,
        "uvm-caching": EmbeddingLocation.MANAGED_CACHING,
    }[kernel]
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(a.rows, a.dim, location, ComputeDevice.CUDA)],
        optimizer=EmbOptimType.EXACT_SGD,
        cache_load_factor=a.load_factor,
        learning_rate=0.01,
    )
    ids = torch.randint(0, a.rows, (a.batch * a.pooling,), device="cuda")
    offsets = torch.arange(0, a.batch * a.pooling + 1, a.pooling, device="cuda")
    forward = _time(lambda: tbe(ids, offsets), a.iters)

    def step() -> None:
        tbe(ids, offsets).sum().backward()

    both = _time(step, a.iters)
    return {"forward_s": forward, "backward_s": max(both - forward, 0.0)}


def measure_pipelines(a: argparse.Namespace) -> list[dict[str, Any]]:
    """One-GPU TorchRec training steps (one table, an MLP of `--dense-layers` layers of
    1,024) under each pipeline class; predicted beside measured."""
    import os
    from dataclasses import dataclass

    import torch
    import torch.distributed as dist
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.train_pipeline import (
        PrefetchTrainPipelineSparseDist,
        TrainPipelineBase,
        TrainPipelineSparseDist,
    )
    from torchrec.streamable import Pipelineable

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if not dist.is_initialized():
        dist.init_process_group("nccl", rank=0, world_size=1)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = EmbeddingBagConfig(
                name="t", embedding_dim=a.dim, num_embeddings=a.rows, feature_names=["f"]
            )
            self.ebc = EmbeddingBagCollection(tables=[table], device=torch.device("meta"))
            layers: list[torch.nn.Module] = [torch.nn.Linear(a.dim, 1024)]
            for _ in range(a.dense_layers - 1):
                layers += [torch.nn.ReLU(), torch.nn.Linear(1024, 1024)]
            self.mlp = torch.nn.Sequential(*layers)

        def forward(self, batch: Any) -> Any:
            pooled = self.ebc(batch.kjt).values()
            loss = self.mlp(pooled).float().pow(2).mean()
            return loss, loss.detach()

    @dataclass
    class Batch(Pipelineable):
        kjt: KeyedJaggedTensor

        def to(self, device: Any, non_blocking: bool = False) -> Batch:
            return Batch(self.kjt.to(device, non_blocking=non_blocking))

        def record_stream(self, stream: Any) -> None:
            self.kjt.record_stream(stream)

        def pin_memory(self) -> Batch:
            return Batch(self.kjt.pin_memory())

    def batches(n: int) -> list[Batch]:
        out = []
        for _ in range(n):
            lengths = torch.full((a.batch,), a.pooling, dtype=torch.int64)
            values = torch.randint(0, a.rows, (a.batch * a.pooling,))
            out.append(Batch(KeyedJaggedTensor(keys=["f"], values=values, lengths=lengths)))
        return out

    runs = []
    classes = {
        "base": TrainPipelineBase,
        "sparse-dist": TrainPipelineSparseDist,
        "prefetch-sparse-dist": PrefetchTrainPipelineSparseDist,
    }
    for name, cls in classes.items():
        model = DistributedModelParallel(Model(), device=torch.device("cuda"))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        pipe = cls(model, opt, torch.device("cuda"))
        data = iter(batches(a.iters + 6))
        for _ in range(3):
            pipe.progress(data)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                pipe.progress(data)
            except StopIteration:
                break
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        runs.append({"pipeline": name, "measured_step_s": statistics.median(times)})
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--pooling", type=int, default=30)
    p.add_argument("--load-factor", type=float, default=0.4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--dense-layers", type=int, default=4)
    p.add_argument("--hbm-gbps", type=float, default=2000.0)
    p.add_argument("--pcie-gbps", type=float, default=50.0)
    p.add_argument("--skip-pipelines", action="store_true")
    a = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("calibrate_step: error: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("calibrate_step: error: no CUDA GPU here (this script runs on a lent GPU)",
              file=sys.stderr)  # fmt: skip
        return 2
    doc: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "kernels": [],
    }
    for kernel, predict in PREDICTED.items():
        measured = measure_tbe(kernel, a)
        parts = predict(a)
        doc["kernels"].append(
            {
                "kernel": kernel,
                "measured": measured,
                "predicted_forward_s": parts["tbe_forward_s"] + parts["uvm_forward_s"]
                + parts["prefetch_s"],
                "predicted_backward_s": parts["tbe_backward_s"] + parts["uvm_backward_s"],
                "predicted_parts_s": parts,
            }
        )  # fmt: skip
    if not a.skip_pipelines:
        doc["pipeline_runs"] = measure_pipelines(a)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"calibrate_step: wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
