"""Placement policies, one registered plug-in per module (see `base` for the contract)."""

from replay.policies import belady, chunk, hot, lfu, lru, ssd_tbe, static, tbe  # noqa: F401  (registration)
from replay.policies.base import POLICIES, Policy, PolicyContext, register_policy

__all__ = ["POLICIES", "Policy", "PolicyContext", "register_policy"]
