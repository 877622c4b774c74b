"""The time table's checkpoint stall column (issue 54): a share with the interval it holds
at, and a stall longer than its training said in seconds beside the multiple (a per-batch
checkpoint of a model of tens of GB gave a bare "59,834x")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from replay.report.compare_table import _stall_share


def _run(k: Any) -> Any:
    return SimpleNamespace(summary={"checkpoint": {"interval_batches_used": k}})


def test_a_share_under_one_names_its_interval() -> None:
    terms = {"total": 0.0105, "checkpoint": 0.0005}
    assert _stall_share(_run(20), terms) == "5% (every 20 batches)"
    assert _stall_share(_run(1), terms) == "5% (every batch)"


def test_a_stall_longer_than_its_training_says_both_times() -> None:
    # 96 s written every batch against 1.6 ms of training: 60,000x
    terms = {"total": 96.0016, "checkpoint": 96.0}
    text = _stall_share(_run(1), terms)
    assert text.startswith("60,000×")
    assert "1.6 min of stall every batch against 1.6 ms of training" in text
    # the stall per checkpoint is the steady state's, k batches of it
    text = _stall_share(_run(4), {"total": 0.003, "checkpoint": 0.002})
    assert "8 ms of stall every 4 batches against 4 ms of training" in text


def test_without_an_interval_the_share_alone() -> None:
    assert _stall_share(_run(None), {"total": 0.0105, "checkpoint": 0.0005}) == "5%"
