"""Systems resolved against the plug-ins: a preset or TOML file plus `--set` overrides,
validated down to the policy's and the checkpoint strategy's own knobs.

`replay.system.spec` checks a spec's structure (every field's type and range, the tier
and link names it refers to). Which policies and checkpoint strategies exist, and what
each accepts, only their registries know (`replay.policies.POLICIES`,
`replay.checkpoint.STRATEGIES`, filled by a decorator where each class lives); those
modules read `SystemSpec`, so they sit above `system/`, and the whole check lives here,
in the layer that runs them together.

A system with a `[cluster]` parses (`replay.system.spec.build_system`) but is refused
here, in `system_from_dict`, the one gate `replay run`, `compare`, `sweep`, `plan`,
`bench` and `replay.resolve_system` all pass through: the engine replays one GPU, and
until the cluster replay exists (issue 41) a cluster must not be answered as one GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.checkpoint import STRATEGIES
from replay.errors import ConfigError, opt
from replay.policies import POLICIES
from replay.system.presets import SYSTEM_PRESETS
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data


def check_plugins(spec: SystemSpec, where: str) -> None:
    """ConfigError unless the spec's policy and checkpoint strategy exist and accept
    its knobs."""
    policy = spec.policy
    if policy.name not in POLICIES:
        raise ConfigError(
            f"{where}.policy.name: unknown policy {policy.name!r} "
            f"(known: {', '.join(sorted(POLICIES))})"
        )
    POLICIES[policy.name].check_spec(spec, {t.name for t in spec.tiers}, f"{where}.policy")
    ck = spec.checkpoint
    if ck.strategy not in STRATEGIES:
        raise ConfigError(
            f"{where}.checkpoint.strategy: unknown strategy {ck.strategy!r} "
            f"(known: {', '.join(sorted(STRATEGIES))})"
        )
    STRATEGIES[ck.strategy].check_spec(spec, f"{where}.checkpoint")


def refuse_cluster(spec: SystemSpec, where: str) -> None:
    """ConfigError for a system with a `[cluster]`: the engine replays one GPU only, and
    answering a cluster as one GPU would be silently wrong."""
    c = spec.cluster
    if c is not None:
        raise ConfigError(
            f"{where}.cluster: the cluster replay is not built yet ({c.nodes} "
            f"node{'s' if c.nodes != 1 else ''} x {c.gpus_per_node} GPUs given); drop "
            "[cluster] and the cluster.* overrides to replay one GPU"
        )


def system_from_dict(data: Any, where: str = "system") -> SystemSpec:
    """Validate plain data into a SystemSpec, its plug-ins included (and, for now, no
    `[cluster]`: `refuse_cluster`)."""
    spec = build_system(data, where)
    check_plugins(spec, where)
    refuse_cluster(spec, where)
    return spec


def resolve_system_with_origin(
    name_or_file: str | Path, overrides: list[str] | None = None
) -> tuple[SystemSpec, str]:
    """The validated spec and where it came from (a preset name or a file path)."""
    data, origin = load_system_data(name_or_file)
    where = origin
    if overrides:
        data = apply_overrides(data, overrides)
        where = f"{origin} with {opt('--set', 'overrides')}"
    return system_from_dict(data, where=where), origin


def resolve_system(name_or_file: str | Path, overrides: list[str] | None = None) -> SystemSpec:
    """A validated system spec from a preset or TOML file plus `--set` overrides."""
    return resolve_system_with_origin(name_or_file, overrides)[0]


def system_preset_summary() -> list[dict[str, str]]:
    """Name, policy and description of every system preset (for `replay presets`)."""
    rows = []
    for name in SYSTEM_PRESETS:
        spec = resolve_system(name)
        rows.append(
            {
                "name": name,
                "policy": spec.policy.name,
                "lookup": spec.lookup.location,
                "tiers": ", ".join(t.name for t in spec.tiers),
                "description": spec.description,
            }
        )
    return rows


__all__ = [
    "check_plugins",
    "refuse_cluster",
    "resolve_system",
    "resolve_system_with_origin",
    "system_from_dict",
    "system_preset_summary",
]
