"""Ctrl-C and SIGTERM (issue 31, "Interrupts"; issue 27; issue 39, "Interrupts under
load"): one line, 130 or 143, no traceback, nothing half-written, no process left.

Each command runs as the console script does (`python -m replay`, which installs the
signal handlers before the heavy imports) in a session of its own; SIGINT goes to the
whole process group, as a terminal's Ctrl-C does (worker processes included), SIGTERM to
the main process only, as `kill PID` or a batch scheduler does. The workloads are far too
large to finish before the signal (hundreds of thousands of batches generated on the
fly), so the late cases interrupt real work; the early ones interrupt the imports.

Under load (issue 39): every command runs pinned to one core beside a process that burns
that core (`busy_core`): about half a core, slower than a 2-core machine with both cores
busy, and the same on any machine. That stretches the imports and the start of worker
processes, where the signals used to land badly: a Ctrl-C while compare's forkserver
imported the engine printed the server's traceback, a SIGTERM while a worker was being
forked left one the pool did not know (a traceback from unpickling its queues once the
parent had gone), and a SIGTERM while generate built its sampler tables left the partial
folder without the line naming --resume. So a case signals `delay_s` after an event
(`after`): the command has installed its handlers, the output's partial folder appears,
compare's forkserver starts (and imports the engine), its workers are forked (and are
starting). Before the handlers, the interpreter starts (its `site`, the environment's .pth
files; 0.1-0.15 s here on half a core) and runs no code of replay: a SIGINT there is
Python's own (a `KeyboardInterrupt` traceback from `site`, or death by the signal), as
for any Python program, and is not tested.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay.cli import main

BIG = "--workload criteo-kaggle --batches 400000"


@dataclass(frozen=True)
class Interrupt:
    id: str
    argv: str  # formatted with {trace}, {run}
    signum: int
    delay_s: float
    kept: tuple[str, ...] = ()  # what the command may keep on purpose (for --resume)
    # what `delay_s` counts from: the command's signal "handlers" installed (the first
    # thing it does), compare's "forkserver" or "workers" (two forked by it), or a path
    # in the command's folder (its partial output)
    after: str = "handlers"


COMPARE = f"compare {BIG} --systems hbm-lru,dram --workers 2 --out out"
GENERATE = "generate --preset criteo-kaggle --batches 400000 --workers 2 --out out"
PARTIAL = ".out.partial"
EARLY = (0.0, 0.05, 0.2, 0.5, 1.0)  # seconds after the handlers: the imports


def _early(name: str, argv: str, kept: tuple[str, ...] = ()) -> list[Interrupt]:
    return [Interrupt(f"{name}-sigint-{d}s", argv, signal.SIGINT, d, kept=kept) for d in EARLY]


CASES = [
    Interrupt(
        "run-sigint", f"run {BIG} --system hbm-lru --out out", signal.SIGINT, 1.0, after=PARTIAL
    ),
    Interrupt(
        "run-sigterm", f"run {BIG} --system hbm-lru --out out", signal.SIGTERM, 1.0, after=PARTIAL
    ),
    Interrupt("run-sigint-early", f"run {BIG} --system hbm-lru --out out", signal.SIGINT, 0.2),
    Interrupt("mrc-sigint", f"mrc {BIG} --out out", signal.SIGINT, 3.0),
    Interrupt("mrc-sigterm", f"mrc {BIG} --out out", signal.SIGTERM, 3.0),
    *_early("compare", COMPARE),
    Interrupt("compare-sigint-forkserver", COMPARE, signal.SIGINT, 0.5, after="forkserver"),
    Interrupt("compare-sigterm-forkserver", COMPARE, signal.SIGTERM, 0.3, after="forkserver"),
    Interrupt("compare-sigint-workers", COMPARE, signal.SIGINT, 0.0, after="workers"),
    Interrupt("compare-sigterm-workers", COMPARE, signal.SIGTERM, 0.0, after="workers"),
    Interrupt("compare-sigint", COMPARE, signal.SIGINT, 1.0, after="workers"),
    Interrupt("compare-sigterm", COMPARE, signal.SIGTERM, 1.0, after="workers"),
    *_early("generate", GENERATE, kept=(PARTIAL,)),
    Interrupt("generate-sigterm-0.5s", GENERATE, signal.SIGTERM, 0.5, kept=(PARTIAL,)),
    # the partial folder is there, the sampler tables are being built
    Interrupt(
        "generate-sigint-started", GENERATE, signal.SIGINT, 0.0, kept=(PARTIAL,), after=PARTIAL
    ),
    Interrupt(
        "generate-sigterm-started", GENERATE, signal.SIGTERM, 0.0, kept=(PARTIAL,), after=PARTIAL
    ),
    Interrupt("generate-sigint", GENERATE, signal.SIGINT, 1.0, kept=(PARTIAL,), after=PARTIAL),
    Interrupt("generate-sigterm", GENERATE, signal.SIGTERM, 1.0, kept=(PARTIAL,), after=PARTIAL),
    Interrupt(
        "quickstart-sigint",
        "quickstart --batches 400000 --workers 1 --trace qtrace --out out",
        signal.SIGINT,
        0.5,
        kept=(),
        after=".qtrace.partial",
    ),
    Interrupt("inspect-sigint-early", "inspect {trace}", signal.SIGINT, 0.1),
    Interrupt("report-sigint", "report {run} --out out", signal.SIGINT, 0.7),
]


@pytest.fixture(scope="module")
def busy_core() -> Iterator[Callable[[], None] | None]:
    """Pins what it is given to one core that a burner keeps busy for the module's
    duration (where affinity cannot be set: a burner on every core, nothing pinned)."""
    if hasattr(os, "sched_setaffinity"):
        core = max(os.sched_getaffinity(0))

        def pin() -> None:
            os.sched_setaffinity(0, {core})

        burners = [_burner(pin)]
        yield pin
    else:  # pragma: no cover (macOS)
        burners = [_burner(None) for _ in range(os.cpu_count() or 1)]
        yield None
    for burner in burners:
        burner.kill()
        burner.wait()


def _burner(pin: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)


def _group(pgid: int) -> list[tuple[int, int, str]]:
    """(pid, parent's pid, command line) of the live processes of a process group."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            state, ppid, pgrp = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) != pgid or state in "ZX":
                continue
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        found.append(
            (int(entry.name), int(ppid), cmdline.replace(b"\0", b" ").decode("utf-8", "replace"))
        )
    return found


def _reached(after: str, pid: int, cwd: Path) -> bool:
    if after == "handlers":  # Python catches SIGINT from its start, SIGTERM from ours
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:  # ended (the caller says so)
            return True
        caught = int(status.split("SigCgt:")[1].split()[0], 16)
        return bool(caught & 1 << (signal.SIGTERM - 1))
    if after in ("forkserver", "workers"):
        group = _group(pid)
        servers = {p for p, ppid, cmd in group if ppid == pid and "forkserver" in cmd}
        if after == "forkserver":
            return bool(servers)
        return sum(ppid in servers for _, ppid, _ in group) >= 2
    return (cwd / after).exists()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("interrupt-inputs")
    trace, run = base / "trace", base / "run"
    assert main(["generate", "--preset", "tiny", "--batches", "6", "--batch-size", "16",
                 "--workers", "1", "--out", str(trace)]) == 0  # fmt: skip
    assert main(["run", str(trace), "--system", "hbm-lru", "--out", str(run)]) == 0
    return {"trace": trace, "run": run}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_interrupt(
    c: Interrupt,
    inputs: dict[str, Path],
    busy_core: Callable[[], None] | None,
    tmp_path: Path,
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("the events are read from /proc")
    argv = c.argv.format(**{k: str(v) for k, v in inputs.items()}).split()
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay", *argv],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=busy_core,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # stacks on SIGABRT (a hang)
    )
    waited = time.monotonic() + 60
    while not _reached(c.after, proc.pid, tmp_path) and proc.poll() is None:
        if time.monotonic() > waited:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"replay {c.argv}: no {c.after} after 60 s")
        time.sleep(0.01)
    time.sleep(c.delay_s)
    assert proc.poll() is None, f"finished before the signal: {proc.stderr.read()!r}"
    if c.signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
    else:
        proc.send_signal(c.signum)
    try:
        _, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        # was the signal lost (a second one ends the command) or taken and its interrupt
        # dropped (the second is ignored)? Then where each process is: faulthandler's stacks
        proc.send_signal(c.signum)
        try:
            proc.communicate(timeout=10)
            second = f"a second signal ended it (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            second = "a second signal did not end it"
            for pid, _, _ in _group(proc.pid):
                os.kill(pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        raise AssertionError(
            f"replay {c.argv}: still running 90 s after the signal; {second}; stderr:\n{stderr}"
        ) from None
    shown = f"replay {' '.join(argv)}\nexit {proc.returncode}\nstderr: {stderr!r}"
    assert proc.returncode == 128 + c.signum, shown
    assert "Traceback" not in stderr, shown
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), "not one line\n" + shown
    word = "interrupted" if c.signum == signal.SIGINT else "terminated"
    assert stderr.startswith(f"replay: {word}"), shown
    left = sorted(p.name for p in tmp_path.iterdir())
    assert set(left) <= set(c.kept), f"left behind: {left}\n{shown}"
    # generate keeps what it began for --resume, and the line says so; nothing else does
    assert ("--resume" in stderr) == bool(left), f"left {left}\n{shown}"
    if c.after in c.kept:  # interrupted once the partial folder was there: it stays
        assert left == [c.after], shown
    # the forkserver, the resource tracker and the workers end with the command
    waited = time.monotonic() + 10
    while (alive := _group(proc.pid)) and time.monotonic() < waited:
        time.sleep(0.05)
    if alive:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not alive, f"still running after the command ended: {alive}\n{shown}"


