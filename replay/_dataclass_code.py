"""The compiled methods of replay's dataclasses, kept from one command to the next.

`@dataclass` writes the source of each method it adds (`__init__`, `__repr__`, `__eq__`,
`__hash__`, and a frozen class's `__setattr__` and `__delattr__`) and compiles it with
`exec` when the class is defined, every time the module is imported: Python caches a
module's bytecode, not this. A 2-batch `replay run` defines 37 dataclasses, and compiling
their 221 methods took 20 ms of the ~0.4 s process on the 2-core VM (the classes' whole
creation 28-40 ms; measured by timing `dataclasses._create_fn` in the console).

`install()` (the console script, before replay's modules are imported) gives the
`dataclasses` module an `exec` of its own, which shadows the built-in there: for the
source of a method of a class defined in one of replay's modules, it runs the code
object compiled from that same source by an earlier command, and compiles it only where
there is none; any other source goes to the built-in `exec` as before. A code object
compiled from a text and that text give the same function, so nothing else changes:
`exec(text, g, ns)` is `exec(compile(text, "<string>", "exec"), g, ns)`. `save()` (the
console script, as the command ends) writes the code objects compiled meanwhile next to
replay's bytecode (`replay/__pycache__/`, under the interpreter's cache tag and with
its bytecode magic number), unless Python was told not to write bytecode
(`PYTHONDONTWRITEBYTECODE`, `-B`) or the folder cannot be written. A file from another
interpreter, a damaged one or one that cannot be read is ignored.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import Any

_PACKAGE = "replay"
_MAX_ENTRIES = 4096  # past this, a save keeps only what its own process used
_FOLDER = os.path.join(os.path.dirname(__file__), "__pycache__")

_codes: dict[str, CodeType] = {}  # source text -> its code, from the file and compiled
_used: set[str] = set()
_compiled = 0  # texts compiled by this process (not found in the file)


def cache_path() -> str:
    tag = sys.implementation.cache_tag or "none"
    return os.path.join(_FOLDER, f"dataclass-methods.{tag}.marshal")


def _read() -> dict[str, CodeType]:
    try:
        with open(cache_path(), "rb") as file:
            if file.read(len(MAGIC_NUMBER)) != MAGIC_NUMBER:
                return {}
            loaded = marshal.loads(file.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, CodeType)}


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    global _compiled
    name = globals.get("__name__", "") if isinstance(globals, dict) else ""
    if not isinstance(source, str) or not (name == _PACKAGE or name.startswith(_PACKAGE + ".")):
        builtins.exec(source, globals, locals)
        return
    code = _codes.get(source)
    if code is None:
        code = _codes[source] = compile(source, "<string>", "exec")
        _compiled += 1
    _used.add(source)
    builtins.exec(code, globals, locals)


def install() -> None:
    """Read the file and divert `dataclasses`' `exec` (once per process)."""
    if getattr(dataclasses, "exec", None) is _exec:
        return
    _codes.update(_read())
    dataclasses.exec = _exec  # type: ignore[attr-defined]


def compiled() -> int:
    """How many methods' sources this process compiled (none found in the file)."""
    return _compiled


def save() -> None:
    """Write the file where this process compiled a method the file lacked."""
    if not _compiled or sys.dont_write_bytecode:
        return
    merged = {**_read(), **{text: _codes[text] for text in _used}}
    if len(merged) > _MAX_ENTRIES:
        merged = {text: _codes[text] for text in _used}
    path = cache_path()
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(_FOLDER, exist_ok=True)
        with open(temporary, "wb") as file:
            file.write(MAGIC_NUMBER + marshal.dumps(merged))
        os.replace(temporary, path)
    except OSError:  # a read-only installation: compiled again next time
        with contextlib.suppress(OSError):
            os.unlink(temporary)


__all__ = ["cache_path", "compiled", "install", "save"]
