"""Command-line interface: `replay SUBCOMMAND ...`, one module per sub-command.

`main()` is the console script. It turns every `ReplayError` (bad input) into one line
on stderr and exit code 2; usage errors from the parser, and errors the operating system
raises (disk full, a name too long), also exit with 2. Before the command runs, its
outputs are checked against its inputs (`replay.cli._outputs`: nothing writes over what
it reads). Ctrl-C and SIGTERM end a command with one line and exit code 130 or 143
(`replay._signals`). `main` imports only the module of the sub-command it runs
(`load_commands`); call `load_commands()` before using `app` directly.
"""

from __future__ import annotations

import gc

from replay import GC_THRESHOLDS

# The console script imports this module first: raise the collector's thresholds before
# the heavy imports below (numpy, typer; the sub-command's numba and pyarrow), as
# `console_main` does for the whole command.
gc.set_threshold(*GC_THRESHOLDS)

import atexit  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import typer  # noqa: E402
from typer.exceptions import TyperException  # noqa: E402
from typer.main import get_command  # noqa: E402

from replay import _signals  # noqa: E402
from replay._malloc import retain_freed_memory  # noqa: E402
from replay.cli._outputs import check_outputs  # noqa: E402
from replay.cli.app import app  # noqa: E402
from replay.errors import Interrupted, ReplayError, cli_names  # noqa: E402

# in the order of the workflow: `replay --help` lists them so
COMMANDS = (
    "generate",
    "ingest",
    "inspect",
    "run",
    "mrc",
    "compare",
    "sweep",
    "plan",
    "report",
    "diff",
    "schema",
    "fit",
    "presets",
    "quickstart",
    "bench",
    "export",  # a group, as bench: `--help` lists the groups after the commands
    "record",
)


def load_commands(argv: list[str] | None = None) -> None:
    """Register the sub-command that `argv` names, or every one (for `--help`, no
    arguments, or a name that is not a sub-command, whose messages list them all).

    Importing only the command that runs keeps the others' imports off its start-up:
    `replay run` imported 0.2 s of modules it never used (`compare`, `quickstart`, ...).
    """
    name = argv[0] if argv else None
    for command in [name] if name in COMMANDS else COMMANDS:
        _register(command)
    # `--help` lists them as registered: in COMMANDS' order, whatever imported them first
    app.registered_commands.sort(key=lambda c: COMMANDS.index(c.name or ""))
    app.registered_groups.sort(key=lambda g: COMMANDS.index(str(g.name or "")))


def _register(command: str | None) -> None:
    # importing replay.cli.NAME registers NAME on `app`; static imports, since the
    # package allows no dynamic ones (tests/test_untrusted.py)
    if command == "bench":
        from replay.cli import bench  # noqa: F401
    elif command == "compare":
        from replay.cli import compare  # noqa: F401
    elif command == "diff":
        from replay.cli import diff  # noqa: F401
    elif command == "export":
        from replay.cli import export  # noqa: F401
    elif command == "fit":
        from replay.cli import fit  # noqa: F401
    elif command == "generate":
        from replay.cli import generate  # noqa: F401
    elif command == "ingest":
        from replay.cli import ingest  # noqa: F401
    elif command == "inspect":
        from replay.cli import inspect  # noqa: F401
    elif command == "mrc":
        from replay.cli import mrc  # noqa: F401
    elif command == "plan":
        from replay.cli import plan  # noqa: F401
    elif command == "presets":
        from replay.cli import presets  # noqa: F401
    elif command == "record":
        from replay.cli import record  # noqa: F401
    elif command == "quickstart":
        from replay.cli import quickstart  # noqa: F401
    elif command == "report":
        from replay.cli import report  # noqa: F401
    elif command == "run":
        from replay.cli import run  # noqa: F401
    elif command == "schema":
        from replay.cli import schema  # noqa: F401
    elif command == "sweep":
        from replay.cli import sweep  # noqa: F401
    else:
        raise ValueError(f"no sub-command {command!r}")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    with cli_names():  # errors name the command's flags, not the API's parameters
        try:
            return _main(argv)
        finally:
            # a claim of an output that the command took and never ended (its error came
            # after the output's checks) ends with the command: in a test or a notebook the
            # process, which would end it, lives on. Not imported: then nothing was claimed.
            output = sys.modules.get("replay._output")
            if output is not None:
                output.release_claims()


def _main(argv: list[str]) -> int:
    try:
        retain_freed_memory()
        load_commands(argv)
        group = get_command(app)  # built once: for the check and for the run
        check_outputs(group, argv)
        # typer returns the exit code of a `typer.Exit` (and turns KeyboardInterrupt
        # into Exit(130)) instead of raising it when not in standalone mode
        code = group(args=argv, prog_name="replay", standalone_mode=False)
    except Interrupted as exc:
        return _interrupted(str(exc))
    except ReplayError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except TyperException as exc:  # usage errors of the (vendored) click parser
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]  # click's NoArgsIsHelpError has show()
            return 2
        message = " ".join(exc.format_message().split())
        print(f"replay: error: {message} (see --help)", file=sys.stderr)
        return 2
    except OSError as exc:
        # the machine refused (disk full, a name too long, an I/O error): not a bug in
        # replay, so one line too; outputs are never left half-written (atomic folders)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"replay: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        return _interrupted()
    if code == 130 or _signals.received() is not None:
        return _interrupted()
    return code if isinstance(code, int) else 0


def _interrupted(detail: str = "") -> int:
    print(_signals.message() + (f": {detail}" if detail else ""), file=sys.stderr)
    return _signals.exit_code()


def console_main() -> None:
    """The work of the `replay` console script (`replay._console.main`, which installs
    the interrupt handlers first): `main()`, then a quick exit.

    Python's own shutdown tears down every module (numba, llvmlite, pyarrow, typer): 0.3 s
    after each command on the 2-core VM (measured: 2.47 s to the end of `main` and 2.83 s
    wall for a `replay run`). Everything a command writes is complete and renamed into
    place before `main` returns, so the process flushes its streams, waits for its
    non-daemon threads (unless interrupted: then their work is abandoned), runs the
    atexit handlers (as a normal exit does), and ends.
    """
    # A command is one short process: collect cyclic garbage every 100,000 allocations,
    # not 700. With the defaults a 53 M-lookup `replay run` made 271 collections (2 of
    # them full, over numba's objects): 0.10-0.145 s of pauses with the GIL held. The
    # modules a command imports live as long as the process, so they are imported with
    # no collection at all (~100,000 allocations for `run`), and then everything alive
    # moves into the collector's permanent generation (`gc.freeze`): its collections
    # walk only what the command allocates. Pauses in a 30 M-lookup run: 0.1 ms, against
    # 43-97 ms when the thresholds were raised only here, after the imports of this
    # module (gc callbacks, 2-core VM).
    gc.set_threshold(10 * GC_THRESHOLDS[0], *GC_THRESHOLDS[1:])
    try:
        load_commands(sys.argv[1:])
    except KeyboardInterrupt:
        code = _interrupted()
    else:
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        jit = sys.modules.get("replay._jit")  # the command's modules have kernels
        if jit is not None:
            jit.initialize_runtime_in_background()
        code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`... | head`)
            stream.flush()
    # an interrupted command abandons its threads' work in flight (a numba kernel cannot
    # be stopped halfway; `replay._threads.worker_pool`): it ends without joining them
    if _signals.received() is None:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    os._exit(code)


__all__ = ["COMMANDS", "app", "console_main", "load_commands", "main"]