# -- the mechanisms, each in a process of its own (they install signal handlers) -------


def _python(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_dropped_interrupt_is_raised_again() -> None:
    """Code that swallows the KeyboardInterrupt does not leave the command running deaf
    to the signal: it is sent again (`_signals._redeliver`) and ends the command."""
    done = _python("""
        import os, signal, sys, time
        from replay import _signals
        _signals.install()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except BaseException:
            pass  # a library that drops it
        started = time.monotonic()
        try:
            time.sleep(20)  # the command running on
        except KeyboardInterrupt:
            print(f"raised again after {time.monotonic() - started:.1f} s")
            print(_signals.message())
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("raised again after") and float(lines[0].split()[3]) < 5
    assert lines[1] == "replay: terminated"


def test_deferred_holds_signals_from_its_processes() -> None:
    """A signal in a `deferred` block is raised as it ends; a process started in it
    begins with SIGINT and SIGTERM blocked, until `ignore_in_worker`; a block reached
    after a dropped interrupt raises it again at once."""
    done = _python("""
        import os, signal, subprocess, sys, time
        from replay import _signals
        _signals.install()
        child = '''
        import signal, sys
        from replay._signals import ignore_in_worker
        def state():
            status = open("/proc/self/status").read()
            blocked, ignored = (
                int(status.split(k)[1].split()[0], 16) for k in ("SigBlk:", "SigIgn:")
            )
            return [bool(m & 1 << (s - 1)) for m in (blocked, ignored) for s in (2, 15)]
        before = state()
        ignore_in_worker()
        print(before, state())
        '''
        try:
            with _signals.deferred():
                out = subprocess.run([sys.executable, "-c", child], capture_output=True,
                                     text=True, check=True).stdout
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                print("held", flush=True)
        except KeyboardInterrupt:
            print("raised at the end")
        print(out.strip())
        # a thread that does not block the signal takes it: `_handler` holds it
        import threading
        helper = threading.Thread(target=time.sleep, args=(1,))
        helper.start()
        _signals.reset()
        try:
            with _signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                print("held", flush=True)
        except KeyboardInterrupt:
            print("raised at the end:", _signals.message())
        _signals.reset()
        try:
            os.kill(os.getpid(), signal.SIGINT)  # taken, and dropped, before the block
            time.sleep(1)
        except KeyboardInterrupt:
            pass
        try:
            with _signals.deferred():
                print("entered")
        except KeyboardInterrupt:
            print("raised at the start")
        _signals.message()  # reported: not sent again
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "held",
        "raised at the end",
        # blocked SIGINT, SIGTERM; ignored SIGINT, SIGTERM: before, then after
        "[True, True, False, False] [False, False, True, False]",
        "held",
        "raised at the end: replay: terminated",
        "raised at the start",
    ], done.stdout


# -- stopping within 2 s, whatever the workers are doing (issue 50) ----------------------

STOP_S = 2.0  # from the signal to the end of the process
# the console script, with the row-group target of `_pieces_helpers.cut_in_pieces`: a
# batch of 1,000 small tables is ~1,000 row groups (pieces), a file of 4 batches a few
# seconds of one thread's work, as meta-2021's one batch is 567 pieces and a minute
CUT_CONSOLE = """
import sys
from replay import _signals
_signals.install()
import replay.trace.format as fmt
fmt.ROW_GROUP_TARGET_LOOKUPS = 60
fmt.PIECE_MIN_LOOKUPS = 120
from replay.cli import console_main
sys.argv[0] = "replay"
console_main()
"""


def _stop(
    argv: list[str], cwd: Path, signum: int, delay_s: float, after: str | Callable[[float], bool]
) -> tuple[int, str]:
    """Run `argv` (a Python command line), send `signum` `delay_s` after `after` (as
    `_reached`, or a test of the time the command started), and return (exit code,
    stderr); fails unless it ends within `STOP_S`. (-1, "") when the command finished
    before the signal."""
    started = time.time()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        waited = time.monotonic() + 60
        reached = (
            (lambda: after(started)) if callable(after) else lambda: _reached(after, proc.pid, cwd)
        )
        while not reached() and proc.poll() is None:
            assert time.monotonic() < waited, f"{argv}: no {after} after 60 s"
            time.sleep(0.01)
        time.sleep(delay_s)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read()  # type: ignore[union-attr]
            return -1, ""
        sent = time.monotonic()
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signum)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stderr = ""
        took = time.monotonic() - sent
        shown = f"{argv[-8:]} {signal.Signals(signum).name} {delay_s:.2f} s after {after}"
        assert took < STOP_S, f"{shown}: stopped {took:.1f} s after the signal\n{stderr}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    assert proc.returncode == 128 + signum, f"{shown}: exit {proc.returncode}\n{stderr}"
    assert stderr.startswith(f"replay: {word}") and stderr.count("\n") == 1, shown + stderr
    assert "Traceback" not in stderr, shown + stderr
    return proc.returncode, stderr


