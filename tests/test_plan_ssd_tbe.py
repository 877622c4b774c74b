"""`replay plan` with FBGEMM's SSD TBE: the L2 curve against a slow LRU fed the same
stream, each candidate's curve against L1's own stream replayed apart, TorchRec's
settings, and the acceptance: the L1 + L2 the plan recommends, replayed by the `ssd-tbe`
policy, reach the target, and 10% smaller ones do not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.plan.plan import PlanRequest, make_plan
from replay.plan.ssd_tbe import paste_load_factor, ssd_tbe_system, two_level_curves
from replay.plan.ssd_tbe_l2 import DIRECT_MAX_KEYS, L2Curve, reference_l2
from replay.plan.write import plan_markdown, write_plan
from replay.policies.ssd_tbe import l1_miss_stream
from replay.policies.tbe import tbe_sets
from replay.system import cachelib
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.sampled import open_sampled_workload


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[tuple[list[int], list[int]]]]:
    keys = draw(st.integers(1, 40))
    row = st.integers(0, keys - 1)
    batches = draw(
        st.lists(
            st.tuples(st.lists(row, max_size=12, unique=True), st.lists(row, max_size=6)),
            max_size=12,
        )
    )
    return keys, batches


@settings(max_examples=150, deadline=None)
@given(case=streams())
def test_l2_curve_matches_a_slow_lru_at_every_size(
    case: tuple[int, list[tuple[list[int], list[int]]]],
) -> None:
    """SSD reads and writes of every L2 size (0 = no L2) from one pass equal an explicit
    LRU's, whose batch reads are looked up before any is put."""
    keys, batches = case
    sizes = list(range(0, keys + 3))
    curve = L2Curve(keys, sizes)
    for reads, writes in batches:
        curve.feed(np.array(reads, dtype=np.int64), np.array(writes, dtype=np.int64))
    got = curve.counts()
    for i, c in enumerate(got.sizes):
        assert (got.ssd_read_rows[i], got.ssd_write_rows[i]) == reference_l2(batches, int(c))
    assert got.reads == sum(len(r) for r, _ in batches)
    assert got.writes == sum(len(w) for _, w in batches)


def test_l2_curve_in_map_mode_is_the_direct_one() -> None:
    """A row space too large for a direct array keeps per-row state in a hash map: the
    same counts (the read order comes from the map's last positions)."""
    rng = np.random.default_rng(7)
    batches = [(np.unique(rng.zipf(1.4, 40) % 500), rng.integers(0, 500, 10)) for _ in range(80)]
    sizes = [0, 1, 10, 50, 100, 300, 600]
    direct = L2Curve(500, sizes)
    mapped = L2Curve(DIRECT_MAX_KEYS + 1, sizes)
    assert direct._state.direct and not mapped._state.direct
    fed = []
    for r, w in batches:
        r = r[rng.permutation(len(r))]
        fed.append((r.tolist(), w.tolist()))
        direct.feed(r, w)
        mapped.feed(r, w)
    a, b = direct.counts(), mapped.counts()
    np.testing.assert_array_equal(a.ssd_read_rows, b.ssd_read_rows)
    np.testing.assert_array_equal(a.ssd_write_rows, b.ssd_write_rows)
    for i, c in enumerate(sizes):
        assert (a.ssd_read_rows[i], a.ssd_write_rows[i]) == reference_l2(fed, c)


