"""A plan whose run expects few failures (issue 54): every strategy carries the chance of a
failure and the goodput of a run that sees one, and no line advises a percentile."""

from __future__ import annotations

import math

from replay.plan.plan import PlanRequest, make_plan
from replay.plan.write import answers
from replay.report.plan_section import checkpoint_line, format_percent, goodput_line
from replay.workload.presets import get_preset


def _plan(expected_failures: float) -> dict:
    spec = get_preset("criteo-kaggle").with_overrides(batches=40, batch_size=128)
    step = 0.05
    request = PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=8 << 20, hit_targets=(0.9,),
        mtbf_s=40 * step / expected_failures, sample_rate=1.0, time_per_batch_s=step,
        draws=1000,
    )  # fmt: skip
    return make_plan(request)[0]


def test_a_run_of_rare_failures_advises_no_percentile() -> None:
    doc = _plan(0.007)
    for s in doc["checkpoint"]["strategies"]:
        p, n = s["p_any_failure"], s["failures_per_run"]
        # the failure-free run's wall time includes the stalls: the chance is at least the
        # training time's, 1 - exp(-0.007), and equals 1 - exp(-failures) within the draws'
        # noise (1,000 draws of about 0.007 failures each)
        assert p >= -math.expm1(-0.007) * (1 - 1e-9)
        if s["simulated"]:
            assert abs(p - -math.expm1(-n)) < 4 * math.sqrt(p / 1000), s["name"]
        assert s["goodput_given_failure"] is not None
        assert 0 < s["goodput_given_failure"] <= s["goodput"] + 1e-12
    lines = [*answers(doc), checkpoint_line(doc), goodput_line(doc)]
    assert not [line for line in lines if "percentile" in line], lines
    best = doc["checkpoint"]["strategies"][0]
    assert f"{format_percent(best['p_any_failure'])} of runs see one" in goodput_line(doc)


def _none_of(doc: dict) -> dict:
    return next(s for s in doc["checkpoint"]["strategies"] if s["name"] == "none")


def test_one_gpu_and_a_cluster_answer_none_alike() -> None:
    """`none` restarts the whole run at any failure, on one GPU or on many: at the same
    run, MTBF and restart both plans answer it with the same draws (before, the cluster's
    was Daly's expected-time ratio, 0.9993 where 1,000 draws of a 2 s run at a 1 d MTBF
    all finish: a mean and a "5th percentile" no run has). The line's expected failures
    are the chance's where no draw saw one, never "expects 0 failures"."""
    spec = get_preset("criteo-kaggle").with_overrides(batches=40, batch_size=128)
    docs = []
    for sets in ((), ("cluster.nodes=2", "cluster.gpus_per_node=2")):
        request = PlanRequest(
            source=spec, systems=("hbm-lru",), cache_budget_bytes=8 << 20, hit_targets=(0.9,),
            mtbf_s=86400.0, sample_rate=1.0, time_per_batch_s=0.05, sets=sets, draws=1000,
        )  # fmt: skip
        docs.append(make_plan(request)[0])
    one, cluster = (_none_of(doc) for doc in docs)
    assert "cluster" in docs[1] and "cluster" not in docs[0]
    for key in ("goodput", "goodput_p5", "simulated", "draws", "p_any_failure"):
        assert one[key] == cluster[key], key
    assert cluster["simulated"] and cluster["goodput"] == cluster["goodput_p5"] == 1.0
    assert cluster["goodput_model"] < 1.0  # Daly's ratio stays beside it
    assert math.isclose(one["goodput_given_failure"], cluster["goodput_given_failure"])
    for doc in docs:
        line = goodput_line(doc)
        assert "the run expects 0.000023 failures: 0.00231% of runs see one" in line, line
