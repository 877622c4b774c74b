"""The `ssd-tbe` policy (FBGEMM's SSD TBE): L1's miss stream against the `tbe` reference,
L1's counters against `tbe`'s, L2 against a slow LRU fed with that stream, the SSD
store's bytes against hand goldens, the preset and the CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import Batches, batch_range, make_policy  # the policy tests' harness

from replay.engine.systems import resolve_system
from replay.policies.base import NUM_COUNTERS
from replay.policies.ssd_tbe import (
    SSD_READS,
    SSD_WRITES,
    SSDTBEPolicy,
    l1_miss_stream,
    reference_l2,
)
from replay.policies.tbe import reference_tbe
from replay.system import cachelib
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.spec import spec_from_dict


@st.composite
def l1_cases(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.integers(1, 60))
    lookups = st.lists(st.integers(0, keys - 1), max_size=30)
    batches = draw(st.lists(st.tuples(lookups, lookups), min_size=1, max_size=8))
    cuts = tuple(draw(st.lists(st.integers(1, len(batches)), max_size=3)))
    return {
        "batches": [(list(lk), list(up)) for lk, up in batches],
        "total": keys,
        "sets": draw(st.integers(1, 5)),
        "assoc": draw(st.sampled_from([1, 2, 4, 8])),
        "cuts": cuts,
    }


def ranges(batches: Batches, cuts: tuple[int, ...]) -> list[Any]:
    edges = [0, *sorted(set(cuts)), len(batches)]
    return [batch_range(batches, lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]


@settings(max_examples=150, deadline=None)
@given(case=l1_cases())
def test_l1_miss_stream_matches_the_tbe_reference(case: dict[str, Any]) -> None:
    """Per batch: the unique misses (by set, then index), the evicted rows and the
    conflict unique misses, as the slow TBE reference records them; and L1's counters
    are the `tbe` reference's (cut into ranges anywhere)."""
    batches, sets, assoc = case["batches"], case["sets"], case["assoc"]
    record: list[tuple[list[int], list[int], list[int]]] = []
    want, _ = reference_tbe(batches, sets, assoc, "lru", record=record)
    got = []
    counters = []
    for ex in l1_miss_stream(
        ranges(batches, case["cuts"]), case["total"], cache_rows=sets * assoc, associativity=assoc
    ):
        counters.append(ex.counters)
        for i in range(ex.batches):
            reads, evictions, conflicts = ex.batch(i)
            got.append((reads.tolist(), evictions.tolist(), conflicts.tolist()))
    assert got == record
    np.testing.assert_array_equal(np.concatenate(counters), want)


def test_l1_miss_stream_golden_one_set() -> None:
    """One set of 2 ways. Batch 0: rows 3, 1 miss (read 1, 3), fill both. Batch 1: rows
    5, 7, 1: 1 hits; 5 and 7 miss; only the way of 3 is free of this time step: 5 takes
    it (3 evicted), 7 is a conflict. Batch 2: 7 misses; both ways were last used in
    batch 1, and the warp sort's tie order gives it the way of 1."""
    batches = [([3, 1, 3], []), ([5, 7, 1], []), ([7], [])]
    (ex,) = l1_miss_stream([batch_range(batches, 0, 3)], 8, cache_rows=2, associativity=2)
    assert [tuple(a.tolist() for a in ex.batch(i)) for i in range(3)] == [
        ([1, 3], [], []),
        ([5, 7], [3], [7]),
        ([7], [1], []),
    ]


# -- the policy: L1 as tbe, L2 as a slow LRU fed with L1's stream -------------------------


def run_ssd_tbe(
    batches: Batches, sets: int, assoc: int, l2_rows: int, cuts: tuple[int, ...] = ()
) -> SSDTBEPolicy:
    """The ssd-tbe policy on a trace given as lists (rows of 64 bytes), cut into ranges."""
    policy = make_policy(
        "ssd-tbe",
        batches,
        sets * assoc,
        associativity=assoc,
        l2_capacity_bytes=cachelib.bytes_for_rows(l2_rows, 64),  # CacheLib's, for l2_rows
        backing_tier="dram",
        store_tier="nvme",
    )
    assert isinstance(policy, SSDTBEPolicy)
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    for br in ranges(batches, cuts):
        policy.process(br, out[br.batch_start : br.batch_stop])
    policy.counters = out  # type: ignore[attr-defined]
    return policy


