"""Workloads: specs (`spec`), presets (`presets`), the access model's kernels
(`sampler`) and trace generation (`generator`).

The names below load with their module on first use: importing a module of this package
(`replay.workload.spec`, which every system spec needs for its optimizers' update rules)
then builds no preset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replay.workload.presets import PRESETS, get_preset
    from replay.workload.spec import (
        TableSpec,
        UpdateRule,
        WorkloadSpec,
        load_spec,
        spec_from_dict,
    )

_PRESET_NAMES = ("PRESETS", "get_preset")
_SPEC_NAMES = ("TableSpec", "UpdateRule", "WorkloadSpec", "load_spec", "spec_from_dict")


def __getattr__(name: str) -> Any:
    if name in _PRESET_NAMES:
        from replay.workload import presets

        return getattr(presets, name)
    if name in _SPEC_NAMES:
        from replay.workload import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'replay.workload' has no attribute {name!r}")


__all__ = [
    "PRESETS",
    "TableSpec",
    "UpdateRule",
    "WorkloadSpec",
    "get_preset",
    "load_spec",
    "spec_from_dict",
]
