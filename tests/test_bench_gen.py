"""Production-scale generation: meta-2021's batch of 887 M lookups generated and replayed
on the fly within 45 s and 1.5 GiB on 2 cores (`pytest -m bench tests/test_bench_gen.py`),
with the trace's parts pinned byte for byte; and, in the normal suite, the update sets'
dense path for large tables that a window looks up many times over (what made the batch's
update sets three times cheaper) against the slow reference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay.trace.updates import DENSE_ROWS_LIMIT, update_sets, update_sets_reference

LOOKUPS = 887_029_760  # meta-2021's batch: 65,536 samples x 13,535 lookups each
WALL_S = 45.0
PEAK_BYTES = int(1.5 * 2**30)
# the parts' SHA-256 as the generator wrote them before its speed-up (and since)
PARTS_SHA256 = {
    "lookups/part-00000.parquet": (
        "8604567de901c2eb7058882e1280268690c835bd858b2fb83f0beaddb4ec64f2"
    ),
    "updates/part-00000.parquet": (
        "55e100bbac41dbbd99ea15bf3d7ab38f2e71d138f76e27d4bddc4b816c429ea8"
    ),
}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_update_sets_of_large_tables_match_the_reference(accumulate: int) -> None:
    """Tables above DENSE_ROWS_LIMIT take the dense path where the window's lookups make
    the hash table at least as large as the table (70,000 rows, 40,000 lookups a batch),
    the hash path where they do not (the same rows looked up 100 times; 10 M rows)."""
    rng = np.random.default_rng(7)
    rows = np.array([70_000, 70_000, 10_000_000, 50], dtype=np.int64)
    assert rows[0] > DENSE_ROWS_LIMIT
    per_batch = (40_000, 100, 3_000, 500)
    batch, table, row = [], [], []
    for b in range(4):
        for t, n in enumerate(per_batch):
            # a power law's repeats, so rows recur within and across batches
            draws = (rng.pareto(0.8, n) * 50).astype(np.int64) % rows[t]
            batch.append(np.full(n, b, dtype=np.uint32))
            table.append(np.full(n, t, dtype=np.uint16))
            row.append(draws.astype(np.uint32))
    args = (np.concatenate(batch), np.concatenate(table), np.concatenate(row), 0, 4, rows)
    frozen = np.array([False, False, False, True])
    got = update_sets(*args, frozen, accumulate)
    ref = update_sets_reference(*args, frozen, accumulate)
    assert len(ref[0]) > 10_000  # rows repeat, and enough of them are distinct
    assert ref[3].max() > 1
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and np.array_equal(g, r)


def _timed(args: list[str]) -> dict[str, float]:
    """`replay ARGS` under /usr/bin/time: wall, user and system seconds, peak bytes."""
    argv = ["/usr/bin/time", "-f", "peak %M KB wall %e s user %U s sys %S s"]
    argv += [sys.executable, "-m", "replay", *args]
    # as a user runs it: without the suite's schema checks of every output (conftest)
    env = {k: v for k, v in os.environ.items() if k != "REPLAY_CHECK_SCHEMAS"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"peak (\d+) KB wall ([\d.]+) s user ([\d.]+) s sys ([\d.]+) s", done.stderr)
    assert found, done.stderr[-3000:]
    got = {
        "peak_bytes": int(found.group(1)) * 1024.0,
        "wall_s": float(found.group(2)),
        "user_s": float(found.group(3)),
        "sys_s": float(found.group(4)),
    }
    print(
        args[0], f"{got['wall_s']:.1f} s wall ({LOOKUPS / got['wall_s'] / 1e6:.1f} M lookups/s),",
        f"{got['user_s']:.1f} s user, {got['sys_s']:.1f} s system,",
        f"{got['peak_bytes'] / 2**30:.2f} GiB peak",
    )  # fmt: skip
    return got


@pytest.mark.bench
def test_meta_2021_batch_generated_in_45_s_and_1_5_gib(tmp_path: Path) -> None:
    out = tmp_path / "meta"
    got = _timed(["generate", "--preset", "meta-2021", "--batches", "1", "--out", str(out)])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lookups"] == LOOKUPS
    digests = {e["path"]: e["sha256"] for kind in manifest["files"].values() for e in kind}
    assert digests == PARTS_SHA256
    assert got["peak_bytes"] <= PEAK_BYTES
    assert got["wall_s"] <= WALL_S


@pytest.mark.bench
def test_meta_2021_batch_replayed_on_the_fly_in_45_s_and_1_5_gib(tmp_path: Path) -> None:
    args = ["run", "--workload", "meta-2021", "--batches", "1", "--system", "hbm-lru"]
    got = _timed([*args, "--out", str(tmp_path / "run")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["lookups"] == LOOKUPS
    assert got["peak_bytes"] <= PEAK_BYTES
    assert got["wall_s"] <= WALL_S


@pytest.mark.bench
def test_meta_2021_sampler_blocks_against_one_lookup_at_a_time() -> None:
    """meta-2021's four laws (the first table of each), drawn by `generate_lookups` in
    blocks (the tables with a tail guide) and, with a reuse probability that batch 0
    cannot use (the same rows), one lookup at a time: equal rows, and the blocks at most
    0.85x the loop's CPU per lookup on the three tail laws (measured 0.64-0.78)."""
    import time

    from replay.workload import draws, sampler
    from replay.workload.generator import CompiledWorkload, resolve_workload

    spec = resolve_workload("meta-2021")
    st = CompiledWorkload.from_spec(spec).tables
    first: dict[tuple[int, float], int] = {}
    for t, table in enumerate(spec.tables):
        first.setdefault((table.rows, table.alpha), t)
    loop = st.fparams.copy()
    loop[:, sampler.F_REUSE] = 0.5
    for t in first.values():
        n = spec.batch_size * spec.tables[t].pooling
        rows = {}
        seconds = {"blocks": 1e9, "loop": 1e9}
        for _ in range(3):
            for name, fp in (("blocks", st.fparams), ("loop", loop)):
                b, tb, r = np.empty(n, np.uint32), np.empty(n, np.uint16), np.empty(n, np.uint32)
                start = time.thread_time()
                draws.generate_lookups(
                    np.uint64(sampler.root_key(spec.seed)), 0, 1, spec.batch_size, st.iparams,
                    fp, st.round_keys, st.alias_prob, st.alias_index, st.perm, st.guide, b, tb,
                    r, t, t + 1,
                )  # fmt: skip
                seconds[name] = min(seconds[name], time.thread_time() - start)
                rows[name] = r
        assert np.array_equal(rows["blocks"], rows["loop"])
        ratio = seconds["blocks"] / seconds["loop"]
        per = {name: f"{s / n * 1e9:.1f} ns" for name, s in seconds.items()}
        print(f"table {t} ({spec.tables[t].rows:,} rows): {per}, ratio {ratio:.2f}")
        if st.iparams[t, sampler.I_GUIDE_OFF] >= 0:
            assert ratio <= 0.85
