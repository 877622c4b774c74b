"""CPR's interval from its objective and the worst node's lost updates (issue 54): the
optimum against a hand golden and a brute-force minimum, the lost-samples bound, whole
batches, an interval that reaches the run's end flagged, and the node that holds the most
touched rows losing its share of them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.checkpoint.cpr import (
    cpr_optimum_s,
    cpr_overhead,
    cpr_pls,
    cpr_pls_bound_s,
    node_touched_shares,
)
from replay.engine.systems import resolve_system
from replay.plan.cluster_checkpoint import plan_cluster_checkpoints
from replay.plan.write_checkpoints_cluster import cluster_checkpoint_markdown


def test_optimum_hand_golden() -> None:
    # stall 2 s, cluster MTBF 100 s, 4 nodes: sqrt(2 x 2 x 100 x 4) - 2 = 38 s
    assert cpr_optimum_s(2.0, 100.0, 4) == pytest.approx(38.0)
    # a lost sample priced at 4x its training time halves the root: sqrt(1600 / 4) - 2
    assert cpr_optimum_s(2.0, 100.0, 4, cost=4.0) == pytest.approx(18.0)
    assert cpr_optimum_s(0.0, 100.0, 4) == 0.0
    # PLS(tau) = (tau / 2 + W) / (M N); the bound solves PLS = target
    assert cpr_pls(38.0, 2.0, 100.0, 4) == pytest.approx(21.0 / 400.0)
    assert cpr_pls_bound_s(2.0, 100.0, 4, 0.1) == pytest.approx(76.0)
    assert cpr_pls(cpr_pls_bound_s(2.0, 100.0, 4, 0.1), 2.0, 100.0, 4) == pytest.approx(0.1)


@settings(max_examples=60, deadline=None)
@given(
    stall=st.floats(1e-3, 1e3),
    mtbf=st.floats(60.0, 1e7),
    nodes=st.integers(1, 1024),
)
def test_optimum_is_the_objectives_minimum(stall: float, mtbf: float, nodes: int) -> None:
    best = cpr_optimum_s(stall, mtbf, nodes)
    taus = np.geomspace(max(best, 1e-6) / 50, max(best, 1e-6) * 50, 2001)
    values = [cpr_overhead(float(t), stall, stall, mtbf, nodes) for t in taus]
    at_best = cpr_overhead(best, stall, stall, mtbf, nodes)
    assert at_best <= min(values) * (1 + 1e-9) + 1e-15


def test_node_shares_sum_each_nodes_gpus() -> None:
    per_gpu = [
        {"node": 0, "distinct_rows": 10},
        {"node": 0, "distinct_rows": 30},
        {"node": 1, "distinct_rows": 60},
    ]
    assert node_touched_shares(per_gpu, 2) == pytest.approx([0.4, 0.6])
    assert node_touched_shares([{"node": 0}], 1) is None  # no distinct rows: unknown
    assert node_touched_shares(None, 2) is None


NODES = 4
NODE_MTBF = 4 * 3600.0


def _cpr(horizon_s: float, shares: list[float] | None = None) -> dict:
    system = resolve_system("hbm-lru", [f"cluster.nodes={NODES}", "checkpoint.replicas=1"])
    world = system.cluster.world_size  # type: ignore[union-attr]
    per_node = world // NODES
    doc: dict = {"checkpoint_bytes": {"sharded_per_rank": [5e8] * world, "replicated": 0}}
    if shares is not None:
        doc["per_gpu"] = [
            {"rank": r, "node": r // per_node, "distinct_rows": 1e6 * shares[r // per_node]}
            for r in range(world)
        ]
    out = plan_cluster_checkpoints(
        system, doc, mtbf_s=NODE_MTBF / NODES, draws=200, seed=7, time_per_batch_s=1.0,
        horizon_s=horizon_s, touched_rows=lambda k: np.minimum(np.asarray(k) * 1e4, 1e8),
    )  # fmt: skip
    cpr = next(p for p in out.strategies if p.strategy == "cpr")
    return {"plan": cpr.to_dict(), "notes": out.notes, "store": out.store}


def test_interval_is_the_optimum_in_whole_batches() -> None:
    got = _cpr(48 * 3600.0)
    p, b = got["plan"], got["plan"]["interval_basis"]
    expected = math.sqrt(2 * p["cost_s"] * NODE_MTBF) - p["cost_s"]  # M N = the node MTBF
    assert b["optimum_s"] == pytest.approx(expected)
    assert b["binding"] == "optimum" and not p["interval_capped_at_span"]
    assert abs(p["interval_s"] - expected) <= 1.0  # one batch of 1 s
    assert p["interval_s"] == int(p["interval_s"])
    for key in ("stall_s", "write_s", "cluster_mtbf_s", "nodes", "lost_sample_cost",
                "pls_target", "pls_bound_s", "objective"):  # fmt: skip
        assert key in b
    # below the 2% rule's interval (what the plan used to answer)
    assert p["interval_s"] < cpr_pls_bound_s(p["write_s"], NODE_MTBF / NODES, NODES, 0.02) / 5


def test_an_interval_reaching_the_runs_end_is_flagged() -> None:
    got = _cpr(60.0)  # a one-minute run: the optimum lies far beyond it
    p = got["plan"]
    assert p["interval_capped_at_span"] and p["interval_basis"]["binding"] == "span"
    assert any("no checkpoint falls inside the run" in n for n in got["notes"])
    text = "\n".join(cluster_checkpoint_markdown({"checkpoint": {**got, "strategies": [p]}}))
    assert "the run's end: no checkpoint inside the run" in text


def test_the_worst_node_loses_its_share() -> None:
    shares = [0.1, 0.1, 0.2, 0.6]
    p = _cpr(48 * 3600.0, shares)["plan"]
    assert p["worst_node"] == 3 and p["worst_node_share"] == pytest.approx(0.6)
    # the mean over which node fails is 1 / N of the touched rows; node 3 loses 60% of them
    assert p["lost_updates_rows_worst_node"] == pytest.approx(p["lost_updates_rows"] * NODES * 0.6)
    even = _cpr(48 * 3600.0)["plan"]
    assert even["lost_updates_rows"] == pytest.approx(p["lost_updates_rows"])
    assert even["lost_updates_rows_worst_node"] is None  # no per-GPU rows: not claimed
    doc = {"checkpoint": {"store": _cpr(48 * 3600.0, shares)["store"], "strategies": [p]}}
    text = "\n".join(cluster_checkpoint_markdown(doc))
    assert "(node 3) (2.4× the mean)" in text
    assert "which holds 60.0% of the touched rows" in text
