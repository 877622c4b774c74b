"""User-facing errors.

`ReplayError` is the one exception the CLI turns into a one-line message and exit code 2.
Raise it for anything the user can fix (bad input, a bad file, an existing output);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator

# A message names an option as its caller gave it: `opt("--force", "force=True")` reads
# "--force" when the command line raised the error and "force=True" through the Python
# API. The message holds both, between control characters no user text contains, and
# `str(error)` picks one (`cli_names` is on while `replay.cli.main` runs a command).
_SEP, _END = "\x1e", "\x1f"
_OPTION = re.compile(f"{_END}([^{_SEP}{_END}]*){_SEP}([^{_END}]*){_END}")
_cli_names = False


def opt(cli: str, api: str | None = None) -> str:
    """An option named in an error message: `cli` on the command line, `api` (default:
    the flag without dashes, `-` as `_`: "--batch-size" -> "batch_size") in Python."""
    if api is None:
        api = cli.split()[0].lstrip("-").replace("-", "_") + cli[len(cli.split()[0]) :]
    return f"{_END}{cli}{_SEP}{api}{_END}"


def render(text: str) -> str:
    """`text` with each `opt` as the current caller names it."""
    return _OPTION.sub(lambda m: m[1] if _cli_names else m[2], text)


def shown(text: str) -> str:
    """User text as a message quotes it: as given where every character prints, else its
    Python repr (a newline, an escape sequence or a bidi override cannot break the one
    line or restyle the terminal)."""
    return text if text.isprintable() else repr(text)


@contextlib.contextmanager
def cli_names() -> Iterator[None]:
    """Error messages name command-line flags (`--force`) for the duration."""
    global _cli_names
    before, _cli_names = _cli_names, True
    try:
        yield
    finally:
        _cli_names = before


class ReplayError(Exception):
    """An error caused by the user's input; printed as one line, exit code 2."""

    exit_code = 2

    def __str__(self) -> str:
        return render(super().__str__())


class ConfigError(ReplayError):
    """A workload or system specification is invalid (unknown key, bad unit or range)."""


def did_you_mean(given: str, names: Iterable[str]) -> str:
    """`; did you mean 'interval_s' or 'interval_batches'?`: the one or two of `names`
    nearest a name that is none of them, or "" where none is near."""
    import difflib  # only on an error's path

    near = difflib.get_close_matches(str(given), list(names), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""


def unknown_key(where: str, key: str, allowed: Iterable[str]) -> ConfigError:
    """The error for a key a table does not have: the one or two allowed keys nearest it
    where any is near (`interval`: `interval_s` or `interval_batches`), then every one."""
    names = sorted(allowed)
    hint = did_you_mean(key, names)
    return ConfigError(f"{where}: unknown key {key!r}{hint} (allowed: {', '.join(names)})")


class TraceError(ReplayError):
    """A trace folder is missing, incomplete, corrupt, or of an unsupported version."""


class InputError(ReplayError):
    """An input file (for example a Criteo TSV file) is missing or malformed."""


class OutputError(ReplayError):
    """An output path cannot be written, or already holds something."""


class Interrupted(ReplayError):
    """Ctrl-C or SIGTERM stopped a command that keeps its finished work for `--resume`
    (`replay generate`); the message says what was kept and how to finish. The CLI prints
    `replay: interrupted: MESSAGE` and exits with 130 (143 for SIGTERM), like any other
    interrupt (`replay._signals`)."""

    exit_code = 130
