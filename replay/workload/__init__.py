"""Workloads: specs (`spec`), presets (`presets`), the access model's kernels
(`sampler`) and trace generation (`generator`)."""

from replay.workload.presets import PRESETS, get_preset
from replay.workload.spec import TableSpec, UpdateRule, WorkloadSpec, load_spec, spec_from_dict

__all__ = [
    "PRESETS",
    "TableSpec",
    "UpdateRule",
    "WorkloadSpec",
    "get_preset",
    "load_spec",
    "spec_from_dict",
]
