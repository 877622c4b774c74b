"""`Registry`: plug-in classes by name (the cache policies, the checkpoint strategies),
each built-in plug-in's module imported the first time its name is looked up.

A command uses one policy and one checkpoint strategy; importing every plug-in module
to fill the registries cost a one-GPU `replay run` of an LRU cache 15 modules and 25
numba dispatchers it never called (docs/performance.md, "Fixed cost"). The package that
owns a registry lists its built-in names and gives the loader, which imports the module
of a name with a static import (tests/test_untrusted.py allows no dynamic ones);
importing the module registers its class, as before. Membership and iteration list the
names without importing anything; looking a class up (`registry[name]`, `items()`,
`values()`) imports its module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """name -> class: the built-in names (`builtin`, their modules imported by `load` on
    first look-up) and any class registered under another name."""

    def __init__(self, kind: str, builtin: tuple[str, ...]) -> None:
        self.kind = kind  # "policy", "checkpoint strategy": for the messages
        self.builtin = builtin
        self._classes: dict[str, T] = {}
        # set by the package that owns the registry, which imports the plug-ins' modules
        self.load: Callable[[str], None] = _load_nothing

    def register(self, name: str, cls: T) -> None:
        if name in self._classes:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._classes[name] = cls

    def registered(self) -> tuple[str, ...]:
        """The names whose classes are registered now (their modules imported)."""
        return tuple(self._classes)

    def __getitem__(self, name: str) -> T:
        if name not in self._classes and name in self.builtin:
            self.load(name)
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self.builtin or name in self._classes

    def __iter__(self) -> Iterator[str]:
        yield from self.builtin
        yield from (name for name in self._classes if name not in self.builtin)

    def __len__(self) -> int:
        return len(self.builtin) + sum(1 for name in self._classes if name not in self.builtin)


def _load_nothing(name: str) -> None:
    pass


__all__ = ["Registry"]
