"""Checkpoint strategies, one registered plug-in per module (see `base` for the contract).
`STRATEGIES` imports a strategy's module the first time its name is looked up
(`replay._registry`): a command loads the strategies it runs, not all of them."""

from replay.checkpoint.base import (
    STRATEGIES,
    CheckpointContext,
    CheckpointResult,
    CheckpointStrategy,
    Timing,
    register_strategy,
)


def _load(name: str) -> None:
    # importing the module registers its class; static imports (tests/test_untrusted.py)
    if name == "check-n-run":
        from replay.checkpoint import check_n_run  # noqa: F401
    elif name == "checkfreq":
        from replay.checkpoint import checkfreq  # noqa: F401
    elif name == "cpr":
        from replay.checkpoint import cpr  # noqa: F401
    elif name == "fastpersist":
        from replay.checkpoint import fastpersist  # noqa: F401
    elif name == "none":
        from replay.checkpoint import none  # noqa: F401
    elif name == "sync-full":
        from replay.checkpoint import sync_full  # noqa: F401
    elif name == "trainingcxl":
        from replay.checkpoint import trainingcxl  # noqa: F401


STRATEGIES.load = _load

__all__ = [
    "STRATEGIES",
    "CheckpointContext",
    "CheckpointResult",
    "CheckpointStrategy",
    "Timing",
    "register_strategy",
]
