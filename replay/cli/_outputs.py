"""No command writes over its own inputs: one check, before any command runs.

`replay fit T --out T/manifest.json --force` once replaced a trace's manifest with TOML;
`replay report R --out R --force` would replace the run folders it reads. Rather than each
command remembering which of its options name files it reads, `check_outputs` parses the
command line once more (click's resilient parsing: no errors, no callbacks) and compares
every path a command writes with every path it reads:

- outputs: `--out` of every command, `--figure` of `fit`, and `quickstart --trace` (the
  trace it generates, replacing the folder);
- inputs: every other path option or argument (trace folders, spec files, result folders,
  TSV files) that exists, and the values of `--system`, `--systems` (comma-separated) and
  `--workload` that name existing files rather than presets (the loaders' own rule: a
  preset name wins unless the value has a suffix).

An output is refused when it is an input, lies inside an input folder, or holds an input
(replacing it with `--force` would delete the input); two outputs may not overlap either.
Paths are compared after resolving symlinks, so a link to an input is the input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from replay.errors import OutputError

OUTPUTS: dict[str, tuple[str, ...]] = {
    "fit": ("out", "figure"),
    "quickstart": ("out", "trace"),
}
DEFAULT_OUTPUTS = ("out",)
# string options that name a preset or a TOML file; `systems` is a comma-separated list
NAMED_FILES = ("system", "systems", "workload")


def check_outputs(group: Any, argv: list[str]) -> None:
    """OutputError if an output of the command `argv` (of the click `group`, the built
    typer app) overlaps one of its inputs (or another output). Does nothing for a command
    line that does not parse."""
    if not argv:
        return
    params, path_names = _params(group, argv)
    if not params:
        return
    command = argv[0]
    output_names = OUTPUTS.get(command, DEFAULT_OUTPUTS)
    outputs = [(n, Path(v)) for n in output_names for v in _values(params.get(n))]
    if not outputs:
        return
    inputs: list[Path] = []
    for name, value in params.items():
        if name in output_names:
            continue
        for item in _values(value):
            if name in NAMED_FILES:
                inputs.extend(_named_files(name, str(item)))
            elif name in path_names and _exists(Path(item)):
                inputs.append(Path(item))
    for i, (_, out) in enumerate(outputs):
        for given in inputs:
            _refuse_overlap(out, given, "an input of this command")
        for _, other in outputs[i + 1 :]:
            _refuse_overlap(out, other, "another output of this command")


def _params(group: Any, argv: list[str]) -> tuple[dict[str, Any], frozenset[str]]:
    """The parsed values of `argv`'s options and arguments, and the names of those that
    are paths."""
    from typer.models import TyperPath

    command = getattr(group, "commands", {}).get(argv[0])
    if command is None:
        return {}, frozenset()
    try:
        ctx = command.make_context(argv[0], list(argv[1:]), resilient_parsing=True)
    except Exception:  # the real parse reports it, with its message
        return {}, frozenset()
    paths = frozenset(p.name for p in command.params if isinstance(p.type, TyperPath) and p.name)
    return dict(ctx.params), paths


def _values(value: Any) -> Iterable[Any]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return [v for v in value if v is not None]
    return (value,)


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except (OSError, ValueError):  # a name too long, a NUL byte: the command says so
        return False


def _named_files(name: str, value: str) -> list[Path]:
    items = value.split(",") if name == "systems" else [value]
    found = []
    for item in items:
        path = Path(item.strip())
        if not item.strip() or not _exists(path):
            continue
        if not path.suffix and item.strip() in _preset_names(name):
            continue  # a preset, whatever lies on disk under that name
        found.append(path)
    return found


def _preset_names(name: str) -> frozenset[str]:
    if name == "workload":
        from replay.workload.presets import PRESETS

        return frozenset(PRESETS)
    from replay.system.presets import SYSTEM_PRESETS

    return frozenset(SYSTEM_PRESETS)


def _resolved(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return path.absolute()


def _refuse_overlap(out: Path, given: Path, what: str) -> None:
    a, b = _resolved(out), _resolved(given)
    if a == b:
        raise OutputError(f"{out}: is {what} ({given}); write the output elsewhere")
    if b in a.parents:
        raise OutputError(f"{out}: is inside {given}, {what}; write the output elsewhere")
    if a in b.parents:
        raise OutputError(
            f"{out}: holds {given}, {what}, which replacing it would destroy; "
            "write the output elsewhere"
        )


__all__ = ["check_outputs"]
