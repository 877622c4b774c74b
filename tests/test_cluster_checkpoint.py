"""Checkpoints and failures of a cluster (issue 42): the store's write and restore times
against hand goldens, the plan's goodput against an independent slow Monte Carlo, the
claims, and one-line refusals."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from replay.checkpoint.store import StoreModel, node_bytes
from replay.cli import main
from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.plan.cluster_checkpoint import fastpersist_speedup, plan_cluster_checkpoints
from replay.system.spec import CheckpointStoreSpec, build_cluster

GB = 1e9


def _cluster(**kw: float) -> object:
    base = {
        "nodes": 2, "gpus_per_node": 2, "nics_per_node": 1, "nic_bw_bytes_per_s": 10 * GB,
        "drives_per_node": 2, "drive_write_bw_bytes_per_s": 1 * GB,
        "drive_read_bw_bytes_per_s": 1.5 * GB,
    }  # fmt: skip
    return build_cluster({**base, **kw})


# -- hand goldens --------------------------------------------------------------------------


def test_node_bytes_split_the_replicated_state_over_every_rank() -> None:
    c = _cluster()
    b = node_bytes(np.array([1, 1, 0.5, 0.5]) * GB, 4 * GB, c)
    # ranks 1+1, 1+1 | 0.5+1, 0.5+1
    assert b.tolist() == [4 * GB, 3 * GB]


def test_sharded_write_is_the_slowest_nodes_bytes_over_its_drives() -> None:
    b = np.array([4 * GB, 2 * GB])
    m = StoreModel(_cluster(), CheckpointStoreSpec())
    # node 0: 4 GB / (2 drives x 1 GB/s) = 2 s; node 1: 1 s
    assert m.node_write_s(b).tolist() == [2.0, 1.0]
    assert m.write_s(b) == 2.0


def test_buddy_replicas_count_their_bytes_on_drives_and_nics() -> None:
    b = np.array([4 * GB, 2 * GB])
    m = StoreModel(_cluster(nic_bw_bytes_per_s=1 * GB), CheckpointStoreSpec(), replicas=1)
    # node 0: drives (4 + 2) / 2 = 3 s, NIC out 4 / 1 = 4 s, in 2 s -> 4 s; node 1: 3, 2, 4
    assert m.node_write_s(b).tolist() == [4.0, 4.0]


def test_a_shared_store_gives_each_node_its_share_of_the_cap() -> None:
    b = np.array([4 * GB, 2 * GB])
    store = CheckpointStoreSpec(
        kind="shared-fs", aggregate_write_bw_bytes_per_s=4 * GB,
        per_client_write_bw_bytes_per_s=3 * GB, latency_s=0.5,
    )  # fmt: skip
    m = StoreModel(_cluster(), store)
    # min(NIC 10, per client 3, aggregate 4 / 2 nodes) = 2 GB/s: 4 / 2 + 0.5
    assert m.write_s(b) == pytest.approx(2.5)


def test_rank0_baseline_gathers_then_writes_once() -> None:
    b = np.array([4 * GB, 2 * GB])
    m = StoreModel(_cluster(), CheckpointStoreSpec(), writer_bw_bytes_per_s=1 * GB)
    # gather 2 GB over node 0's 10 GB/s = 0.2 s; one writer at min(1, drives 2) = 6 s
    assert m.rank0_write_s(b) == pytest.approx(6.2)


def test_restore_after_a_node_failure_pulls_from_the_buddy() -> None:
    b = np.array([4 * GB, 2 * GB])
    m = StoreModel(_cluster(), CheckpointStoreSpec(), replicas=1)
    # drives read 3 GB/s: f = 0: max(4 / min(10, 3), 2 / 3); f = 1: max(2 / 3, 4 / 3)
    assert m.restore_node_failure_s(b) == pytest.approx(4 / 3)
    assert m.partial_restore_s(b) == pytest.approx(3 / 3)  # mean B_f / 3 GB/s
    assert StoreModel(_cluster(), CheckpointStoreSpec()).restore_node_failure_s(b) is None


def test_fastpersist_claim_is_computed_at_dgx2() -> None:
    # 8 DGX-2: 128 GB/s of drives against 1 GB/s + the gather: about 129x
    x = fastpersist_speedup(100 * GB, 8, 1 * GB)
    assert x == pytest.approx((100 / 1 + 100 * 7 / 8 / 100) / (100 / 128), rel=1e-9)


# -- goodput against an independent slow Monte Carlo ------------------------------------------

NODES = 4
NODE_MTBF = 4 * 3600.0
HORIZON = 48 * 3600.0


def _plan(draws: int) -> dict[str, object]:
    system = resolve_system("hbm-lru", [f"cluster.nodes={NODES}", "checkpoint.replicas=1"])
    world = system.cluster.world_size  # type: ignore[union-attr]
    doc = {"checkpoint_bytes": {"sharded_per_rank": [5e10] * world, "replicated": 0}}
    out = plan_cluster_checkpoints(
        system, doc, mtbf_s=NODE_MTBF / NODES, draws=draws, seed=7, time_per_batch_s=1.0,
        horizon_s=HORIZON, touched_rows=lambda k: np.minimum(np.asarray(k) * 1e4, 1e8),
    )  # fmt: skip
    return {p.strategy: p for p in out.strategies}


def _monte_carlo(
    tau: float, stall: float, restore: float, *, partial: bool, draws: int, seed: int
) -> np.ndarray:
    """Goodput per draw: each node fails after an exponential time of mean NODE_MTBF
    (drawn per node, memoryless, redrawn after it fails); training advances between
    checkpoints of `stall` seconds after every `tau` of work; a failure loses the work since
    the last completed checkpoint (none with `partial`) and pays `restore`, restarted by a
    failure during it."""
    rng = random.Random(seed)
    period = tau + stall
    end = HORIZON * period / tau  # the same tiled horizon as the plan's simulator
    out = []
    for _ in range(draws):
        wall, pos = 0.0, 0.0
        nxt = [rng.expovariate(1 / NODE_MTBF) for _ in range(NODES)]
        while True:
            i = min(range(NODES), key=nxt.__getitem__)
            t = nxt[i]
            if t >= wall + (end - pos):
                wall += end - pos
                break
            pos += t - wall
            wall = t
            if not partial:
                pos = math.floor(pos / period) * period  # the last completed checkpoint
            nxt[i] = wall + rng.expovariate(1 / NODE_MTBF)
            while True:  # restore; a failure during it restarts it
                i = min(range(NODES), key=nxt.__getitem__)
                if nxt[i] < wall + restore:
                    wall = nxt[i]
                    nxt[i] = wall + rng.expovariate(1 / NODE_MTBF)
                    continue
                wall += restore
                break
        out.append(HORIZON / wall)
    return np.asarray(out)


@pytest.mark.parametrize("name", ["sync-full", "cpr"])
def test_goodput_agrees_with_a_slow_monte_carlo(name: str) -> None:
    p = _plan(20000)[name]
    mc = _monte_carlo(
        p.interval_s, p.cost_s, p.restore_s, partial=name == "cpr", draws=3000, seed=11
    )
    half = 1.96 * mc.std(ddof=1) / math.sqrt(len(mc))
    assert abs(p.goodput - mc.mean()) <= half, (p.goodput, mc.mean(), half)
    # failures arrive over the wall time, about H / goodput at the cluster MTBF
    assert p.failures_per_run == pytest.approx(HORIZON / p.goodput / (NODE_MTBF / NODES), rel=0.05)


def test_cluster_plan_entries_have_the_issues_fields() -> None:
    plans = _plan(200)
    for p in plans.values():
        d = p.to_dict()
        for key in ("bytes_per_node", "write_s", "restore_node_failure_s", "goodput"):
            assert key in d
    assert plans["cpr"].lost_updates_rows and plans["cpr"].lost_updates_rows > 0
    assert plans["torch-save"].write_s > plans["sync-full"].write_s


# -- one-line refusals -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["checkpoint.store.kind=shared-fs", "checkpoint.store.aggregate_write_bw_bytes_per_s=0"],
         "zero bandwidth"),
        (["cluster.nodes=2", "checkpoint.replicas=2"], "more replicas than nodes"),
    ],
)  # fmt: skip
def test_bad_stores_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], needle: str
) -> None:
    out = tmp_path / "p"
    argv = ["plan", "--workload", "tiny", "--batches", "20", "-s", "fastpersist",
            "--cache-budget", "1MiB", "--cluster-mtbf", "6h", "-o", str(out)]  # fmt: skip
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_node_mtbf_of_zero_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--workload", "tiny", "--batches", "20", "-s", "fastpersist",
            "--set", "cluster.nodes=2", "--cache-budget", "1MiB", "--node-mtbf", "0s",
            "-o", str(tmp_path / "p")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--node-mtbf" in err, err


def test_a_store_without_drives_or_nics_is_refused() -> None:
    with pytest.raises(ConfigError, match="local-nvme needs drives"):
        StoreModel(_cluster(drives_per_node=0), CheckpointStoreSpec())
