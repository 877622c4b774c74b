"""plan.md's lines for a cluster's step by parts (`cluster.step`,
`replay.engine.step_model`): the slowest GPU's parts, what its pipeline hides, and the
spread of the GPUs' steps.

Placement. Beside `replay.plan.write_cluster` (which calls it); formatting only."""

from __future__ import annotations

from typing import Any

from replay._units import format_duration

LABELS = {
    "input_copy_s": "input copy to the GPU",
    "input_dist_s": "input all-to-all",
    "prefetch_s": "cache fills and write-backs (PCIe)",
    "drive_s": "drive reads and writes",
    "tbe_forward_s": "TBE forward (HBM)",
    "uvm_forward_s": "host-memory reads (UVM)",
    "output_dist_forward_s": "output all-to-all",
    "dense_forward_s": "dense forward",
    "dense_backward_s": "dense backward and optimizer",
    "output_dist_backward_s": "output all-to-all backward",
    "tbe_backward_s": "TBE backward and fused optimizer (HBM)",
    "uvm_backward_s": "host-memory updates (UVM)",
    "allreduce_s": "dense all-reduce",
    "other_s": "other",
}


def step_markdown(s: dict[str, Any]) -> list[str]:
    """The `### Step time by parts` section."""
    ov = s["overlap"]
    per = s.get("per_gpu", [])
    steps = [g["step_time_s"] for g in per]
    out = [
        "",
        "### Step time by parts",
        "",
        f"Pipeline `{ov['pipeline']}` ({ov['rule']}). Step time "
        f"{format_duration(s['step_time_s'])}, set by GPU {s['worst_rank']}"
        + (
            f" (GPUs from {format_duration(min(steps))} to {format_duration(max(steps))})"
            if len(steps) > 1
            else ""
        )
        + f"; {s['basis']}.",
        "",
        "| part (GPU " + str(s["worst_rank"]) + ") | time | hidden by the pipeline |",
        "|---|---|---|",
    ]
    hidden = ov.get("hidden_s", {})
    for name, value in s["parts_s"].items():
        if value <= 0:
            continue
        h = hidden.get(name)
        out.append(
            f"| {LABELS.get(name, name)} | {format_duration(value)} | "
            f"{'' if h is None else format_duration(h)} |"
        )
    return out


__all__ = ["LABELS", "step_markdown"]
