"""`replay bench libcachesim` without libCacheSim (issue 29): the key export, finding the
interpreter that has libCacheSim, the child script's argument checks, the command's
one-line errors, and the whole protocol against a stand-in `libcachesim` (a pure-Python
LRU with the binding's interface, run in its own interpreter as the real one is).

The real comparison needs libCacheSim and minutes: `tests/test_bench.py` (-m bench).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from replay.cli import main
from replay.errors import ConfigError
from replay.runs import bench_lcs
from replay.runs._lcs_child import parse_args
from replay.runs.bench_lcs import (
    CHILD_SCRIPT,
    LCS_PYTHON_ENV,
    TERABYTE_DAY_BATCHES,
    bench_vs_libcachesim,
    export_keys,
    find_lcs_python,
    markdown_table,
)
from replay.trace.reader import open_trace
from replay.workload.generator import generate
from replay.workload.presets import get_preset

# -- the key export ---------------------------------------------------------------------------


def test_export_round_trips_the_flat_keys(tmp_path: Path) -> None:
    spec = get_preset("criteo-kaggle").with_overrides(batches=3, batch_size=16)
    trace = generate(spec, tmp_path / "trace", workers=1)
    out = tmp_path / "keys" / "k.bin"
    exported = export_keys(trace, out)

    opened = open_trace(trace)
    rows = np.asarray(opened.table_rows, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(rows)])
    lookups = opened.lookups()
    # computed here without replay.trace.keys: offsets[table] + row, in trace order
    expected = offsets[lookups.table.astype(np.int64)] + lookups.row.astype(np.int64)
    got = np.fromfile(out, dtype="<u8")
    assert exported.requests == len(got) == spec.lookups == 3 * 16 * 26
    assert exported.key_space_rows == int(rows.sum()) == spec.total_rows
    assert np.array_equal(got.astype(np.int64), expected)
    assert got.max() < exported.key_space_rows
    assert sorted(p.name for p in out.parent.iterdir()) == ["k.bin"]  # no .partial left


# -- finding libCacheSim ----------------------------------------------------------------------


def _fake_python(path: Path, *, ok: bool) -> Path:
    """An executable standing in for an interpreter: `-c 'import libcachesim'` succeeds
    (`ok`) or fails the way Python does."""
    body = (
        "exit 0"
        if ok
        else "echo \"ModuleNotFoundError: No module named 'libcachesim'\" >&2\nexit 1"
    )
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def nothing_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $REPLAY_LCS_PYTHON, no libcachesim in this interpreter, no /tmp/lcs-venv."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.delenv(LCS_PYTHON_ENV, raising=False)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "libcachesim" else real(name, *args),
    )
    monkeypatch.setattr(bench_lcs, "DEFAULT_LCS_PYTHON", tmp_path / "no-venv" / "python")


@pytest.mark.usefixtures("nothing_installed")
def test_no_libcachesim_is_one_line_saying_how_to_install_it() -> None:
    with pytest.raises(ConfigError) as caught:
        find_lcs_python(None)
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install libcachesim==0.3.5" in message
    assert "python -m venv /tmp/lcs-venv" in message
    assert "lcs_python=PATH" in message and LCS_PYTHON_ENV in message  # the API's names


@pytest.mark.usefixtures("nothing_installed")
def test_the_default_venv_must_import_libcachesim(tmp_path: Path, monkeypatch) -> None:
    broken = _fake_python(tmp_path / "broken-python", ok=False)
    monkeypatch.setattr(bench_lcs, "DEFAULT_LCS_PYTHON", broken)
    with pytest.raises(ConfigError, match="not found"):
        find_lcs_python(None)
    working = _fake_python(tmp_path / "python", ok=True)
    monkeypatch.setattr(bench_lcs, "DEFAULT_LCS_PYTHON", working)
    assert find_lcs_python(None) == str(working)


@pytest.mark.usefixtures("nothing_installed")
def test_explicit_then_environment_path(tmp_path: Path, monkeypatch) -> None:
    good = str(_fake_python(tmp_path / "good", ok=True))
    bad = str(_fake_python(tmp_path / "bad", ok=False))
    monkeypatch.setenv(LCS_PYTHON_ENV, good)
    assert find_lcs_python(None) == good
    assert find_lcs_python(good) == good
    with pytest.raises(ConfigError) as caught:
        find_lcs_python(bad)  # the explicit path wins, and is checked
    assert "\n" not in str(caught.value)
    assert f"lcs_python {bad}: cannot import libcachesim (ModuleNotFoundError" in str(caught.value)
    monkeypatch.setenv(LCS_PYTHON_ENV, bad)
    with pytest.raises(ConfigError, match=f"^{LCS_PYTHON_ENV} {bad}: cannot import"):
        find_lcs_python(None)
    with pytest.raises(ConfigError, match="/nonexistent/python: cannot start it"):
        find_lcs_python("/nonexistent/python")


# -- the child script -------------------------------------------------------------------------


def test_child_imports_only_the_standard_library_and_libcachesim() -> None:
    """It runs in libCacheSim's interpreter, which has no replay (nor numpy)."""
    tree = ast.parse(CHILD_SCRIPT.read_text())
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {
        (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    }
    allowed = set(sys.stdlib_module_names) | {"__future__", "libcachesim"}
    assert names and names <= allowed, names - allowed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "expected 2 arguments, got 0"),
        (["KEYS"], "expected 2 arguments, got 1"),
        (["KEYS", "10", "extra"], "expected 2 arguments, got 3"),
        (["KEYS", "ten"], "CAPACITY must be an integer, not 'ten'"),
        (["KEYS", "0"], "CAPACITY must be at least 1, not 0"),
        (["KEYS", "-5"], "CAPACITY must be at least 1"),
        (["MISSING", "10"], "No such file or directory"),
        (["ODD", "10"], "size 12 is not a positive multiple of 8"),
        (["EMPTY", "10"], "size 0 is not a positive multiple of 8"),
    ],
)
def test_child_checks_its_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    files = {
        "KEYS": tmp_path / "keys.bin",
        "MISSING": tmp_path / "missing.bin",
        "ODD": tmp_path / "odd.bin",
        "EMPTY": tmp_path / "empty.bin",
    }
    np.arange(4, dtype="<u8").tofile(files["KEYS"])
    files["ODD"].write_bytes(b"x" * 12)
    files["EMPTY"].write_bytes(b"")
    argv = [str(files.get(a, a)) for a in args]
    with pytest.raises(ValueError, match=message):
        parse_args(argv)
    # run by path, as the benchmark runs it: one line on stderr, exit code 2, no output
    proc = subprocess.run(
        [sys.executable, str(CHILD_SCRIPT), *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("_lcs_child.py: error: ")
    assert message in proc.stderr


def test_child_accepts_good_arguments(tmp_path: Path) -> None:
    keys = tmp_path / "keys.bin"
    np.arange(5, dtype="<u8").tofile(keys)
    assert parse_args([str(keys), "3"]) == (str(keys), 3, 5)


# -- the command ------------------------------------------------------------------------------


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lcs-python", "/nonexistent"], "--lcs-python /nonexistent: cannot start it"),
        (["--pairs", "0"], "--pairs must be > 0"),
        (["--key-space", "nope"], "unknown workload preset 'nope'"),
    ],
)
def test_command_errors_are_one_line_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _cli(["bench", "libcachesim", *args], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("replay: error: "), err
    assert message in err


def test_no_libcachesim_from_the_command_names_the_flag(
    nothing_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(["bench", "libcachesim", "--batches", "1"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "pip install libcachesim==0.3.5" in err and "--lcs-python PATH" in err


# -- the whole protocol, against a stand-in libcachesim ---------------------------------------

# The binding's interface as `_lcs_child.py` uses it, over an OrderedDict LRU (what
# benchmarks/libcachesim_lru.py `verify` checks libCacheSim's LRU against). FAKE_LCS_EXTRA
# adds misses, to show that a wrong count stops the benchmark.
FAKE_LIBCACHESIM = """
import os
import struct
from collections import OrderedDict

__version__ = "fake"


class TraceType:
    BIN_TRACE = "bin"


class ReaderInitParam:
    def __init__(self, binary_fmt_str, ignore_obj_size):
        assert binary_fmt_str == "<Q" and ignore_obj_size
        self.obj_id_field = None


class TraceReader:
    def __init__(self, path, kind, params):
        assert kind == TraceType.BIN_TRACE and params.obj_id_field == 1
        with open(path, "rb") as fh:
            self.keys = [k for (k,) in struct.iter_unpack("<Q", fh.read())]

    def get_num_of_req(self):
        return len(self.keys)


class LRU:
    def __init__(self, capacity, consider_obj_metadata):
        assert not consider_obj_metadata
        self.capacity = capacity

    def process_trace(self, reader):
        cache, misses = OrderedDict(), 0
        for key in reader.keys:
            if key in cache:
                cache.move_to_end(key)
            else:
                misses += 1
                cache[key] = None
                if len(cache) > self.capacity:
                    cache.popitem(last=False)
        misses += int(os.environ.get("FAKE_LCS_EXTRA", "0"))
        return misses / len(reader.keys), 0.0
"""


@pytest.fixture
def fake_lcs_python(tmp_path: Path) -> str:
    """An 'interpreter' whose libcachesim is the stand-in: this Python, another path."""
    package = tmp_path / "fake-site" / "libcachesim"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_LIBCACHESIM)
    wrapper = tmp_path / "lcs-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{package.parent}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_bench_against_a_stand_in(fake_lcs_python: str, monkeypatch, tmp_path: Path) -> None:
    """Generate, export, warm up, one timed pair; misses compared in every run."""
    monkeypatch.delenv("FAKE_LCS_EXTRA", raising=False)
    tmp = tmp_path / "tempdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where the benchmark's mkdtemp goes
    rows: list[str] = []
    result = bench_vs_libcachesim(
        key_spaces=("tiny",),
        batches=10,
        batch_size=32,
        capacity_rows=200,
        pairs=1,
        lcs_python=fake_lcs_python,
        on_row=lambda name, row: rows.append(name),
    )
    assert rows == ["tiny"]
    (row,) = result["rows"]
    assert row["lookups"] == 10 * 32 * 6 and row["key_space_rows"] == 25_324
    assert row["misses_identical"] and 0 < row["misses"] < row["lookups"]
    assert len(row["pair_ratios"]) == 1 and row["ratio_median"] > 0
    for tool in ("replay", "libcachesim"):
        (run,) = row[tool]["runs"]
        assert run["wall_s"] > 0 and run["user_s"] >= 0 and run["sys_s"] >= 0
        assert run["peak_rss_bytes"] > 1 << 20
    assert row["libcachesim"]["version"] == "fake"
    assert json.loads(json.dumps(result)) == result  # what --json prints
    table = markdown_table(result)
    assert "| tiny, 10 x 32 | 25,324 | 1,920 | 200 |" in table
    assert f"yes ({row['misses']:,})" in table
    assert list(tmp.iterdir()) == []  # the traces, keys and run folders are gone


def test_a_wrong_miss_count_reports_no_speed(fake_lcs_python: str, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_LCS_EXTRA", "1")
    with pytest.raises(RuntimeError, match=r"replay run counted .* misses, libCacheSim"):
        bench_vs_libcachesim(
            key_spaces=("tiny",), batches=5, batch_size=16, capacity_rows=50, pairs=1,
            lcs_python=fake_lcs_python,
        )  # fmt: skip


def test_markdown_table_with_the_day() -> None:
    run = {"wall_s": 2.0, "user_s": 1.5, "sys_s": 0.2, "peak_rss_bytes": 2**30}
    row = {
        "key_space": "criteo-kaggle", "key_space_rows": 33_762_577, "lookups": 106_496_000,
        "batches": 2000, "batch_size": 2048, "capacity_rows": 1_000_000, "misses": 5,
        "misses_identical": True, "ratio_median": 6.04,
        "replay": {"runs": [run], "wall_s_min": 2.0, "wall_s_median": 2.1,
                   "peak_rss_bytes": 2**30},
        "libcachesim": {"runs": [run], "wall_s_min": 12.0, "wall_s_median": 12.5,
                        "peak_rss_bytes": 2**29},
    }  # fmt: skip
    day = {
        "batches": TERABYTE_DAY_BATCHES, "batch_size": 2048, "key_space_rows": 204_184_588,
        "lookups": TERABYTE_DAY_BATCHES * 2048 * 26, "capacity_rows": 2_097_152,
        "wall_s": 60.0, "peak_rss_bytes": 3 * 2**29, "lookups_per_s": 79e6,
    }  # fmt: skip
    table = markdown_table({"machine": "x86_64, 2 cores", "pairs": 3, "rows": [row], "day": day})
    lines = table.splitlines()
    assert lines[0].startswith("Measured on x86_64, 2 cores; whole processes, 3 pairs")
    assert lines[4] == (
        "| criteo-kaggle, 2,000 x 2,048 | 33,762,577 | 106.5 M | 1,000,000 | 12.00 / 12.50 s "
        "| 2.00 / 2.10 s | 1.00 GiB | 6.0x | yes (5) |"
    )
    assert lines[5].startswith("| criteo-terabyte day on the fly, 88,978 x 2,048 (79.0 M")
    assert "| 4.74 B | 2,097,152 | - | 60.00 s (1 run) | 1.50 GiB | - | - |" in lines[5]
    assert TERABYTE_DAY_BATCHES == 88_978
