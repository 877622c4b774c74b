"""Cache and placement policies, one module each, its class registered under its name
(`register_policy`). `POLICIES` imports a policy's module the first time its name is looked
up (`replay._registry`): a command loads the policies it runs, not all of them."""

from replay.policies.base import POLICIES, Policy, PolicyContext, register_policy


def _load(name: str) -> None:
    # importing the module registers its class; static imports (tests/test_untrusted.py)
    if name == "belady":
        from replay.policies import belady  # noqa: F401
    elif name == "chunk":
        from replay.policies import chunk  # noqa: F401
    elif name == "hot":
        from replay.policies import hot  # noqa: F401
    elif name == "lfu":
        from replay.policies import lfu  # noqa: F401
    elif name == "lru":
        from replay.policies import lru  # noqa: F401
    elif name == "ssd-tbe":
        from replay.policies import ssd_tbe  # noqa: F401
    elif name == "static":
        from replay.policies import static  # noqa: F401
    elif name == "tbe":
        from replay.policies import tbe  # noqa: F401


POLICIES.load = _load

__all__ = ["POLICIES", "Policy", "PolicyContext", "register_policy"]
