"""Column labels with their scope (issue 54): on a cluster a byte or time figure is one
GPU's, one node's, the job's or the total over every GPU, and its label says which (one
GPU's plan needs no scope: everything is that GPU's). Shared by plan.md
(`replay.plan.write`) and the report's plan section, so both say the same."""

from __future__ import annotations

from typing import Any


def is_cluster(document: dict[str, Any]) -> bool:
    """Whether a plan's document answers a cluster (plan.json's `cluster`)."""
    return bool(document.get("cluster"))


def checkpoint_columns(document: dict[str, Any]) -> tuple[str, str, str, str]:
    """The strategies table's stall, written, storage and restore labels: on a cluster the
    job stalls and restores as one, and every node writes and keeps its part."""
    if is_cluster(document):
        return (
            "stall (the job's)",
            "written (all nodes, per checkpoint)",
            "storage (all nodes)",
            "restore (the job's)",
        )
    return ("stall", "written", "storage", "restore")


def system_columns(document: dict[str, Any]) -> tuple[str, str]:
    """The systems table's time and energy labels: on a cluster the systems are one GPU
    holding every table (the reference beside the cluster's per-GPU answers)."""
    if is_cluster(document):
        return ("time per batch (one GPU, every table)", "energy per batch (one GPU, every table)")
    return ("time per batch", "energy per batch")


SCALING_COLUMNS = (
    "all-to-all bytes (total over all GPUs, per step)",
    "all-to-all (the job's, per step)",
    "all-reduce (the job's, per step)",
    "step time (the slowest GPU's)",
)


__all__ = ["SCALING_COLUMNS", "checkpoint_columns", "is_cluster", "system_columns"]
