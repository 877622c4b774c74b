"""System specifications (tiers, links, policy, compute) and their presets.

`replay.engine.systems.resolve_system` resolves one against the policy and checkpoint
plug-ins."""

from replay.system.spec import SystemSpec

__all__ = ["SystemSpec"]