@settings(max_examples=150, deadline=None)
@given(case=l1_cases(), l2_rows=st.integers(0, 24))
def test_l1_is_tbe_and_l2_is_an_lru_of_l1s_stream(case: dict[str, Any], l2_rows: int) -> None:
    """L1's counters and FBGEMM's counters are the tbe reference's on the same settings;
    L2's and the store's counters per batch are a slow LRU's fed with L1's stream."""
    batches, sets, assoc = case["batches"], case["sets"], case["assoc"]
    record: list[tuple[list[int], list[int], list[int]]] = []
    want, totals = reference_tbe(batches, sets, assoc, "lru", record=record)
    policy = run_ssd_tbe(batches, sets, assoc, l2_rows, case["cuts"])
    np.testing.assert_array_equal(policy.counters, want)  # type: ignore[attr-defined]
    assert policy.fbgemm_counters() == totals
    np.testing.assert_array_equal(policy.store, reference_l2(record, l2_rows))


def test_l1_counters_identical_to_tbe_on_a_criteo_workload() -> None:
    """Through the engine: ssd-tbe and hbm-tbe-lru with the same L1 settings give the same
    counters (summary.json's policy totals and FBGEMM's counters)."""
    from replay.engine.replay import replay_trace

    data = get_preset("criteo-kaggle").to_dict()
    data.update(batches=30, batch_size=48, seed=11)
    for table in data["tables"]:
        table["rows"] = max(8, int(table["rows"] * 1e-3))
    trace = GeneratedTrace(spec_from_dict(data, where="test"))
    knobs = ["policy.cache_load_factor=0.002"]
    tbe = replay_trace(trace, resolve_system("hbm-tbe-lru", knobs)).summary["policy"]
    l2 = "policy.l2_capacity_bytes=32KiB"
    ssd = replay_trace(trace, resolve_system("ssd-tbe", [*knobs, l2])).summary["policy"]
    assert tbe["evictions"] > 0 and ssd["l2"]["evictions"] > 0  # every level had to choose
    for key in ("hits", "misses", "bypass", "fills", "evictions", "writebacks", "sets"):
        assert ssd[key] == tbe[key], key
    assert ssd["fbgemm_counters"] == tbe["fbgemm_counters"]
    assert ssd["l1"] == {
        "sets": tbe["sets"],
        "associativity": 32,
        "load_factor": tbe["load_factor"],
        **tbe["fbgemm_counters"],
    }
    # L2 sees every unique miss once; the store reads what L2 missed
    assert ssd["l2"]["hits"] + ssd["l2"]["misses"] == tbe["fbgemm_counters"]["unique_misses"]
    assert ssd["ssd"]["read_rows"] == ssd["l2"]["misses"]


def test_ssd_bytes_hand_golden() -> None:
    """One L1 set of 2 ways, L2 of 3 rows, rows of 64 bytes, write amplification 4.
    b0 [1, 2]: L1 reads 1, 2 (L2 misses, 2 store reads, put clean; L2: 1 2).
    b1 [3, 4]: L1 reads 3, 4 (2 store reads) and evicts 1, 2 (way 0 then way 1). Put 3
      (L2: 1 2 3), put 4 evicts 1 (write), set 1 evicts 2 (write), set 2 evicts 3
      (write). L2: 4 1* 2*.
    b2 [1, 4]: 4 hits L1; 1 misses L1 and hits L2 (L2: 4 2* 1*); it takes the way of 3
      (4's way was used in this batch): set 3 evicts 4 (write). L2: 2* 1* 3*.
    b3 [5]: both ways were used in b2, the tie gives way 0: 1 is evicted. 5 misses L2
      (store read), put 5 evicts 2* (write), set 1 finds 1 (L2: 3* 5 1*).
    Store: 5 reads, 5 writes; 4 of the 5 victims were clean (never set since read)."""
    batches = [([1, 2], []), ([3, 4], []), ([1, 4], []), ([5], [])]
    policy = run_ssd_tbe(batches, sets=1, assoc=2, l2_rows=3)
    s = policy.summary_extra()
    assert s["l2"] == {
        "hits": 1,
        "misses": 5,
        "evictions": 5,
        "clean_evictions": 4,
        "sets": 4,
        "hit_rate": 1 / 6,
        "capacity_rows": 3,
        "capacity_bytes": 360.0,  # 3 CacheLib items of a 64 B row: 120 B chunks
        "resident_max": 3,
    }
    assert s["ssd"] == {
        "read_rows": 5,
        "write_rows": 5,
        "read_bytes": 5 * 64,
        "logical_write_bytes": 5 * 64,
        "write_bytes": 5 * 64 * 4,
        "write_amplification": 4.0,
    }
    assert policy.store[:, SSD_READS].tolist() == [2, 2, 0, 1]
    assert policy.store[:, SSD_WRITES].tolist() == [0, 3, 1, 1]


