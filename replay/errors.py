"""User-facing errors.

`ReplayError` is the one exception the CLI turns into a one-line message and exit code 2.
Raise it for anything the user can fix (bad input, a bad file, an existing output);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class ReplayError(Exception):
    """An error caused by the user's input; printed as one line, exit code 2."""

    exit_code = 2


class ConfigError(ReplayError):
    """A workload or system specification is invalid (unknown key, bad unit or range)."""


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
