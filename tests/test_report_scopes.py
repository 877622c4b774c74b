"""The scope check of a cluster's labels (issue 54): it fails on a byte or time column that
does not say whose it is, passes a one-GPU plan's plain labels, and the labels plan.md and
the report share say it."""

from __future__ import annotations

from _report_checks import unscoped_labels

from replay.report.labels import SCALING_COLUMNS, checkpoint_columns, system_columns

CLUSTER_PLAN = """# Plan: 10 batches, 1 s of training

- Cluster: 4 GPUs (2 nodes x 2), auto sharding: ...

| GPUs | nodes | {cols} | imbalance |
|---|---|---|---|

| GPU | node | lookups over the run | shard bytes |
|---|---|---|---|
"""


def test_a_clusters_unscoped_column_is_caught() -> None:
    bare = CLUSTER_PLAN.format(cols="all-to-all bytes | step time")
    assert unscoped_labels(bare) == ["all-to-all bytes", "step time"]
    scoped = CLUSTER_PLAN.format(cols=" | ".join(SCALING_COLUMNS))
    assert unscoped_labels(scoped) == []  # and a table of one row per GPU needs no more


def test_one_gpus_plan_is_not_held_to_it() -> None:
    one = CLUSTER_PLAN.replace("- Cluster: 4 GPUs (2 nodes x 2), auto sharding: ...", "")
    assert unscoped_labels(one.format(cols="all-to-all bytes | step time")) == []


def test_a_reports_cluster_sections_only() -> None:
    report = (
        "# replay report\n\n## Plan\n\n- Cluster: 8 GPUs\n\n| strategy | stall |\n|---|---|\n\n"
        "## Plan 2 (one)\n\n| strategy | stall |\n|---|---|\n\n"
        "## Cluster\n\n| system | all-to-all time |\n|---|---|\n"
    )
    assert unscoped_labels(report) == ["stall", "all-to-all time"]


def test_shared_labels() -> None:
    cluster = {"cluster": {"nodes": 2}}
    assert all("the job" in c or "all nodes" in c for c in checkpoint_columns(cluster))
    assert checkpoint_columns({}) == ("stall", "written", "storage", "restore")
    assert all("one GPU" in c for c in system_columns(cluster))
    assert system_columns({}) == ("time per batch", "energy per batch")