def _complete_parts(partial: Path, rows_per_batch: dict[str, int] | None) -> None:
    """Every part under its final name is whole: a readable Parquet file of its batches'
    lookups (`rows_per_batch`, by kind; None: readable only)."""
    import pyarrow.parquet as pq

    for kind in ("lookups", "updates"):
        for part in sorted((partial / kind).glob("part-*.parquet")):
            meta = pq.ParquetFile(part).metadata  # a half-written one has no footer
            if rows_per_batch is not None and kind in rows_per_batch:
                batches = {
                    meta.row_group(i).column(0).statistics.max for i in range(meta.num_row_groups)
                }
                assert meta.num_rows == rows_per_batch[kind] * len(batches), part


def _lookups_of(trace: Path) -> int:
    """The lookups of a finished trace: its manifest's count (checked against its
    entries when opened), which must be the rows of its part files' footers."""
    import pyarrow.parquet as pq

    from replay.trace.reader import open_trace

    listed = open_trace(trace).num_lookups
    parts = sorted((trace / "lookups").glob("part-*.parquet"))
    assert sum(pq.ParquetFile(part).metadata.num_rows for part in parts) == listed
    return listed


def test_generate_in_pieces_stops_within_2s(tmp_path: Path) -> None:
    """`replay generate` of a workload whose batches are cut into ~1,000 pieces each (a
    file of 4 batches is thousands of row groups, seconds of work) stops within 2 s of
    SIGINT or SIGTERM at a few moments of its work, with the line naming --resume; the
    parts it kept are whole, and --resume then writes every lookup. (It waited for every
    file to be written to the end: meta-2021's one batch took 70 s to stop.)"""
    import random

    from _pieces_helpers import cycled_spec

    from replay.workload.spec import spec_to_toml

    spec = cycled_spec("cut", [50, 200, 1000], tables=1000, batches=8, batch_size=32, seed=5)
    (tmp_path / "cut.toml").write_text(spec_to_toml(spec))
    argv = [sys.executable, "-c", CUT_CONSOLE, "generate", "--spec", "cut.toml",
            "--workers", "2", "--out", "out", "--resume"]  # fmt: skip

    def writing(started: float) -> bool:
        """This run writes its parts (a resumed one deletes the temporary parts before)."""
        with contextlib.suppress(OSError):
            tmps = (tmp_path / PARTIAL / "lookups").glob(".*.tmp")
            return any(tmp.stat().st_mtime >= started for tmp in tmps)
        return False

    draw = random.Random(50)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        code, stderr = _stop(argv, tmp_path, signum, draw.uniform(0.0, 1.5), writing)
        assert code != -1, "finished before the signal"
        assert "--resume" in stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == [PARTIAL, "cut.toml"]
        _complete_parts(tmp_path / PARTIAL, {"lookups": spec.lookups_per_batch})
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _lookups_of(tmp_path / "out") == spec.lookups


