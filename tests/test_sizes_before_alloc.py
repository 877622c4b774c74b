"""Every setting that sizes a structure is checked before anything is allocated: a cache
larger than the rows it could hold is allocated to those rows (and counts as given), one
that cannot be cut is refused in one line with the estimate, integer widths follow the
sizes, and a cluster's per-GPU state is in the memory estimate.

The commands run in a child under an address-space limit (RLIMIT_AS), as a user's
`ulimit -v` would hold them: an allocation past it fails there, as it would on a machine
without the memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from replay._memory import address_space_room, available_memory
from replay.policies.base import PolicyContext, index_dtype, usable_units
from replay.system import cachelib

LIMIT_BYTES = 3 << 30  # the children's address space
SECONDS = 5.0  # a refusal within this, from the start of the process, on an idle machine
# a refusal of a system that does not exist takes about this on an idle machine: on a
# loaded one the bound above grows as that refusal's time does
IDLE_REFUSAL_SECONDS = 1.0


def _replay(
    tmp_path: Path,
    *args: str,
    limit: int = LIMIT_BYTES,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> tuple[subprocess.CompletedProcess[str], float]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    child_env = {k: v for k, v in os.environ.items() if k != "REPLAY_MEMORY_LIMIT"}
    child_env.update(env or {})
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "replay", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=cap,
        env=child_env,
    )
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def pace(tmp_path_factory: pytest.TempPathFactory) -> float:
    """How much slower than idle this machine refuses a trivial run now (at least 1)."""
    tmp = tmp_path_factory.mktemp("pace")
    proc, seconds = _replay(tmp, "run", "--workload", "tiny", "--system", "no-such", "--out", "o")
    assert proc.returncode == 2, proc.stderr[-3000:]
    return max(1.0, seconds / IDLE_REFUSAL_SECONDS)


def _refused(
    proc: subprocess.CompletedProcess[str], seconds: float, pace: float, *words: str
) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("replay: error: "), lines
    assert seconds < SECONDS * pace, (seconds, pace)
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


# -- caches larger than the rows: allocated to the rows, counted as given ---------------


@pytest.fixture(scope="module")
def ssd_tbe_preset(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """summary.json of ssd-tbe as preset on tiny (an L2 of 8 GiB: every row)."""
    tmp = tmp_path_factory.mktemp("ssd-tbe")
    ref, _ = _replay(tmp, "run", "--workload", "tiny", "--system", "ssd-tbe", "--out", "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    return _summary(tmp / "ref")


@pytest.mark.parametrize("l2", ["500e9", "64GiB"])
def test_an_l2_larger_than_the_rows_is_allocated_to_them(
    tmp_path: Path, l2: str, ssd_tbe_preset: dict
) -> None:
    """500e9 B of L2 asked for 116 GiB of slots; 64 GiB (2^31 rows) overflowed the int32
    links. Either holds every row of tiny's 25,324: the counters are those of any L2 that
    does (the preset's 8 GiB), the capacity is reported as given, meta.json says so."""
    big, _ = _replay(
        tmp_path, "run", "--workload", "tiny", "--system", "ssd-tbe",
        "--set", f"policy.l2_capacity_bytes={l2}", "--out", "big",
    )  # fmt: skip
    assert big.returncode == 0, big.stderr[-3000:]
    got, want = _summary(tmp_path / "big"), ssd_tbe_preset
    counters = ("hits", "misses", "evictions", "clean_evictions", "sets", "resident_max")
    assert {k: got["policy"]["l2"][k] for k in counters} == {
        k: want["policy"]["l2"][k] for k in counters
    }
    row_state = got["row_state_bytes"]
    asked = float(l2.replace("GiB", "")) * (2**30 if l2.endswith("GiB") else 1)
    assert got["policy"]["l2"]["capacity_rows"] == cachelib.capacity_rows(asked, row_state)
    assert got["policy"]["ssd"] == want["policy"]["ssd"]
    meta = json.loads((tmp_path / "big" / "meta.json").read_text())
    assert any("an L2 of" in note and "25,324 slots" in note for note in meta["sizing"])


def test_plan_takes_an_l2_larger_than_the_rows(tmp_path: Path) -> None:
    proc, _ = _replay(
        tmp_path, "plan", "--workload", "tiny", "--system", "ssd-tbe", "--cache-budget",
        "1MiB", "--cluster-mtbf", "6h", "--set", "policy.l2_capacity_bytes=500e9",
        "--out", "plan",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "plan" / "plan.json").is_file()


@pytest.mark.parametrize("system", ["hbm-lru", "hbm-lfu", "hbm-belady"])
def test_a_cache_of_billions_of_rows_on_a_small_trace(tmp_path: Path, system: str) -> None:
    """79 GB of HBM is 2.47e9 rows of tiny's: the LRU's int32 links overflowed, the LFU
    and Belady mapped 80 GB of slots. Allocated to the 25,324 rows, counted as given."""
    proc, _ = _replay(
        tmp_path, "run", "--workload", "tiny", "--system", system,
        "--set", "policy.capacity_bytes=79e9", "--out", "out",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = _summary(tmp_path / "out")
    assert summary["policy"]["capacity_units"] == int(79e9 // summary["row_state_bytes"])
    assert summary["policy"]["evictions"] == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["sizing"] == [
        f"policy: a cache of {summary['policy']['capacity_units']:,} rows allocated as 25,324 "
        "slots, the rows of the tables: it can hold no more, and its counters are those of "
        "the capacity given"
    ]


@pytest.mark.parametrize("system", ["hbm-lru", "hbm-lfu", "hbm-belady"])
def test_a_cache_larger_than_a_short_traces_lookups(tmp_path: Path, system: str) -> None:
    """10 batches of tiny's look up 3,840 rows, fewer than its 25,324: a cache can hold
    no more rows than it was asked for, so it is allocated to the lookups (a 20-batch
    Criteo Kaggle trace on an 8 GiB cache mapped a 2 GiB hash table), counted as given,
    with the counters of a cache of every row."""
    runs = {}
    for name, capacity in (("short", "capacity_bytes=79e9"), ("same", "capacity_rows=25324")):
        proc, _ = _replay(
            tmp_path, "run", "--workload", "tiny", "--batches", "10", "--system", system,
            "--set", f"policy.{capacity}", "--out", name,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = tmp_path / name
    summary = _summary(runs["short"])
    assert summary["policy"]["capacity_units"] == int(79e9 // summary["row_state_bytes"])
    meta = json.loads((runs["short"] / "meta.json").read_text())
    assert meta["sizing"] == [
        f"policy: a cache of {summary['policy']['capacity_units']:,} rows allocated as 3,840 "
        "slots, the trace's lookups: it can hold no more, and its counters are those of the "
        "capacity given"
    ]
    # the same counters as a cache of every row (which never evicts either)
    read = (runs["short"] / "batches.parquet").read_bytes()
    assert read == (runs["same"] / "batches.parquet").read_bytes()


def test_an_l2_larger_than_a_short_traces_lookups(tmp_path: Path) -> None:
    """ssd-tbe's L2 (its preset's 320 GiB of host DRAM) over 10 batches of tiny's: every
    row it holds was looked up, so it gets 3,840 slots (a 300-batch Criteo Kaggle run
    allocated 33.8 M slots: 2.4 GiB of peak RSS), never evicts, and holds every row L1
    sent it, as before."""
    proc, _ = _replay(
        tmp_path, "run", "--workload", "tiny", "--batches", "10", "--system", "ssd-tbe",
        "--out", "short",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    l2 = _summary(tmp_path / "short")["policy"]["l2"]
    meta = json.loads((tmp_path / "short" / "meta.json").read_text())
    assert meta["sizing"] == [
        f"policy: an L2 of {l2['capacity_rows']:,} rows allocated as 3,840 slots, the trace's "
        "lookups: it can hold no more, and its counters are those of the capacity given"
    ]
    assert l2["evictions"] == 0 and l2["clean_evictions"] == 0
    assert 0 < l2["resident_max"] <= 3840


# -- what cannot be cut: refused with the estimate --------------------------------------


def test_fbgemm_ways_beyond_memory_are_refused_with_the_estimate(
    tmp_path: Path, pace: float
) -> None:
    """A TBE cache's set is a hash modulo its sets: 79 GB of ways (2.47e9 of them) cannot
    be cut to the rows without changing which rows share a set."""
    proc, seconds = _replay(
        tmp_path, "run", "--workload", "tiny", "--system", "hbm-tbe-lru",
        "--set", "policy.capacity_bytes=79e9", "--out", "out",
    )  # fmt: skip
    _refused(proc, seconds, pace, "needs about", "cache ways x 16 B", "RLIMIT_AS")
    assert not (tmp_path / "out").exists()


_CLUSTER = ("--set", "cluster.preset=dgx-h100", "--set", "cluster.nodes=8192")
_PLAN = ("--cache-budget", "1MiB", "--cluster-mtbf", "6h")


@pytest.mark.parametrize(
    ("command", "limit", "env", "said"),
    [
        ("run", LIMIT_BYTES, {"REPLAY_MEMORY_LIMIT": "1G"}, "REPLAY_MEMORY_LIMIT=1G"),
        ("run", 3 << 29, {}, "RLIMIT_AS"),
        ("plan", LIMIT_BYTES, {"REPLAY_MEMORY_LIMIT": "1G"}, "REPLAY_MEMORY_LIMIT=1G"),
    ],
)
def test_a_cluster_too_large_for_memory_is_refused_in_one_line(
    tmp_path: Path, command: str, limit: int, env: dict[str, str], said: str, pace: float
) -> None:
    """8,192 nodes x 8 GPUs on tiny: each GPU's state (its cache, its columns a batch)
    is in the estimate, checked before the placement and any GPU's state."""
    proc, seconds = _replay(
        tmp_path, command, "--workload", "tiny", "--system", "hbm-lru", *_CLUSTER,
        *(_PLAN if command == "plan" else ()), "--out", "out", limit=limit, env=env,
    )  # fmt: skip
    words = ("65,536 GPUs x", "200 batches") if command == "run" else ("per-GPU curves and",)
    _refused(proc, seconds, pace, *words, said)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("run", "--system", "dram", "--out", "out"), "batches x 4 KiB of per-batch columns"),
        (("inspect",), "batches x 8 B of per-batch counts"),
    ],
)
def test_per_batch_columns_are_in_the_estimate(
    tmp_path: Path, args: tuple[str, ...], said: str, pace: float
) -> None:
    """2^32 - 1 batches of tiny: `inspect` allocated 32 GiB of per-batch counts (an
    ArrayMemoryError); both commands refuse with the figure before allocating."""
    proc, seconds = _replay(
        tmp_path, args[0], "--workload", "tiny", "--batches", "4294967295", *args[1:]
    )
    _refused(proc, seconds, pace, "4,294,967,295 " + said, "RLIMIT_AS")


# -- the pieces -------------------------------------------------------------------------


def test_usable_units_and_index_widths() -> None:
    assert usable_units(2_468_750_000, 25_324) == 25_324
    assert usable_units(1_000, 25_324) == 1_000
    assert usable_units(10**18, 25_324, 1024) == 25  # chunks of 1,024 rows
    assert usable_units(5, 0) == 1  # a GPU without rows still gets a slot
    assert index_dtype(2**31 - 2) == np.int32  # slot + 1 and the sentinel fit
    assert index_dtype(2**31 - 1) == np.int64
    ctx = PolicyContext(
        total_keys=25_324, table_rows=np.array([25_324]), offsets=np.array([0, 25_324]),
        num_batches=1, row_state_bytes=32, capacity_units=2**40,
    )  # fmt: skip
    assert ctx.slots == 25_324


def test_an_address_space_limit_lowers_what_the_machine_has(tmp_path: Path) -> None:
    assert address_space_room() is None or resource.getrlimit(resource.RLIMIT_AS)[0] >= 0
    code = (
        "from replay._memory import available_memory, address_space_room\n"
        "have, source = available_memory()\n"
        "print(have, address_space_room(), source)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES)),
    )
    have, room, *source = proc.stdout.split()
    assert int(have) == int(room) < LIMIT_BYTES
    assert "RLIMIT_AS" in " ".join(source)
    unlimited, _ = available_memory()
    assert unlimited is None or unlimited > 0


# the child's own peak: VmHWM belongs to its memory map, while ru_maxrss keeps the high
# water mark of the process it was forked from (this test runner) across the exec
_PEAK = """
import sys
from replay.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print("PEAK", peak * 1024)
sys.exit(code)
"""


def _peak(tmp_path: Path, nodes: int, out: str) -> tuple[int, int]:
    """(peak RSS, the estimate's total) of `replay run` on tiny over `nodes` x 8 GPUs."""
    from replay.engine.systems import resolve_system
    from replay.runs.run_memory import check_run_memory
    from replay.workload.onthefly import GeneratedTrace
    from replay.workload.presets import get_preset

    sets = ["cluster.preset=dgx-h100", f"cluster.nodes={nodes}"]
    args = ["run", "--workload", "tiny", "--system", "hbm-lru", "--out", out]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak = int(proc.stdout.split("PEAK")[-1].split()[0])
    source = GeneratedTrace(get_preset("tiny"))
    estimate = check_run_memory(source, [resolve_system("hbm-lru", sets)], inspect=False)
    return peak, estimate.total


def test_the_cluster_estimate_against_the_measured_peak(tmp_path: Path) -> None:
    """What 8,192 GPUs hold beyond what 8 hold (tiny, 200 batches), measured, against
    the estimate's growth: not below it, and at most 1.6 times it (`replay.runs.
    run_memory`'s figures, rounded up, are 1.15-1.46 times the growth measured on 2,048
    to 65,536 GPUs)."""
    small_peak, small_estimate = _peak(tmp_path, 1, "small")
    large_peak, large_estimate = _peak(tmp_path, 1024, "large")
    grown, estimated = large_peak - small_peak, large_estimate - small_estimate
    assert grown > 0
    assert grown <= estimated <= 1.6 * grown, (grown, estimated)
