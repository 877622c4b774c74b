"""TorchRec's own plan beside ours (`replay.plan.torchrec_planner`): a cluster plan runs
the real TorchRec's planner on the same tables, topology, budget and statistics, replays
its plan on the same trace with the same machinery as ours, and reports both with
TorchRec's own per-rank estimates (plan.json's `cluster.torchrec`, plan.md); without
TorchRec it says why; a planner that raises is one line and the plan goes on. The
criteo-terabyte plans on 8 GPUs (80 GiB and 1.5 GiB, both proposers) are under bench."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replay.plan.plan import PlanRequest, make_plan
from replay.plan.write import plan_json, write_plan
from replay.workload.presets import get_preset

CLUSTER = ("cluster.nodes=2", "cluster.gpus_per_node=2")
INTERFACE = ("sharding", "per_gpu", "imbalance", "all_to_all_bytes_per_batch", "step_time_s")
PER_GPU = ("rank", "lookups", "hit_at_budget", "estimate_ms")
SPEC = get_preset("tiny")


BUDGET = 64 << 10  # per GPU: tiny's two large tables get caches, the two small fit whole


def _plan(*sets: str, budget: int = BUDGET, spec: Any = SPEC, curves: bool = False) -> Any:
    request = PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=budget, hit_targets=(0.9,),
        mtbf_s=6 * 3600, sample_rate=1.0, draws=20, sets=(*CLUSTER, *sets),
    )  # fmt: skip
    document, drawn = make_plan(request)
    return (document, drawn) if curves else document


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    document, curves = _plan(curves=True)
    out = tmp_path_factory.mktemp("plan") / "p"
    write_plan(document, out, force=False, curves=curves)
    return {"document": document, "out": out}


def test_cluster_torchrec_has_the_interface_and_torchrecs_plan_replays(planned: dict) -> None:
    c = plan_json(planned["document"])["cluster"]
    t = c["torchrec"]
    for key in INTERFACE:
        assert key in t, key
    assert t["proposer"] == "default" and "error" not in t
    # TorchRec places the plan's caches in a GPU's memory (the dgx-h100 defaults)
    assert t["topology"] == {
        "world_size": 4, "local_world_size": 2, "compute_device": "cuda", "hbm_cap": 80e9,
        "intra_host_bw": 450e9 / 1e3, "inter_host_bw": 8 * 50e9 / 2 / 1e3,
    }  # fmt: skip
    assert t["kernels"] == {"fused": 2, "fused_uvm_caching": 2}
    assert t["batch_size_per_rank"] == SPEC.batch_size // 4
    assert [g["rank"] for g in t["per_gpu"]] == [0, 1, 2, 3]
    for g in t["per_gpu"]:
        for key in PER_GPU:
            assert key in g, key
        assert g["hit_at_budget"] is None or 0.0 <= g["hit_at_budget"] <= 1.0
        assert g["estimate_ms"] > 0 and g["hbm_bytes"] > 0
    # every lookup of the trace lands on one GPU: TorchRec cuts no column blocks below its
    # MIN_CW_DIM (128 columns), and tiny's tables have 8
    assert SPEC.embedding_dim < 128
    total = SPEC.batches * SPEC.lookups_per_batch
    assert sum(g["lookups"] for g in t["per_gpu"]) == total
    assert sum(g["lookups"] for g in c["per_gpu"]) == total
    assert t["estimate_max_ms"] == max(g["estimate_ms"] for g in t["per_gpu"])
    # TorchRec's choice per table, and its plan as ours (TorchRec executes what it plans)
    assert [e["table"] for e in t["tables"]] == [s.name for s in SPEC.tables]
    assert [e["type"] for e in t["tables"]] == [e["type"] for e in t["sharding"]["tables"]]
    assert t["sharding"]["torchrec_executable"] is True
    assert t["imbalance"] >= 1.0 and t["all_to_all_bytes_per_batch"] > 0
    assert t["step_time_s"] >= t["all_to_all_s_per_batch"] > 0
    assert "ids spread evenly" in t["methods"]["what_the_trace_sees"]


def test_torchrecs_plan_measures_as_the_same_plan_given_as_a_sharding_file(
    planned: dict, tmp_path: Path
) -> None:
    """TorchRec's plan, handed back as `cluster.sharding_file`, is measured by the plan's
    own path exactly as `cluster.torchrec` reports it: the same machinery."""
    t = planned["document"]["cluster"]["torchrec"]
    path = tmp_path / "torchrecs.json"
    path.write_text(json.dumps(t["sharding"]))
    again = _plan(f"cluster.sharding_file={path}", "cluster.torchrec_proposer=none")["cluster"]
    assert again["torchrec"] == {
        "skipped": "cluster.torchrec_proposer = none: TorchRec's planner not run"
    }
    for key in ("imbalance", "imbalance_run", "all_to_all_bytes_per_batch",
                "all_to_all_s_per_batch", "allreduce_s_per_batch", "step_time_s",
                "hit_at_budget"):  # fmt: skip
        assert again[key] == t[key], key
    for ours, theirs in zip(again["per_gpu"], t["per_gpu"], strict=True):
        for key in ("rank", "lookups", "hit_at_budget", "steady_lookups", "rows"):
            assert ours[key] == theirs[key], key


def test_plan_md_sets_torchrecs_plan_beside_ours(planned: dict) -> None:
    text = (planned["out"] / "plan.md").read_text()
    section = text[text.index("### TorchRec's plan beside ours") :]
    assert "| | ours (auto) | TorchRec's (default) |" in section
    assert "TorchRec's estimate, its largest rank" in section
    assert "What the trace sees that TorchRec's formulas miss" in section
    assert section.index("| 3 |") < section.index("## How each answer was reached")
    plan = json.loads((planned["out"] / "plan.json").read_text())
    assert plan["cluster"]["torchrec"]["per_gpu"][0]["rank"] == 0


def test_the_same_inputs_give_the_same_torchrec_part(planned: dict) -> None:
    again = _plan()
    assert json.dumps(again["cluster"]["torchrec"]) == json.dumps(
        planned["document"]["cluster"]["torchrec"]
    )


def test_without_torchrec_the_plan_says_why_and_is_otherwise_unchanged(
    planned: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from replay.plan.torchrec_planner import torchrec_missing

    for name in ("torch", "torchrec", "torchrec.distributed.planner"):
        monkeypatch.setitem(sys.modules, name, None)  # `import torch` raises ImportError
    reason = torchrec_missing()
    assert reason is not None and reason.startswith("TorchRec is not installed: pip install")
    document, curves = _plan(curves=True)
    c = plan_json(document)["cluster"]
    assert c["torchrec"] == {"skipped": reason}
    mine = plan_json(planned["document"])["cluster"]
    assert {k: v for k, v in c.items() if k != "torchrec"} == {
        k: v for k, v in mine.items() if k != "torchrec"
    }
    write_plan(document, tmp_path / "p", force=False, curves=curves)
    text = (tmp_path / "p" / "plan.md").read_text()
    assert f"TorchRec's planner was not run: {reason}." in text


def test_a_planner_that_finds_no_plan_is_one_line_and_the_plan_goes_on() -> None:
    """The scale-up proposer with 16 KiB of HBM per GPU: our caches fit the budget,
    TorchRec's own estimate (4 B per row of every cached table for FBGEMM's cache state,
    the shards' I/O buffers) does not."""
    c = plan_json(_plan("cluster.torchrec_proposer=scaleup", budget=16 << 10))["cluster"]
    t = c["torchrec"]
    assert t["error"].startswith(
        "TorchRec's planner: PlannerError: Unable to find a plan for this model because of "
        "insufficient storage"
    )
    assert "\n" not in t["error"] and "per_gpu" not in t and "sharding" not in t
    assert c["per_gpu"] and c["step_time_s"] > 0  # ours is answered all the same