@pytest.mark.bench
def test_meta_2021_generate_stops_within_2s(tmp_path: Path) -> None:
    """The acceptance of issue 50: `replay generate --preset meta-2021 --batches 1` (one
    file of 567 pieces, ~35 s of work on the 2-core VM) stops within 2 s of SIGINT and of
    SIGTERM, 10 trials each at random moments from its handlers on; a --resume then
    completes with every lookup present."""
    import random
    import shutil

    from replay.workload.presets import get_preset

    lookups = get_preset("meta-2021").with_overrides(batches=1).lookups
    argv = [sys.executable, "-m", "replay", "generate", "--preset", "meta-2021",
            "--batches", "1", "--out", "out", "--resume"]  # fmt: skip
    draw = random.Random(2021)
    trials = [signal.SIGINT] * 10 + [signal.SIGTERM] * 10
    draw.shuffle(trials)
    finished = 0
    while trials:
        signum = trials[0]
        code, stderr = _stop(argv, tmp_path, signum, draw.uniform(0.0, 25.0), "handlers")
        if code == -1:  # a faster machine: it finished first; start over
            finished += 1
            assert finished < 5, "the generation keeps finishing before the signal"
            shutil.rmtree(tmp_path / "out")
            continue
        trials.pop(0)
        if (tmp_path / PARTIAL).exists():
            assert "--resume" in stderr
            _complete_parts(tmp_path / PARTIAL, None)
        assert not (tmp_path / "out").exists()
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _lookups_of(tmp_path / "out") == lookups
