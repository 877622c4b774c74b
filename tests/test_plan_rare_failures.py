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