def test_the_scaleup_proposer_splits_the_budget_itself() -> None:
    from replay.plan.torchrec_planner import SCALEUP_START

    document = _plan("cluster.torchrec_proposer=scaleup")
    t = plan_json(document)["cluster"]["torchrec"]
    assert t["proposer"] == "scaleup" and "error" not in t
    assert "EmbeddingOffloadScaleupProposer" in t["methods"]["planner"]
    assert t["topology"]["hbm_cap"] == BUDGET
    assert sum(g["lookups"] for g in t["per_gpu"]) == SPEC.batches * SPEC.lookups_per_batch
    assert all(g["hbm_bytes"] <= BUDGET for g in t["per_gpu"])  # TorchRec's own estimate
    # it grew the caches it was given from SCALEUP_START of the plan's load factors
    ours = {s["table"]: s["load_factor"] for s in document["cluster"]["torchrec_shards"]["shards"]}
    cached = [e for e in t["tables"] if e["kernel"] == "fused_uvm_caching"]
    assert cached and all(e["load_factor"] > SCALEUP_START * ours[e["table"]] for e in cached)


def test_at_production_scale_torchrecs_plan_is_routed_as_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the plan routes its steady batch in pieces (production scale), TorchRec's
    plan is routed the same way: one batch, every lookup on one GPU."""
    import replay.plan.cluster_scaling as pc

    monkeypatch.setattr(pc, "ROUTED_MIN_LOOKUPS", 10)
    c = plan_json(_plan())["cluster"]
    assert "production scale" in c["methods"]["steady"]
    t = c["torchrec"]
    assert "error" not in t
    assert sum(g["steady_lookups"] for g in t["per_gpu"]) == SPEC.lookups_per_batch
    assert sum(g["steady_lookups"] for g in c["per_gpu"]) == SPEC.lookups_per_batch
    assert t["step_time_s"] > 0 and t["imbalance"] >= 1.0


# -- criteo-terabyte on 8 GPUs (bench) ----------------------------------------------------


@pytest.mark.bench
@pytest.mark.parametrize("proposer", ["default", "scaleup"])
@pytest.mark.parametrize("budget", [80 << 30, 3 << 29])
def test_criteo_terabyte_on_8_gpus_torchrecs_plans_import_and_replay(
    budget: int, proposer: str
) -> None:
    """TorchRec's plans of criteo-terabyte (the preset's 1,000 batches) on one DGX H100
    node, budgets of 80 GiB and 1.5 GiB per GPU, import and replay: every lookup on a GPU,
    TorchRec's estimates within its HBM, and the trace's imbalance beside them."""
    spec = get_preset("criteo-terabyte")
    request = PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=budget, hit_targets=(0.9,),
        mtbf_s=30 * 86400, draws=20, time_per_batch_s=0.05,
        sets=("cluster.preset=dgx-h100", f"cluster.torchrec_proposer={proposer}"),
    )  # fmt: skip
    said: list[tuple[float, str]] = []
    document, _ = make_plan(request, lambda m: said.append((time.perf_counter(), m)))
    t = plan_json(document)["cluster"]["torchrec"]
    assert "error" not in t, t.get("error")
    assert len(t["per_gpu"]) == 8
    total = spec.batches * spec.lookups_per_batch
    assert sum(g["lookups"] for g in t["per_gpu"]) == pytest.approx(total, rel=1e-9)
    # within its HBM: the budget where it splits it, a GPU's memory where it places ours
    hbm = budget if proposer == "scaleup" else 80e9
    assert t["topology"]["hbm_cap"] == hbm
    assert all(0 < g["hbm_bytes"] <= hbm for g in t["per_gpu"])
    assert t["step_time_s"] > 0 and t["imbalance"] >= 1.0
    # TorchRec's planner adds seconds, not minutes
    start = next(s for s, m in said if "TorchRec's planner" in m)
    end = next(s for s, m in said if "TorchRec's plan on the trace" in m)
    assert end - start < 60


def test_above_the_table_gpu_limit_torchrecs_planner_is_skipped_and_says_why() -> None:
    """tiny's 4 tables on 2 x 2 GPUs are 16 table-GPU pairs: over a limit of 15, TorchRec's
    planner is not run (its partitioner's time grows with them) and the plan says so."""
    c = _plan("cluster.torchrec_max_table_gpus=15")["cluster"]
    reason = c["torchrec"]["skipped"]
    assert reason.startswith("TorchRec's planner not run: 4 tables x 4 GPUs = 16 is over")
    assert "cluster.torchrec_max_table_gpus (15)" in reason
    assert "sharding" in _plan("cluster.torchrec_max_table_gpus=16")["cluster"]["torchrec"]
