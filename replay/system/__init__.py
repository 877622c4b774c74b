"""System specifications (tiers, links, policy, compute) and their presets."""

from replay.system.spec import SystemSpec, resolve_system

__all__ = ["SystemSpec", "resolve_system"]
