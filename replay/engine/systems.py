"""Systems resolved against the plug-ins: a preset or TOML file plus `--set` overrides,
validated down to the policy's and the checkpoint strategy's own knobs.

`replay.system.spec` checks a spec's structure (every field's type and range, the tier
and link names it refers to). Which policies and checkpoint strategies exist, and what
each accepts, only their registries know (`replay.policies.POLICIES`,
`replay.checkpoint.STRATEGIES`, filled by a decorator where each class lives); those
modules read `SystemSpec`, so they sit above `system/`, and the whole check lives here,
in the layer that runs them together.

A system with a `[cluster]` resolves here like any other (`system_from_dict`, the one
gate `replay run`, `compare`, `sweep`, `plan`, `bench` and `replay.resolve_system` pass
through). Only `replay run`, `replay compare` (`replay.engine.cluster.replay_cluster`) and
`replay plan` answer for a cluster; whatever would answer it as one GPU refuses it with
`refuse_cluster` (`replay_trace` itself, `replay sweep`, `replay bench`), and run and
compare refuse a cluster's checkpoints (`refuse_cluster_checkpoint`: issue 42).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.checkpoint import STRATEGIES
from replay.errors import ConfigError, did_you_mean, opt, shown
from replay.policies import POLICIES
from replay.system.presets import SYSTEM_PRESETS
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data


def check_plugins(spec: SystemSpec, where: str) -> None:
    """ConfigError unless the spec's policy and checkpoint strategy exist and accept
    its knobs."""
    policy = spec.policy
    if policy.name not in POLICIES:
        raise ConfigError(
            f"{where}.policy.name: unknown policy {policy.name!r}"
            f"{did_you_mean(policy.name, sorted(POLICIES))} (known: {', '.join(sorted(POLICIES))})"
        )
    POLICIES[policy.name].check_spec(spec, {t.name for t in spec.tiers}, f"{where}.policy")
    ck = spec.checkpoint
    if ck.strategy not in STRATEGIES:
        raise ConfigError(
            f"{where}.checkpoint.strategy: unknown strategy {ck.strategy!r}"
            f"{did_you_mean(ck.strategy, sorted(STRATEGIES))} (known: "
            f"{', '.join(sorted(STRATEGIES))})"
        )
    STRATEGIES[ck.strategy].check_spec(spec, f"{where}.checkpoint")


CLUSTER_COMMANDS = "`replay run`, `replay compare` and `replay plan`"


def refuse_cluster(spec: SystemSpec, where: str, what: str = "this command") -> None:
    """ConfigError for a system with a `[cluster]` where `what` answers one GPU only:
    answering a cluster as one GPU would be silently wrong."""
    c = spec.cluster
    if c is not None:
        raise ConfigError(
            f"{where}.cluster: {what} answers one GPU only ({c.nodes} "
            f"node{'s' if c.nodes != 1 else ''} x {c.gpus_per_node} GPUs given); "
            f"{CLUSTER_COMMANDS} answer a cluster, or drop [cluster] and the cluster.* "
            "overrides to replay one GPU"
        )


def refuse_cluster_checkpoint(spec: SystemSpec, where: str) -> None:
    """ConfigError for a cluster that checkpoints: a cluster's checkpoints (one writer per
    rank, its drives) are not modelled yet (issue 42)."""
    if spec.cluster is not None and spec.checkpoint.strategy != "none":
        raise ConfigError(
            f"{where}.checkpoint.strategy: checkpoints of a cluster are not modelled yet "
            f"({spec.checkpoint.strategy!r} given); drop them with "
            "--set checkpoint.strategy=none"
        )
    if spec.cluster is not None and spec.failures.enabled:
        raise ConfigError(
            f"{where}.failures: failures of a cluster are not modelled yet (they need its "
            "checkpoints); drop [failures] (failures.mtbf_s=0, no failures.times_s)"
        )


def system_from_dict(data: Any, where: str = "system") -> SystemSpec:
    """Validate plain data into a SystemSpec, its plug-ins included (a `[cluster]` too:
    the commands that cannot answer one refuse it, `refuse_cluster`)."""
    spec = build_system(data, where)
    check_plugins(spec, where)
    return spec


def resolve_system_with_origin(
    name_or_file: str | Path, overrides: list[str] | None = None
) -> tuple[SystemSpec, str]:
    """The validated spec and where it came from (a preset name or a file path)."""
    data, origin = load_system_data(name_or_file)
    if not overrides:
        return system_from_dict(data, where=origin), origin
    data = apply_overrides(data, overrides)
    try:
        return system_from_dict(data, where=origin), origin
    except ConfigError as exc:  # the field's path, then the overrides that led to it
        given = f"with {opt('--set', 'overrides')} {' '.join(shown(o) for o in overrides)}"
        raise ConfigError(f"{exc.args[0]} ({given})") from None


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
    "CLUSTER_COMMANDS",
    "check_plugins",
    "refuse_cluster",
    "refuse_cluster_checkpoint",
    "resolve_system",
    "resolve_system_with_origin",
    "system_from_dict",
    "system_preset_summary",
]
