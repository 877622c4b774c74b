"""TorchRec itself reads `replay plan`'s torchrec.json: its `EmbeddingOffloadStats` give
replay's own per-table LRU curve, cold + (1 - cold) x expected_miss_rate(f), within one
bin at every load factor and exactly at the edge sizes; `replay.parameter_constraints`
builds TorchRec's objects from the file.

Two steps, two interpreters (TorchRec is no dependency of replay):

    replay plan --workload tiny --batches 2000 --system hbm-lru --cache-budget 256KiB \\
        --cluster-mtbf 6h --time-per-batch 100ms --draws 50 --out /tmp/tiny-plan
    python benchmarks/torchrec_check.py reference /tmp/tiny-plan --workload tiny --batches 2000
    PYTHONPATH=. TORCHREC_PYTHON benchmarks/torchrec_check.py check /tmp/tiny-plan

`reference` (replay's environment) writes reference.npz into the plan folder: the exact
miss ratio at every cache size of every table (an unsampled plan); `check` (an
environment with torch and torchrec, e.g. `pip install torch torchrec fbgemm-gpu-cpu`)
compares. Measured 2026-11-26, torch 2.14.1, torchrec 1.9.2: no point off by more than
one bin over 400,000 load factors, exact at every edge size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def reference(plan: Path, workload: str, batches: int) -> None:
    from replay.analysis.horizon import per_table_mrc
    from replay.workload.onthefly import GeneratedTrace
    from replay.workload.presets import get_preset

    spec = get_preset(workload).with_overrides(batches=batches)
    doc = json.loads((plan / "torchrec.json").read_text())
    if doc["sample_rate"] < 1:
        raise SystemExit("reference: give a plan of an unsampled horizon (sample_rate 1)")
    sizes = [np.arange(1, t.rows + 1) for t in spec.tables]
    curves = per_table_mrc(GeneratedTrace(spec), sizes)
    out = {}
    for t, c in zip(spec.tables, curves, strict=True):
        assert c.lookups == doc["tables"][t.name]["lookups"], t.name
        out[t.name] = np.concatenate([[1.0], c.miss_ratios])
    np.savez(plan / "reference.npz", **out)
    print(f"wrote {plan / 'reference.npz'}: {len(out)} tables")


def check(plan: Path) -> None:
    import torch
    import torchrec
    from torchrec.distributed.planner.shard_estimators import EmbeddingOffloadStats
    from torchrec.distributed.planner.types import ParameterConstraints

    from replay.plan.torchrec import edge_sizes, parameter_constraints

    print("torch", torch.__version__, "torchrec", torchrec.__version__)
    doc = json.loads((plan / "torchrec.json").read_text())
    ref = np.load(plan / "reference.npz")
    constraints = parameter_constraints(plan / "torchrec.json")
    points = off = 0
    worst_edge = 0.0
    for name, t in doc["tables"].items():
        height, n, cold = t["height"], t["bins"], t["cold_miss_ratio"]
        hist = torch.tensor(t["mrc_hist_counts"], dtype=torch.float64)
        stats = EmbeddingOffloadStats(t["cacheability"], t["expected_lookups"], hist, height)
        grid = np.unique(
            np.concatenate([np.linspace(0, 1, 100_001)[1:], edge_sizes(height, n)[1:] / height])
        )
        miss = (
            EmbeddingOffloadStats.estimate_cache_miss_rate(
                torch.tensor(grid * height, dtype=torch.float32), stats.hist, stats.bins
            )
            .double()
            .numpy()
        )
        ours = cold + (1 - cold) * miss
        curve = ref[name]
        low = curve[np.clip(np.floor((grid + 1 / n) * height + 1e-9).astype(int), 0, height)]
        high = curve[np.clip(np.floor((grid - 1 / n) * height + 1e-9).astype(int), 0, height)]
        off += int(((ours < low - 1e-12) | (ours > high + 1e-12)).sum())
        points += len(grid)
        edges = edge_sizes(height, n)[1:]
        at_edges = cold + (1 - cold) * np.array(
            [stats.expected_miss_rate(k / height) for k in edges]
        )
        worst_edge = max(worst_edge, float(np.abs(at_edges - curve[edges]).max()))
        c = constraints[name]
        assert (
            isinstance(c, ParameterConstraints) and c.cache_params.load_factor == t["load_factor"]
        )
    print(
        f"{points:,} load factors over {len(doc['tables'])} tables: {off} off by more than one "
        f"bin; largest difference at the edge sizes {worst_edge:.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    r = sub.add_parser("reference")
    r.add_argument("plan", type=Path)
    r.add_argument("--workload", required=True)
    r.add_argument("--batches", type=int, required=True)
    c = sub.add_parser("check")
    c.add_argument("plan", type=Path)
    args = parser.parse_args()
    if args.step == "reference":
        reference(args.plan, args.workload, args.batches)
    else:
        check(args.plan)


if __name__ == "__main__":
    main()