@pytest.mark.parametrize("direct", [True, False])
def test_l2_curve_fed_ranges_resumes_through_every_growth(direct: bool) -> None:
    """Many batches per call, the stack state forced to compact, grow its histogram and
    (map mode) its ids mid-range, cut anywhere: the counts of the slow LRU."""
    rng = np.random.default_rng(3)
    keys = 3000
    batches = []
    for _ in range(120):
        reads = np.unique(rng.zipf(1.2, 60) % keys)
        batches.append((rng.permutation(reads), rng.integers(0, keys, 20)))
    bounds = np.zeros((len(batches) + 1, 3), dtype=np.int64)
    bounds[1:, 0] = np.cumsum([len(r) for r, _ in batches])
    bounds[1:, 1] = np.cumsum([len(w[:12]) for _, w in batches])
    bounds[1:, 2] = np.cumsum([len(w[12:]) for _, w in batches])
    reads = np.concatenate([r for r, _ in batches])
    evictions = np.concatenate([w[:12] for _, w in batches])
    conflicts = np.concatenate([w[12:] for _, w in batches])
    sizes = [0, 1, 30, 100, 500, 1000, 2000, 4000]
    curve = L2Curve(keys, sizes, direct=direct, min_window=64)
    for lo, hi in ((0, 7), (7, 8), (8, 90), (90, 120)):
        curve.feed_batches(bounds, reads, evictions, conflicts, lo, hi)
    got = curve.counts()
    fed = [(r.tolist(), w.tolist()) for r, w in batches]
    for i, c in enumerate(sizes):
        assert (got.ssd_read_rows[i], got.ssd_write_rows[i]) == reference_l2(fed, c)
    assert curve._state.compactions > 0 and len(curve._state.hist) > 1024


@pytest.fixture(scope="module")
def tiny() -> GeneratedTrace:
    return GeneratedTrace(get_preset("tiny").with_overrides(batches=30))


def test_each_candidate_is_its_own_l1_stream_through_a_slow_l2(tiny: GeneratedTrace) -> None:
    """One read of the source for every L1 candidate gives, at each L2 size, what L1's
    stream replayed apart (`l1_miss_stream`) through the slow LRU gives."""
    total = int(np.sum(tiny.table_rows))
    cands, warm_from = two_level_curves(
        tiny, total_rows=total, distinct_rows=2000, associativity=32,
        load_factors=(0.002, 0.01, 0.05),
    )  # fmt: skip
    assert [c.ways for c in cands] == [
        tbe_sets(int(total * f), 32) * 32 for f in (0.002, 0.01, 0.05)
    ]
    assert warm_from == 15
    lookups = tiny.num_batches * tiny.spec.lookups_per_batch
    for c in cands:
        per_batch = []
        for ex in l1_miss_stream(iter_batch_ranges(tiny), total, cache_rows=c.ways):
            for i in range(ex.batches):
                reads, evictions, conflicts = ex.batch(i)
                per_batch.append((reads.tolist(), [*evictions.tolist(), *conflicts.tolist()]))
        for i in np.linspace(0, len(c.l2_rows) - 1, 7).astype(int):
            size = int(c.l2_rows[i])
            reads, writes = reference_l2(per_batch, size)
            assert c.ssd_read_rows[i] == reads and c.ssd_write_rows[i] == writes
            assert c.hit[i] == pytest.approx(1 - reads / lookups, abs=1e-15)
            warm = reference_l2(per_batch[:warm_from], size)
            assert c.warm_read_rows[i] == reads - warm[0]
            assert c.warm_write_rows[i] == writes - warm[1]
        assert np.all(np.diff(c.hit) >= 0)  # a larger L2 never reads the SSD more