def test_without_l2_every_get_reads_and_every_set_writes_the_store() -> None:
    batches = [([1, 2], []), ([3, 4], []), ([1, 4], [])]
    policy = run_ssd_tbe(batches, sets=1, assoc=2, l2_rows=0)
    assert policy.store[:, SSD_READS].tolist() == [2, 2, 1]
    assert policy.store[:, SSD_WRITES].tolist() == [0, 2, 1]
    assert policy.summary_extra()["l2"]["hits"] == 0


def test_the_store_is_timed_before_the_copy_per_batch() -> None:
    """batches.parquet: L2's and the store's rows per batch; the store tier reads a 4 KiB
    block per row; embedding time = L1 + max(L2 + store, link)."""
    from replay.engine.replay import replay_trace

    spec = get_preset("tiny").with_overrides(batches=8)
    system = resolve_system(
        "ssd-tbe", ["policy.cache_load_factor=0.01", "policy.l2_capacity_bytes=16KiB"]
    )
    result = replay_trace(GeneratedTrace(spec), system)
    c, pol = result.columns, result.summary["policy"]
    assert int(c["l2_misses"].sum()) == pol["l2"]["misses"]
    assert int(c["ssd_write_rows"].sum()) == pol["ssd"]["write_rows"] > 0
    np.testing.assert_array_equal(c["nvme_read_bytes"], c["ssd_read_rows"] * 4096)
    np.testing.assert_array_equal(
        c["nvme_write_bytes"], np.round(c["ssd_write_rows"] * 32 * 4.0).astype(np.int64)
    )
    host = c["dram_time_s"] + c["nvme_time_s"]
    want = c["hbm_time_s"] + np.maximum(host, c["pcie_time_s"])
    np.testing.assert_allclose(c["time_embedding_s"], want, rtol=1e-12)
    assert (c["nvme_time_s"] > c["pcie_time_s"]).any()  # the store is what waits here


# -- the CLI ------------------------------------------------------------------------------


