"""The progress display every long command shows: on a terminal only, on stderr.

One look for every command: a line `COMMAND: STAGE  [bar]  DONE/TOTAL UNIT  ELAPSED`,
one stage after another (each stage's own elapsed time; a stage whose amount of work is
unknown shows a moving bar and its elapsed time only). The callbacks that feed it
(`Display.update`, `Display.advance`, `Display.batches`) redraw it at most every
`MIN_INTERVAL_S` (a callback per batch costs a clock read), a new stage at once, and
rich's refresh thread `REFRESH_PER_SECOND` times a second besides, so that the elapsed
time ticks while no callback comes: at most 10 redraws a second but for stage changes.
The line is cleared when the display ends, normally or by an error or Ctrl-C
(`KeyboardInterrupt` unwinds through the `with`), so what stays on the terminal is the
command's own output.

Where stderr is not a terminal (a pipe, a file, a CI log, `nohup`) nothing is drawn;
instead a command that runs longer than `LOG_INTERVAL_S` writes a timestamped line to
stderr every `LOG_INTERVAL_S` (`2026-12-06T11:20:00Z replay plan: STAGE DONE/TOTAL UNIT,
stage 1m30s, 3m00s in all`), from a daemon thread that reads the stage the callbacks
last set (so a stage without callbacks is still reported), stopped as the command ends.
A command shorter than that writes nothing: its output is byte for byte what it prints
without a display. Whether stderr is a terminal is
`replay.cli.app.show_progress` (a global of this module, so a test fakes a terminal by
patching `replay.cli._progress.show_progress`).

The engine never draws: its long functions take a callback (`on_progress(done, total)`
and the like), which the commands point at a `Display`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from replay.cli.app import show_progress

# rich's own redraws, which keep a stage's elapsed time ticking while no callback comes
REFRESH_PER_SECOND = 2
# a callback's count is drawn at most this often (the last count always): with rich's
# own, at most 10 redraws a second
MIN_INTERVAL_S = 0.125
# where stderr is no terminal: a timestamped line this often (the first after as long)
LOG_INTERVAL_S = 60.0


class Display:
    """A command's progress line; every method is a no-op when `live` is None."""

    def __init__(self, command: str, live: Any = None) -> None:
        self.command = command
        self._live = live  # a started rich Progress, or None
        self._task: Any = None
        self._total: int | None = None
        self._unit = ""
        self._done = 0
        self._pushed_at = 0.0
        self._stage = ""
        self._started = self._stage_at = time.monotonic()

    @property
    def shown(self) -> bool:
        """Whether anything is drawn (stderr is a terminal)."""
        return self._live is not None

    def stage(self, name: str, *, total: int | None = None, unit: str = "") -> None:
        """Start the next stage: `name` says what the command does now; `total` is the
        amount of work in `unit`s when it is known (then `update`/`advance` count it)."""
        self._total, self._unit, self._done = total, unit, 0
        self._stage, self._stage_at = name, time.monotonic()
        if self._live is None:
            return
        if self._task is not None:
            self._live.update(self._task, visible=False)
        self._task = self._live.add_task(
            f"{self.command}: {name}", total=total, count=self._count(0)
        )
        self._pushed_at = time.perf_counter()
        self._live.refresh()

    def update(self, done: int, total: int | None = None) -> None:
        """`done` units of the stage's work are done (of `total`, when it changed)."""
        self._done = done
        if total is not None:
            self._total = total
        if self._live is None or self._task is None:
            return
        now = time.perf_counter()
        if now - self._pushed_at < MIN_INTERVAL_S and (self._total is None or done < self._total):
            return
        self._pushed_at = now
        self._live.update(
            self._task, completed=done, total=self._total, count=self._count(done), refresh=True
        )

    def advance(self, n: int = 1) -> None:
        """`n` more units of the stage's work are done."""
        self.update(self._done + n)

    def log_line(self) -> str:
        """The timestamped line written where stderr is no terminal."""
        now = time.monotonic()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        stage = f" {self._stage}" if self._stage else ""
        count = f" {self._count(self._done)}" if self._total is not None else ""
        return (
            f"{stamp} replay {self.command}:{stage}{count}, stage "
            f"{_elapsed(now - self._stage_at)}, {_elapsed(now - self._started)} in all"
        )

    def around(self, echo: Callable[[str], None]) -> Callable[[str], None]:
        """`echo` (a printer of whole lines, to stdout or stderr) with the display
        cleared while it prints and drawn again below the line."""
        live = self._live
        if live is None:
            return echo

        def printed(line: str) -> None:
            live.stop()  # transient: the line is erased
            try:
                echo(line)
            finally:
                live.start()

        return printed

    def batches(self, done: int, total: int) -> None:
        """The engine's `on_progress(batches_done, batches)`."""
        self.update(done, total)

    def _count(self, done: int) -> str:
        if self._total is None:
            return ""
        if self._unit == "bytes":  # binary prefixes, as every size the tool prints
            from replay._units import format_bytes

            return f"{format_bytes(done)}/{format_bytes(self._total)}"
        unit = f" {self._unit}" if self._unit else ""
        return f"{done:,}/{self._total:,}{unit}"


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


@contextlib.contextmanager
def _log_lines(shown: Display) -> Iterator[None]:
    """A daemon thread writing `shown.log_line()` to stderr every `LOG_INTERVAL_S`."""
    stop = threading.Event()
    stream = sys.stderr  # as it is now (a test's capture too)
    interval = LOG_INTERVAL_S

    def write() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr
                stream.write(shown.log_line() + "\n")
                stream.flush()

    thread = threading.Thread(target=write, name="replay-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def display(command: str) -> Iterator[Display]:
    """The progress display of `command` (e.g. "run") for the `with` block: drawn on
    stderr when it is a terminal, cleared as the block ends however it ends; a display
    that draws nothing otherwise."""
    if not show_progress():
        shown = Display(command)
        with _log_lines(shown):
            yield shown
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # stderr as it is now (a test's capture, too); a terminal by `show_progress`
    console = Console(file=sys.stderr, force_terminal=True)
    live = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=30),
        TextColumn("{task.fields[count]}", markup=False),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        refresh_per_second=REFRESH_PER_SECOND,
        # stdout is the command's output (a table, JSON): never routed through the display
        redirect_stdout=False,
        redirect_stderr=True,
    )
    with live:
        yield Display(command, live)


__all__ = ["LOG_INTERVAL_S", "MIN_INTERVAL_S", "REFRESH_PER_SECOND", "Display", "display"]
