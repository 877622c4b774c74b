"""`replay run` against libCacheSim's LRU, side by side (`replay bench libcachesim`,
issue 29).

What is measured: whole processes, the way a user runs each tool.

- A: `python -m replay run TRACE --system hbm-lru --set policy.capacity_rows=C --out
  TMP/run --force`, with its defaults (the trace statistics of `workload.json` on);
- B: `LCS_PYTHON _lcs_child.py KEYS C`: libCacheSim's LRU (PyPI `libcachesim` 0.3.5, a C
  library) holding C objects, over the same trace's flat keys (`offsets[table] + row`, in
  trace order), exported once beforehand as little-endian uint64 (`export_keys`; the
  export is not timed: it stands for libCacheSim's own trace file).

How: per key space (a workload preset: criteo-kaggle, criteo-terabyte), a trace of
`batches` x `batch_size` is generated into a temporary folder and its keys exported; A
and B each run once untimed (numba's disk cache, the page cache, and this VM's
host-side memory faults: benchmarks/README.md), then `pairs` times A then B. Each run's
wall time comes from `time.perf_counter` around the child, its user and system seconds
and peak RSS from `os.wait4` (`replay.runs.bench.run_with_usage`). A pair's ratio is B's
wall over A's: how many times faster `replay run` is; the result quotes the median of
the pairs' ratios, so that a burst of load on the shared machine spoils one pair, not the
figure. Both tools' miss counts must be equal in every run (replay's from
`summary.json` -> `policy.misses`): a speed of a wrong answer is no result, so a
difference raises RuntimeError.

Optionally (`day_batches`) one more whole process, timed once (after an untimed 2-batch
run of the same command, so that kernels compiled on a cold cache are not timed): a day
of Criteo Terabyte generated on the fly (`replay run --workload criteo-terabyte --batches
DAY --batch-size 2048 --system hbm-lru`: no trace folder, no libCacheSim), for its wall
time, lookups/s and peak RSS.

libCacheSim is no dependency of the project: it runs in whatever interpreter
`find_lcs_python` finds (usually a separate venv), which executes `_lcs_child.py` by path
and never imports `replay`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay._machine import machine_description
from replay.errors import ConfigError, opt
from replay.runs.bench import ProcessUsage, run_with_usage
from replay.runs.quickstart import PLAN_BATCHES

# one day of the Criteo Terabyte epoch that `replay quickstart` plans (24 days of logs):
# 88,978 batches of 2,048, about 4.74 B lookups
TERABYTE_DAY_BATCHES = PLAN_BATCHES // 24
KEY_SPACES = ("criteo-kaggle", "criteo-terabyte")
LCS_VERSION = "0.3.5"  # the version measured (benchmarks/README.md)
LCS_PYTHON_ENV = "REPLAY_LCS_PYTHON"
DEFAULT_LCS_PYTHON = Path("/tmp/lcs-venv/bin/python")
CHILD_SCRIPT = Path(__file__).resolve().with_name("_lcs_child.py")
INSTALL_HINT = (
    f"install it with `python -m venv /tmp/lcs-venv && /tmp/lcs-venv/bin/pip install "
    f"libcachesim=={LCS_VERSION}`, then pass {opt('--lcs-python PATH', 'lcs_python=PATH')} "
    f"or set {LCS_PYTHON_ENV}"
)
KEY_DTYPE = "<u8"  # the child's binary format "<Q"


# -- the keys libCacheSim reads ---------------------------------------------------------------


@dataclass(frozen=True)
class KeyExport:
    """A key file written by `export_keys`."""

    path: Path
    requests: int  # keys written: one per lookup
    key_space_rows: int  # rows of all tables: every key is below this


def export_keys(trace_dir: str | Path, out_path: str | Path) -> KeyExport:
    """Write the flat key (`offsets[table] + row`) of every lookup of the trace at
    `trace_dir`, in trace order, as little-endian uint64 to `out_path`.

    Written to a temporary name beside `out_path` and renamed into place, so an
    interrupted export never leaves a file that looks whole.
    """
    from replay.trace.keys import flat_keys, table_offsets
    from replay.trace.reader import open_trace

    trace = open_trace(trace_dir)
    offsets = table_offsets(trace.table_rows)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    written = 0
    try:
        with open(partial, "wb") as fh:
            for chunk in trace.iter_lookups():
                keys = flat_keys(chunk.table, chunk.row, offsets)  # uint32 or int64, >= 0
                keys.astype(KEY_DTYPE, copy=False).tofile(fh)
                written += len(keys)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return KeyExport(out, written, int(offsets[-1]))


# -- finding libCacheSim ----------------------------------------------------------------------


def lcs_import_error(python: str) -> str | None:
    """None when the interpreter `python` can import libcachesim, else why not (short)."""
    try:
        proc = subprocess.run(
            [python, "-c", "import libcachesim"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot start it ({getattr(exc, 'strerror', None) or exc})"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return f"cannot import libcachesim ({last.strip()})"
    return None


def find_lcs_python(explicit: str | None = None) -> str:
    """The interpreter that runs libCacheSim: `explicit`, else $REPLAY_LCS_PYTHON, else
    this one when it has `libcachesim`, else /tmp/lcs-venv/bin/python when that can import
    it. An explicit or environment path that cannot import it, or none found at all,
    raises ConfigError (one line, saying how to install it)."""
    given = [(opt("--lcs-python", "lcs_python"), explicit)]
    given.append((LCS_PYTHON_ENV, os.environ.get(LCS_PYTHON_ENV) or None))
    for source, python in given:
        if python is not None:
            why = lcs_import_error(python)
            if why is not None:
                raise ConfigError(f"{source} {python}: {why}; {INSTALL_HINT}")
            return python
    if importlib.util.find_spec("libcachesim") is not None:
        return sys.executable
    if DEFAULT_LCS_PYTHON.exists() and lcs_import_error(str(DEFAULT_LCS_PYTHON)) is None:
        return str(DEFAULT_LCS_PYTHON)
    raise ConfigError(f"libCacheSim (PyPI libcachesim) not found: {INSTALL_HINT}")


# -- timing -----------------------------------------------------------------------------------


def _usage_row(usage: ProcessUsage) -> dict[str, float | int]:
    return {
        "wall_s": usage.wall_s,
        "user_s": usage.user_s,
        "sys_s": usage.sys_s,
        "peak_rss_bytes": usage.peak_rss_bytes,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    return {
        "runs": runs,
        "wall_s_min": min(walls),
        "wall_s_median": statistics.median(walls),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
    }


def _replay_cmd(*args: str) -> list[str]:
    # `python -m replay`: the interpreter running this, as bench.py's benchmarks do
    return [sys.executable, "-m", "replay", *args]


def _run_replay(args: list[str], out: Path) -> tuple[ProcessUsage, dict[str, Any]]:
    usage = run_with_usage(args)
    return usage, json.loads((out / "summary.json").read_text())


def _run_lcs(args: list[str]) -> tuple[ProcessUsage, dict[str, Any]]:
    usage = run_with_usage(args, capture_stdout=True)
    lines = usage.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{' '.join(args)} printed nothing")
    return usage, json.loads(lines[-1])


def _bench_key_space(
    preset: str,
    work: Path,
    *,
    batches: int,
    batch_size: int,
    capacity_rows: int,
    pairs: int,
    lcs_python: str,
) -> dict[str, Any]:
    """One key space: generate, export, warm up, then `pairs` timed A-B pairs."""
    from replay.workload.generator import generate
    from replay.workload.presets import get_preset

    spec = get_preset(preset).with_overrides(batches=batches, batch_size=batch_size)
    trace = generate(spec, work / "trace")
    keys = export_keys(trace, work / "keys.bin")
    if keys.requests != spec.lookups:
        raise RuntimeError(f"{preset}: exported {keys.requests:,} keys of {spec.lookups:,}")
    out = work / "run"
    a = _replay_cmd(
        "run", str(trace), "--system", "hbm-lru",
        "--set", f"policy.capacity_rows={capacity_rows}", "--out", str(out), "--force",
    )  # fmt: skip
    b = [lcs_python, str(CHILD_SCRIPT), str(keys.path), str(capacity_rows)]

    lcs_misses: int | None = None

    def check(tool: str, lookups: int, misses: int) -> None:
        # every run, warm-ups included, must give libCacheSim's first count
        nonlocal lcs_misses
        if lookups != keys.requests:
            raise RuntimeError(
                f"{preset}: {tool} counted {lookups:,} lookups, the trace has {keys.requests:,}"
            )
        if lcs_misses is None:
            lcs_misses = misses
        elif misses != lcs_misses:
            raise RuntimeError(
                f"{preset}, {capacity_rows:,} rows: {tool} counted {misses:,} misses, "
                f"libCacheSim {lcs_misses:,}; no speed is reported for a wrong answer"
            )

    def run_b() -> dict[str, Any]:
        usage, got = _run_lcs(b)
        check("libCacheSim", int(got["requests"]), int(got["misses"]))
        return {**_usage_row(usage), "sim_s": float(got["seconds"]), "version": got["version"]}

    def run_a() -> dict[str, Any]:
        usage, summary = _run_replay(a, out)
        check("replay run", int(summary["lookups"]), int(summary["policy"]["misses"]))
        return _usage_row(usage)

    run_b()  # libCacheSim first: its count is the one replay's must equal
    run_a()
    lcs_runs: list[dict[str, Any]] = []
    replay_runs: list[dict[str, Any]] = []
    for _ in range(pairs):  # A then B, so background load falls on both alike
        replay_runs.append(run_a())
        lcs_runs.append(run_b())
    ratios = [b_["wall_s"] / a_["wall_s"] for a_, b_ in zip(replay_runs, lcs_runs, strict=True)]
    assert lcs_misses is not None
    return {
        "key_space": preset,
        "key_space_rows": keys.key_space_rows,
        "lookups": keys.requests,
        "batches": batches,
        "batch_size": batch_size,
        "capacity_rows": capacity_rows,
        "misses": lcs_misses,
        "miss_ratio": lcs_misses / keys.requests,
        "misses_identical": True,  # else check() raised
        "replay": _summary(replay_runs),
        "libcachesim": {
            **_summary(lcs_runs),
            "sim_s_min": min(r["sim_s"] for r in lcs_runs),
            "version": lcs_runs[0]["version"],
        },
        "pair_ratios": ratios,
        "ratio_median": statistics.median(ratios),
    }


def _bench_day(day_batches: int, work: Path) -> dict[str, Any]:
    """A day of Criteo Terabyte on the fly: one whole `replay run`, timed once."""
    from replay.workload.presets import get_preset

    out = work / "day"

    def cmd(batches: int) -> list[str]:
        return _replay_cmd(
            "run", "--workload", "criteo-terabyte", "--batches", str(batches),
            "--batch-size", "2048", "--system", "hbm-lru", "--out", str(out), "--force",
        )  # fmt: skip

    # two batches, untimed: the generation and LRU kernels' disk cache and the modules'
    # pages are then warm even when no key-space runs came first (about a second)
    run_with_usage(cmd(2))
    usage, summary = _run_replay(cmd(day_batches), out)
    lookups = int(summary["lookups"])
    expected = get_preset("criteo-terabyte").with_overrides(batches=day_batches, batch_size=2048)
    if lookups != expected.lookups:
        raise RuntimeError(f"the day counted {lookups:,} lookups, expected {expected.lookups:,}")
    policy = summary["policy"]
    capacity = None
    if "capacity_units" in policy and "unit_rows" in policy:
        capacity = int(policy["capacity_units"]) * int(policy["unit_rows"])
    return {
        "workload": "criteo-terabyte",
        "batches": day_batches,
        "batch_size": 2048,
        "key_space_rows": expected.total_rows,
        "lookups": lookups,
        "capacity_rows": capacity,  # the hbm-lru preset's own
        "misses": int(policy["misses"]),
        **_usage_row(usage),
        "lookups_per_s": lookups / usage.wall_s,
    }


def bench_vs_libcachesim(
    *,
    key_spaces: Sequence[str] = KEY_SPACES,
    batches: int = 2000,
    batch_size: int = 2048,
    capacity_rows: int = 1_000_000,
    pairs: int = 3,
    lcs_python: str | None = None,
    day_batches: int | None = None,
    on_row: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`replay run --system hbm-lru` against libCacheSim's LRU per key space, whole
    processes (the module docstring says how), and optionally a Criteo Terabyte day on
    the fly. `on_row(name, row)` after each key space ("day" for the day).

    The interpreter for libCacheSim is found first (`find_lcs_python`: ConfigError when
    there is none), before any trace is generated.
    """
    for name, value in (("batches", batches), ("batch_size", batch_size),
                        ("capacity_rows", capacity_rows), ("pairs", pairs)):  # fmt: skip
        if value < 1:
            raise ConfigError(f"{opt('--' + name.replace('_', '-'))} must be > 0, not {value}")
    if day_batches is not None and day_batches < 1:
        raise ConfigError(f"the day's batches must be > 0, not {day_batches}")
    python = find_lcs_python(lcs_python) if key_spaces else None
    result: dict[str, Any] = {
        "machine": machine_description(),
        "lcs_python": python,
        "pairs": pairs,
        "capacity_rows": capacity_rows,
        "batches": batches,
        "batch_size": batch_size,
        "rows": [],
        "day": None,
    }
    compile_package()
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-lcs-"))
    try:
        for preset in key_spaces:
            work = tmp / preset
            work.mkdir()
            assert python is not None
            row = _bench_key_space(
                preset,
                work,
                batches=batches,
                batch_size=batch_size,
                capacity_rows=capacity_rows,
                pairs=pairs,
                lcs_python=python,
            )
            # a key space's trace and keys (GBs at full size) go before the next one's
            shutil.rmtree(work, ignore_errors=True)
            result["rows"].append(row)
            if on_row is not None:
                on_row(preset, row)
        if day_batches is not None:
            result["day"] = _bench_day(day_batches, tmp)
            if on_row is not None:
                on_row("day", result["day"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def compile_package() -> None:
    """Byte-compile the `replay` package's modules, as `pip install` does for an installed
    package: an editable install run with PYTHONDONTWRITEBYTECODE=1 (as on this project's
    VMs) never writes its .pyc files, and every timed process then compiled ~65 modules
    from source (0.06-0.12 s of a 2 s run). Reading them needs nothing (the variable only
    stops writes), so the timed processes keep the caller's environment."""
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parents[1], quiet=1)


# -- the table --------------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _lookups(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:,.2f} B"
    return f"{n / 1e6:,.1f} M" if n >= 1e6 else f"{n:,}"


def pairs_text(n: int) -> str:
    """`n` pairs in words: 1 pair, 3 pairs."""
    return f"{n} pair" if n == 1 else f"{n} pairs"


def markdown_table(result: dict[str, Any]) -> str:
    """One row per key space, and one for the day when it ran."""
    if result["rows"]:
        how = (
            f"whole processes, {pairs_text(result['pairs'])} of `replay run` then libCacheSim "
            "after an untimed warm-up of each; ratio = libCacheSim's wall time / replay's, "
            "the median of the pairs."
        )
    else:
        how = "one whole `replay run` process, timed once after a 2-batch warm-up."
    lines = [
        f"Measured on {result['machine']}; {how}",
        "",
        "| trace | key space (rows) | lookups | cache (rows) | libCacheSim min / median | "
        "`replay run` min / median | `replay run` peak | replay vs libCacheSim | "
        "misses identical |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lcs, rep = r["libcachesim"], r["replay"]
        lines.append(
            f"| {r['key_space']}, {r['batches']:,} x {r['batch_size']:,} | "
            f"{r['key_space_rows']:,} | {_lookups(r['lookups'])} | {r['capacity_rows']:,} | "
            f"{lcs['wall_s_min']:.2f} / {lcs['wall_s_median']:.2f} s | "
            f"{rep['wall_s_min']:.2f} / {rep['wall_s_median']:.2f} s | "
            f"{_gib(rep['peak_rss_bytes'])} | {r['ratio_median']:.1f}x | "
            f"{'yes' if r['misses_identical'] else 'NO'} ({r['misses']:,}) |"
        )
    day = result.get("day")
    if day:
        cache = f"{day['capacity_rows']:,}" if day["capacity_rows"] else "hbm-lru's"
        lines.append(
            f"| criteo-terabyte day on the fly, {day['batches']:,} x {day['batch_size']:,} "
            f"({day['lookups_per_s'] / 1e6:.1f} M lookups/s) | {day['key_space_rows']:,} | "
            f"{_lookups(day['lookups'])} | {cache} | - | {day['wall_s']:.2f} s (1 run) | "
            f"{_gib(day['peak_rss_bytes'])} | - | - |"
        )
    return "\n".join(lines)


__all__ = [
    "KEY_SPACES",
    "TERABYTE_DAY_BATCHES",
    "KeyExport",
    "bench_vs_libcachesim",
    "export_keys",
    "find_lcs_python",
    "lcs_import_error",
    "markdown_table",
    "pairs_text",
]