def test_run_writes_the_levels_to_summary_json(tmp_path: Path) -> None:
    from replay.cli import main

    out = tmp_path / "run"
    code = main([
        "run", "--workload", "tiny", "--batches", "8", "--system", "ssd-tbe",
        "--set", "policy.cache_load_factor=0.01", "--set", "policy.l2_capacity_bytes=16KiB",
        "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    pol = summary["policy"]
    assert pol["name"] == "ssd-tbe"
    assert set(pol["l1"]) >= {"unique_misses", "conflict_unique_misses", "conflict_misses"}
    assert set(pol["l2"]) >= {"hits", "misses", "evictions"}
    assert set(pol["ssd"]) >= {"read_bytes", "write_bytes"}
    assert pol["l2"]["evictions"] > 0 and pol["ssd"]["write_bytes"] > 0
    # the store tier's columns: whole 4 KiB blocks per row read, the writes amplified
    nvme = summary["tiers"]["nvme"]
    assert nvme["read_bytes"] == pol["ssd"]["read_rows"] * 4096
    assert nvme["write_bytes"] == pol["ssd"]["write_bytes"]
    assert nvme["time_s"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["system"]["policy"]["store_tier"] == "nvme"


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("policy.l2_capacity_bytes=-1", "l2_capacity_bytes"),
        ("policy.ssd_write_amplification=0.5", "ssd_write_amplification"),
        ("policy.store_tier=tape", "store_tier"),
        ("policy.store_tier=dram", "store_tier"),
        ("policy.cache_algorithm=lfu", "LRU"),
        ("policy.l2_capacity_bytes=4TiB", "do not fit"),
    ],
)
def test_bad_settings_are_one_line_errors(
    knob: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.cli import main

    argv = ["run", "--workload", "tiny", "--batches", "2", "--system", "ssd-tbe"]
    code = main([*argv, "--set", knob, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and "\n" not in err and "Traceback" not in err


# -- speed --------------------------------------------------------------------------------


def ssd_tbe_rates(batches: int) -> dict[str, dict[str, float]]:
    """hbm-tbe-lru and ssd-tbe (the same L1) on `batches` x 2048 of criteo-terabyte
    generated on the fly, one after the other in this process, after a two-batch warm-up
    of each (kernels loaded): lookups per second of each whole replay_trace call."""
    import time

    from replay.engine.replay import replay_trace

    rates: dict[str, dict[str, float]] = {}
    for n in (2, batches):
        spec = get_preset("criteo-terabyte").with_overrides(batches=n, batch_size=2048)
        for name in ("hbm-tbe-lru", "ssd-tbe"):
            start = time.perf_counter()
            result = replay_trace(GeneratedTrace(spec), resolve_system(name))
            wall = time.perf_counter() - start
            lookups = int(result.summary["lookups"])
            rates[name] = {"lookups": lookups, "wall_s": wall, "lookups_per_s": lookups / wall}
    return rates


@pytest.mark.bench
def test_terabyte_day_through_ssd_tbe_at_half_the_rate_of_tbe() -> None:
    """Issue 45: a day of Criteo Terabyte (88,978 x 2048) through ssd-tbe at >= 0.5 x the
    rate of hbm-tbe-lru on the same trace, measured side by side."""
    from replay.runs.bench_lcs import TERABYTE_DAY_BATCHES

    rates = ssd_tbe_rates(TERABYTE_DAY_BATCHES)
    ratio = rates["ssd-tbe"]["lookups_per_s"] / rates["hbm-tbe-lru"]["lookups_per_s"]
    assert rates["ssd-tbe"]["lookups"] == TERABYTE_DAY_BATCHES * 2048 * 26
    assert ratio >= 0.5, (ratio, rates)


# -- checkpoints of an SSD-backed table (issue 45 item 3) ---------------------------------


def test_checkpoints_read_the_store_after_flushing_the_caches() -> None:
    """sync-full every 4 of 8 batches: each checkpoint flushes L1's ways and L2's rows into
    the store ((256 + 227) rows x 32 B x write amplification 4), reads the whole table
    from it sequentially and writes the state to the target (the same drive here).
    check-n-run: its increments read their rows from the store as point reads, one
    4 KiB block each."""
    from replay.engine.replay import replay_trace

    spec = get_preset("tiny").with_overrides(batches=8)
    knobs = ["policy.cache_load_factor=0.01", "policy.l2_capacity_bytes=16KiB"]
    full = ["checkpoint.strategy=sync-full", "checkpoint.interval_batches=4"]
    result = replay_trace(GeneratedTrace(spec), resolve_system("ssd-tbe", [*knobs, *full]))
    s = result.summary
    state, rows = s["row_state_bytes"], spec.total_rows
    assert state == 32 and s["policy"]["sets"] * 32 == 256
    # L2: the 32 B rows CacheLib holds in 16 KiB (72 B items in 72 B chunks: 227)
    assert cachelib.capacity_rows(16 * 1024, 32) == 16 * 1024 // 72
    flush = (256 + 16 * 1024 // 72) * state * 4
    ck = result.checkpoints
    assert list(ck["kind"]) == ["full", "full"] and list(ck["batch"]) == [3, 7]
    nvme, ssd = s["tiers"]["nvme"], s["policy"]["ssd"]
    assert nvme["read_bytes"] == ssd["read_rows"] * 4096 + 2 * rows * state
    assert nvme["write_bytes"] == ssd["write_bytes"] + int(ck["bytes"].sum()) + 2 * flush
    # the flush stalls training: its store write and L1's copy over PCIe, then the write
    system = resolve_system("ssd-tbe", [*knobs, *full])
    nv, pcie = system.tier("nvme"), system.link("pcie")
    t_flush = flush / nv.write_bw_bytes_per_s + nv.write_latency_ns * 1e-9
    t_flush += 256 * state / pcie.d2h_bw_bytes_per_s + pcie.latency_ns * 1e-9
    t_write = ck["bytes"][0] / nv.write_bw_bytes_per_s + nv.write_latency_ns * 1e-9
    assert ck["stall_s"][0] == pytest.approx(t_flush + t_write, rel=1e-12)

    incr = ["checkpoint.strategy=check-n-run", "checkpoint.interval_batches=2"]
    result = replay_trace(GeneratedTrace(spec), resolve_system("ssd-tbe", [*knobs, *incr]))
    s, ck = result.summary, result.checkpoints
    assert list(ck["kind"]) == ["full"] + ["incremental"] * 4  # the baseline, then rows
    nvme, ssd = s["tiers"]["nvme"], s["policy"]["ssd"]
    increments = int(ck["rows"][1:].sum())
    assert nvme["read_bytes"] == ssd["read_rows"] * 4096 + rows * state + increments * 4096