@pytest.mark.parametrize("total", [1, 31, 1000, 26_000_000, 882_774_592])
def test_the_pasted_load_factor_gives_torchrecs_sets(total: int) -> None:
    """TorchRec's `cache_sets = max(int(cache_load_factor x rows / 32), 1)` turns the
    pasted factor back into the L1's sets."""
    for sets in {1, 2, 3, 7, max(1, total // 320), max(1, total // 32 - 1)}:
        f = paste_load_factor(sets, total, 32)
        assert max(int(f * total / 32), 1) == sets


# -- the plan, replayed -------------------------------------------------------------------

TARGETS = (0.75, 0.85, 0.9)


@pytest.fixture(scope="module")
def planned() -> tuple[dict, dict, GeneratedTrace]:
    spec = get_preset("tiny").with_overrides(batches=30, batch_size=256)
    request = PlanRequest(
        source=spec, systems=("ssd-tbe",), cache_budget_bytes=1 << 30, hit_targets=TARGETS,
        mtbf_s=6 * 3600.0, time_per_batch_s=0.2, draws=20,
    )  # fmt: skip
    document, curves = make_plan(request)
    return document, curves, GeneratedTrace(spec)


def _replayed_hit(trace: GeneratedTrace, l1_rows: int, l2_bytes: float) -> float:
    """The two-level hit of `replay run`'s ssd-tbe policy: lookups not read from the SSD."""
    system = resolve_system(
        "ssd-tbe",
        [
            f"policy.capacity_rows={l1_rows}",
            f"policy.l2_capacity_bytes={l2_bytes}",
            "checkpoint.strategy=none",
        ],
    )
    policy = replay_trace(trace, system).summary["policy"]
    return 1.0 - policy["ssd"]["read_rows"] / (policy["hits"] + policy["misses"])


def test_the_recommended_l1_and_l2_replayed_reach_the_target_and_smaller_do_not(
    planned: tuple[dict, dict, GeneratedTrace],
) -> None:
    """Acceptance (issue 45 item 2): each target's L1 + L2, replayed by the ssd-tbe policy,
    reach it within 0.005 (here exactly: the plan's hit is the replay's), and both 10%
    smaller do not. The targets cover an L2 of several sizes and an L1 alone."""
    document, _, trace = planned
    s = document["cache"]["ssd_tbe"]
    row = s["row_bytes"]
    assert row == document["state_bytes_per_row"]  # the engine's row, as the policy sizes
    l2_sizes = set()
    for target in TARGETS:
        a = s["targets"][f"{target:g}"]
        assert a is not None
        # L2's bytes are CacheLib's for its rows (items in chunks of their slab class)
        assert a["l1_bytes"] == a["l1_rows"] * row
        assert a["l2_bytes"] == cachelib.bytes_for_rows(a["l2_rows"], row)
        assert cachelib.capacity_rows(a["l2_bytes"], row) == a["l2_rows"]
        hit = _replayed_hit(trace, a["l1_rows"], a["l2_bytes"])
        assert hit >= target - 0.005
        assert hit == pytest.approx(a["hit"], abs=1e-12)
        smaller_l2 = cachelib.bytes_for_rows(int(a["l2_rows"] * 0.9), row)
        smaller = _replayed_hit(trace, int(a["l1_rows"] * 0.9), smaller_l2)
        assert smaller < target
        l2_sizes.add(a["l2_rows"])
    assert 0 in l2_sizes and len(l2_sizes) == 3  # an L1 alone, and two L2 sizes


def test_ssd_traffic_and_torchrec_settings(planned: tuple[dict, dict, GeneratedTrace]) -> None:
    """Per step: the SSD bytes are the replay's rows x row bytes (writes x the store's write
    amplification) over the batches, at the plan's step time; TorchRec's settings turn back
    into the L1's sets and hold its bytes."""
    document, _, trace = planned
    s = document["cache"]["ssd_tbe"]
    row, batches = s["row_bytes"], trace.num_batches
    a = s["targets"]["0.9"]
    system = resolve_system(
        "ssd-tbe",
        [f"policy.capacity_rows={a['l1_rows']}", f"policy.l2_capacity_bytes={a['l2_bytes']}"],
    )
    policy = replay_trace(trace, system).summary["policy"]
    ssd, l2 = policy["ssd"], policy["l2"]
    reads_from_l2 = (l2["hits"] + l2["misses"]) * row / batches
    assert a["l2_read_bytes_per_step"] == pytest.approx(reads_from_l2)
    assert a["l2_write_bytes_per_step"] == pytest.approx(l2["sets"] * row / batches)
    wa = s["ssd"]["write_amplification"]
    assert wa == system.policy.ssd_write_amplification
    assert a["ssd_read_bytes_per_step"] == pytest.approx(ssd["read_rows"] * row / batches)
    assert a["ssd_write_bytes_per_step"] == pytest.approx(ssd["write_rows"] * row * wa / batches)
    assert a["ssd_read_bytes_per_s"] == pytest.approx(a["ssd_read_bytes_per_step"] / 0.2)
    nvme = system.tier("nvme")
    busy = (
        a["ssd_read_bytes_per_s"] / nvme.read_bw_bytes_per_s
        + a["ssd_write_bytes_per_s"] / nvme.write_bw_bytes_per_s
    )
    assert a["ssd_utilization"] == pytest.approx(busy) and a["ssd_keeps_up"] == (busy <= 1)
    total = int(np.sum(trace.table_rows))
    trec = a["torchrec"]
    assert max(int(trec["cache_load_factor"] * total / 32), 1) == a["l1_sets"]
    kv = trec["key_value_params"]
    assert kv["max_l1_cache_size"] * 2**20 >= a["l1_bytes"] > (kv["max_l1_cache_size"] - 1) * 2**20
    assert kv["l2_cache_size"] * 2**30 >= a["l2_bytes"] > (kv["l2_cache_size"] - 1) * 2**30
    assert "KeyValueParams(l2_cache_size=" in trec["paste"]


def test_plan_json_and_plan_md(planned: tuple[dict, dict, GeneratedTrace], tmp_path: Path) -> None:
    """plan.json holds cache.ssd_tbe with l1_bytes and l2_bytes per target; plan.md its
    answer line, table and what to paste; a plan without an ssd-tbe system has neither."""
    document, curves, _ = planned
    write_plan(document, tmp_path / "plan", force=False, curves=curves)
    written = json.loads((tmp_path / "plan" / "plan.json").read_text())
    for target in TARGETS:
        a = written["cache"]["ssd_tbe"]["targets"][f"{target:g}"]
        assert {"l1_bytes", "l2_bytes"} <= set(a)
    md = (tmp_path / "plan" / "plan.md").read_text()
    assert "- SSD TBE (ssd-tbe): hit 75% needs L1" in md
    assert "FBGEMM's SSD TBE on ssd-tbe" in md and "KeyValueParams(l2_cache_size=" in md
    without = {**document, "cache": {k: v for k, v in document["cache"].items() if k != "ssd_tbe"}}
    assert "SSD TBE" not in plan_markdown(without)
    assert ssd_tbe_system(("hbm-lru", "hbm-tbe-lru"), []) is None  # make_plan adds none


def test_a_sampled_horizon_is_the_exact_curve_in_miniature() -> None:
    """At R = 1/4 (a spatial sample of the rows) each L1's miniature and L2 sizes x R give
    the exact curve's hits within 0.005 (criteo-kaggle, 40 batches of 512), at L2 sizes
    that are the miniature's rows / R."""
    spec = get_preset("criteo-kaggle").with_overrides(batches=40, batch_size=512)
    full = GeneratedTrace(spec)
    total = int(np.sum(full.table_rows))
    sampled = open_sampled_workload(spec, 0.25)
    kw = {"total_rows": total, "distinct_rows": 88_762, "associativity": 32}
    exact, _ = two_level_curves(full, load_factors=(0.0005, 0.001), **kw)
    mini, _ = two_level_curves(
        sampled, rate=0.25, full_lookups=float(spec.lookups), load_factors=(0.0005, 0.001), **kw
    )
    assert [c.ways for c in exact] == [c.ways for c in mini]
    for e, m in zip(exact, mini, strict=True):
        assert np.all(m.l2_rows % 4 == 0) and len(np.unique(m.l2_rows)) == len(m.l2_rows)
        assert abs(e.l1_hit - m.l1_hit) < 0.005
        at = np.searchsorted(e.l2_rows, m.l2_rows).clip(max=len(e.l2_rows) - 1)
        assert np.max(np.abs(e.hit[at] - m.hit)) < 0.005


def test_a_target_beyond_the_cold_misses_is_out_of_reach() -> None:
    """3 batches whose rows are mostly new: no L1 and L2 reach 0.99 (the first lookup of
    each row reads the SSD); the plan says so and answers the reachable target."""
    request = PlanRequest(
        source=get_preset("tiny").with_overrides(batches=3, batch_size=16),
        systems=("ssd-tbe",), cache_budget_bytes=1 << 30, hit_targets=(0.4, 0.99),
        mtbf_s=6 * 3600.0, time_per_batch_s=0.2, draws=5,
    )  # fmt: skip
    document, _ = make_plan(request)
    s = document["cache"]["ssd_tbe"]
    cold = document["distinct_rows"] / document["horizon"]["lookups"]
    assert s["targets"]["0.99"] is None
    assert max(max(c["hit"]) for c in s["candidates"]) == pytest.approx(1 - cold)
    assert any("99% is out of reach" in n for n in s["notes"])
    assert s["targets"]["0.4"]["hit"] >= 0.4
    assert "99% is out of reach" in plan_markdown(document)
