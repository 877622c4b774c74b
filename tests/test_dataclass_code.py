"""`replay._dataclass_code`: the console's dataclasses' methods come from code compiled by
an earlier command, and make the same classes as Python's own compilation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Defines dataclasses in a module that counts as replay's (its name), and prints what
# each class's methods do: run with and without the cache, the lines must be equal.
_CLASSES = """
import dataclasses, json, sys, types
module = types.ModuleType("replay._dataclass_code_probe")
sys.modules[module.__name__] = module
exec('''
from __future__ import annotations
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Frozen:
    capacity_bytes: int
    name: str = "hbm"
    tags: tuple[str, ...] = field(default=())

@dataclass(order=True)
class Plain:
    x: int
    y: list[int] = field(default_factory=list)
''', module.__dict__)
F, P = module.Frozen, module.Plain
a, b = F(8, "dram", ("x",)), F(8, "dram", ("x",))
try:
    a.capacity_bytes = 1
    frozen = "no"
except dataclasses.FrozenInstanceError:
    frozen = "yes"
p = P(1)
p.y.append(2)
print(json.dumps([repr(a), a == b, hash(a) == hash(b), frozen, repr(p), P(1) < P(2),
                  [f.name for f in dataclasses.fields(F)], F.__init__.__qualname__]))
"""


def _run(code: str, folder: Path, *, install: bool, dont_write: bool = False) -> list[str]:
    """stdout lines of `code` in a fresh interpreter, with the cache in `folder`
    (installed, then saved at the end) or without it; the last line: methods compiled."""
    prologue = f"import sys; import replay._dataclass_code as d; d._FOLDER = {str(folder)!r}; " + (
        "d.install(); " if install else ""
    )
    epilogue = "\nd.save(); print(d.compiled())\n"
    # Python's own switch, given here or not at all (some environments set it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, *(["-B"] if dont_write else []), "-c", prologue + code + epilogue],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_cached_methods_make_the_same_classes_and_compile_once(tmp_path: Path) -> None:
    python_s = _run(_CLASSES, tmp_path, install=False)
    first = _run(_CLASSES, tmp_path, install=True)
    second = _run(_CLASSES, tmp_path, install=True)
    assert first[0] == second[0] == python_s[0]
    assert json.loads(first[0])[:4] == ["Frozen(capacity_bytes=8, name='dram', tags=('x',))",
                                        True, True, "yes"]  # fmt: skip
    # Frozen: __init__, __repr__, __eq__, __hash__, __setattr__, __delattr__; Plain:
    # __init__, __repr__, __eq__ and the four comparisons
    assert int(first[-1]) == 13
    assert int(second[-1]) == 0  # all from the file the first process wrote
    assert [p.name for p in tmp_path.iterdir()] == [
        f"dataclass-methods.{sys.implementation.cache_tag}.marshal"
    ]


def test_a_class_outside_replay_is_compiled_by_python(tmp_path: Path) -> None:
    code = _CLASSES.replace("replay._dataclass_code_probe", "someone_elses")
    assert int(_run(code, tmp_path, install=True)[-1]) == 0
    assert not list(tmp_path.iterdir())


def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    from replay import _dataclass_code

    path = tmp_path / Path(_dataclass_code.cache_path()).name
    expected = _run(_CLASSES, tmp_path, install=False)[0]
    for content in (b"", b"\x00" * 3, b"not marshal at all", b"\x01\x02\x03\x04garbage"):
        path.write_bytes(content)
        lines = _run(_CLASSES, tmp_path, install=True)
        assert lines[0] == expected
        assert int(lines[-1]) == 13
        assert path.read_bytes() != content  # rewritten whole


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    lines = _run(_CLASSES, tmp_path, install=True, dont_write=True)
    assert int(lines[-1]) == 13
    assert not list(tmp_path.iterdir())


def test_the_console_installs_it_after_answering_version() -> None:
    """`replay --version` imports no dataclasses (it answers before), every command
    takes its classes' methods through the cache."""
    code = (
        "import sys; sys.argv = ['replay', *sys.argv[1:]]; import os; _exit = os._exit; "
        "os._exit = lambda c: (print('dataclasses' in sys.modules, "
        "getattr(sys.modules.get('dataclasses'), 'exec', None) is not None, file=sys.stderr), "
        "_exit(c)); from replay._console import main; main()"
    )
    for args, expected in ((["--version"], "False False"), (["presets"], "True True")):
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == expected
