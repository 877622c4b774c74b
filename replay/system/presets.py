"""Built-in system presets: one TOML file per preset in `replay/system/presets/`; and
the cluster presets a `[cluster]` table names with `preset = "..."`, in
`replay/system/clusters.toml`.

Hardware numbers live in `replay/system/devices.toml` and `clusters.toml`, each with its
source; a preset names devices (`device = "..."`) and states the rest (policy, cache
budget, compute), citing its sources in comments and in its `source` key. A cluster
preset is hardware only (nodes, GPUs, fabric, NICs, drives): it combines with any system
preset (`--set cluster.preset=dgx-h100`), whose tiers describe each GPU's memory.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from replay.errors import ConfigError

PRESET_DIR = Path(__file__).with_name("presets")
SYSTEM_PRESETS: tuple[str, ...] = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))
CLUSTERS_FILE = Path(__file__).with_name("clusters.toml")


def preset_data(name: str) -> dict[str, Any]:
    """Raw TOML data of a preset (its `extends` not yet resolved)."""
    from replay._toml import parse_toml

    if name not in SYSTEM_PRESETS:
        raise ConfigError(f"unknown system preset {name!r} (known: {', '.join(SYSTEM_PRESETS)})")
    return parse_toml((PRESET_DIR / f"{name}.toml").read_text(), f"preset {name}")


@functools.cache
def _clusters() -> dict[str, dict[str, Any]]:
    from replay._toml import parse_toml

    return parse_toml(CLUSTERS_FILE.read_text(), str(CLUSTERS_FILE.name))


def cluster_presets() -> tuple[str, ...]:
    """Names of the cluster presets, in the order clusters.toml gives them."""
    return tuple(_clusters())


def cluster_preset_data(name: str) -> dict[str, Any]:
    """The `[cluster]` keys a cluster preset sets (a copy; its `description` is for
    `replay presets` only)."""
    clusters = _clusters()
    if name not in clusters:
        raise ConfigError(f"unknown cluster preset {name!r} (known: {', '.join(clusters)})")
    return {k: v for k, v in clusters[name].items() if k != "description"}


def cluster_preset_summary() -> list[dict[str, str]]:
    """Name, shape and source of every cluster preset (for `replay presets`)."""
    rows = []
    for name, data in _clusters().items():
        rows.append(
            {
                "name": name,
                "gpus": f"{data.get('nodes', 1)} x {data['gpus_per_node']}",
                "fabric": str(data["intra_node_fabric"]),
                "description": str(data.get("description", "")),
                "source": str(data.get("source", "")),
            }
        )
    return rows
