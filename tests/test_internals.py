"""Process-level helpers: huge-page state arrays, the ordered worker, the console script."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from replay._malloc import _HUGE_MIN_BYTES, _HUGE_PAGE_BYTES, state_array
from replay._threads import HELPER_NICE, OrderedWorker, read_ahead


@pytest.mark.parametrize("length", [0, 1, 1000, _HUGE_MIN_BYTES // 4 + 3])
@pytest.mark.parametrize(("dtype", "fill"), [(np.int32, -1), (np.uint32, 0), (np.int64, 7)])
def test_state_array_holds_the_fill(length: int, dtype: type, fill: int) -> None:
    array = state_array(length, dtype, fill)
    assert array.dtype == np.dtype(dtype) and array.shape == (length,)
    assert array.flags.writeable and array.flags.c_contiguous
    assert np.all(array == fill)
    if length:
        array[-1] = 5  # the whole length is usable
        assert array[-1] == 5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages: Linux only")
def test_large_state_array_starts_on_a_huge_page() -> None:
    array = state_array(_HUGE_MIN_BYTES // 4 + 3, np.int32, -1)
    assert array.ctypes.data % _HUGE_PAGE_BYTES == 0


def _vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page advice: Linux only")
@pytest.mark.parametrize(("huge", "flag"), [(True, "hg"), (False, "nh")])
def test_large_state_array_is_advised_its_page_size(huge: bool, flag: str) -> None:
    # the statistics' state asks for 4 KiB pages (cheaper to fault in after another
    # process freed memory), the policies' tables for huge pages
    array = state_array(_HUGE_MIN_BYTES + 5, np.uint8, 3, huge=huge)
    assert np.all(array == 3)
    assert flag in _vm_flags(array.ctypes.data)


def test_ordered_worker_runs_in_order_and_bounds_its_backlog() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> None:
        time.sleep(0.002)
        with lock:
            done.append(i)

    submitted = 0
    with OrderedWorker(depth=2) as worker:
        for i in range(20):
            worker.submit(task, i)
            submitted += 1
            with lock:
                assert submitted - len(done) <= 2
        worker.drain()
    assert done == list(range(20))


def test_ordered_worker_raises_a_failure_in_the_caller() -> None:
    def fail() -> None:
        raise ValueError("bad chunk")

    with OrderedWorker(depth=4) as worker:
        worker.submit(fail)
        with pytest.raises(ValueError, match="bad chunk"):
            worker.drain()


def _replay_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replay", *args], capture_output=True, text=True, timeout=120
    )


def test_console_script_exits_with_main_code_and_flushed_output(tmp_path: Path) -> None:
    ok = _replay_command("presets")
    assert ok.returncode == 0
    assert "hbm-lru" in ok.stdout
    out = tmp_path / "run"
    missing = str(tmp_path / "missing")
    bad = _replay_command("run", missing, "--system", "hbm-lru", "--out", str(out))
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("replay: error:")
    assert not out.exists()


_LOADED = (
    "import sys; from replay.cli import main; code = main(sys.argv[1:]); "
    "print(sorted(m for m in sys.modules if m.startswith('replay.cli.')), file=sys.stderr); "
    "sys.exit(code)"
)


def _main_loading(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, timeout=120
    )
    return done, done.stderr.strip().splitlines()[-1]


def test_a_sub_command_imports_only_its_own_module() -> None:
    done, loaded = _main_loading("presets")
    assert done.returncode == 0 and "hbm-lru" in done.stdout  # a lone command still runs
    # _outputs: the check of every command's outputs against its inputs
    assert loaded == "['replay.cli._outputs', 'replay.cli.app', 'replay.cli.presets']"
    done, loaded = _main_loading("run", "--help")
    assert done.returncode == 0 and "--system" in done.stdout
    assert "replay.cli.quickstart" not in loaded and "replay.cli.compare" not in loaded


@pytest.mark.parametrize("args", [(), ("--help",), ("no-such-command",)])
def test_help_and_unknown_commands_see_every_sub_command(args: tuple[str, ...]) -> None:
    from replay.cli import COMMANDS

    done, loaded = _main_loading(*args)
    assert done.returncode == (0 if args == ("--help",) else 2)
    assert all(f"'replay.cli.{name}'" in loaded for name in COMMANDS)
    if args != ("no-such-command",):  # the help (on stderr without arguments) lists them
        assert all(name in done.stdout + done.stderr for name in COMMANDS)


def test_importing_the_package_leaves_the_collector_as_it_was() -> None:
    """`import replay` is light (numpy, numba, pyarrow load with the first use of its
    API) and raises the GC thresholds only while that use imports them (the console
    script raises them for its whole command)."""
    code = (
        "import gc, sys; gc.set_threshold(123, 4, 5); import replay; "
        "assert not {'numpy', 'numba', 'pyarrow'} & set(sys.modules), 'heavy import'; "
        "replay.open_trace; import replay.engine.replay; "
        "assert gc.get_threshold() == (123, 4, 5), gc.get_threshold()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_helper_threads_run_at_a_lower_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader, the worker and the checksum hashers yield to the caller's kernel."""
    import replay.trace.reader as reader
    from replay.trace.writer import write_trace_from_arrays

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert HELPER_NICE > 0
    want = min(nice() + HELPER_NICE, 19)
    assert list(read_ahead(nice() for _ in range(2))) == [want, want]
    with OrderedWorker() as worker:
        assert worker.submit(nice).result() == want
    one = np.zeros(1, dtype=np.uint32)
    path = write_trace_from_arrays(
        tmp_path / "t", tables=[("a", 1)], batch=one, table=one.astype(np.uint16), row=one,
        batch_size=1,
    )  # fmt: skip
    seen: list[int] = []
    digest = reader._digest_or_error

    def spy(member: Path) -> str | OSError:
        seen.append(nice())
        return digest(member)

    monkeypatch.setattr(reader, "_digest_or_error", spy)
    reader.Verification(reader.open_trace(path))()
    assert seen and set(seen) == {want}


_COUNT_REFRESHES = """
import sys
from numba.core import base

refreshes = []
original = base.BaseContext.refresh
base.BaseContext.refresh = lambda self: (refreshes.append(1), original(self))[1]
from replay.cli import main

code = main(sys.argv[1:])
print("refreshes", len(refreshes), file=sys.stderr)
sys.exit(code)
"""


def test_a_warm_run_loads_its_kernels_without_refreshing_numbas_context(tmp_path: Path) -> None:
    """The second process finds every kernel of `generate` and `run` in numba's cache
    and loads it without numba's target-context refresh (`replay._jit`); the first may
    compile (a cold cache), which refreshes. Both write the same results."""
    from replay._jit import LOADS_WITHOUT_REFRESH

    assert LOADS_WITHOUT_REFRESH  # numba's loader is as `replay._jit` expects
    counts, summaries = [], []
    for attempt in ("first", "second"):
        trace, out = tmp_path / f"trace-{attempt}", tmp_path / f"run-{attempt}"
        for args in (
            ["generate", "--preset", "tiny", "--batches", "4", "--out", str(trace)],
            ["run", str(trace), "--system", "hbm-lru", "--out", str(out)],
        ):
            done = subprocess.run(
                [sys.executable, "-c", _COUNT_REFRESHES, *args],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr
            counts.append(int(done.stderr.split("refreshes")[-1]))
        summaries.append((out / "summary.json").read_text())  # no paths in it
    assert counts[2:] == [0, 0], counts
    assert summaries[0] == summaries[1]
