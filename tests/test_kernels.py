"""Each table's kernel on a cluster (`replay.engine.kernels`): the choice, the plan's
kernels in sharding.json and TorchRec's form, the cluster replay's traffic per kernel
(mixed placements, ssd-tbe on a cluster) and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.cli import main
from replay.engine.kernels import (
    FITS_LINE,
    HBM_FILL,
    TINY_ROWS,
    RankSplit,
    che_hit,
    choose_kernels,
    rank_splits,
    table_kernel,
)
from replay.engine.sharder import TableLoad
from replay.engine.systems import resolve_system
from replay.system.sharding import plan_from_json, resolve_plan, table_shapes
from replay.system.torchrec_plan import plan_from_torchrec_json, torchrec_plan_document
from replay.workload.row_mass import RowMass

TINY = ["--workload", "tiny", "--batches", "6"]
# no dense model: the tests' GPUs of a few hundred KB give the tables what the batch leaves
TWO = ["--set", "cluster.gpus_per_node=2", "--set", "model.dense_params=0"]
# tiny: user 20,000 rows, item 5,000, category 300, hour 24; dim 8 (32 B a row, SGD)
ROW = 32


def _run(tmp: Path, name: str, *extra: str, system: str = "hbm-lru") -> dict[str, Any]:
    out = tmp / name
    assert main(["run", *TINY, "-s", system, *TWO, *extra, "-o", str(out)]) == 0
    return {
        "summary": json.loads((out / "summary.json").read_text()),
        "sharding": json.loads((out / "sharding.json").read_text()),
    }


def _refused(tmp: Path, capsys: pytest.CaptureFixture[str], *extra: str, system: str = "hbm-lru"):
    out = tmp / "refused"
    assert main(["run", *TINY, "-s", system, *TWO, *extra, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("replay: error:"), err
    assert not out.exists()
    return err


def _plan_file(tmp: Path, tables: list[dict[str, Any]]) -> str:
    path = tmp / "plan.json"
    path.write_text(json.dumps({"tables": tables}))
    return f"cluster.sharding_file={path}"


def _whole(kernels: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for i, name in enumerate(("user", "item", "category", "hour")):
        entry: dict[str, Any] = {"table": name, "type": "table-wise", "ranks": [i % 2]}
        k = kernels.get(name)
        if isinstance(k, tuple):
            entry["kernel"], entry["cache_load_factor"] = k
        elif k is not None:
            entry["kernel"] = k
        out.append(entry)
    return out


# -- the choice ---------------------------------------------------------------------------


def test_tables_that_fit_stay_in_hbm_and_the_run_is_as_before(tmp_path: Path) -> None:
    got = _run(tmp_path, "fits")
    assert {t["kernel"] for t in got["sharding"]["tables"]} == {"hbm"}
    assert not any("cache_load_factor" in t for t in got["sharding"]["tables"])
    basis = got["summary"]["cluster"]["sharding"]
    assert "kernels" not in basis  # every table in HBM: the placement as before kernels
    # the system's cache replays every row (policy.capacity_* per GPU), as before
    s = got["summary"]
    assert s["policy"]["hits"] + s["policy"]["misses"] == s["lookups"]


def test_tables_over_the_gpus_memory_leave_hbm(tmp_path: Path) -> None:
    # 25,324 rows x 32 B = 810 KB over 2 GPUs of 300 KB: tables must leave HBM
    got = _run(tmp_path, "offload", "--set", "cluster.gpu_memory_bytes=3e5")
    tables = {t["table"]: t for t in got["sharding"]["tables"]}
    assert tables["hour"]["kernel"] == tables["category"]["kernel"] == "hbm"  # tiny
    left = [t for t in tables.values() if t["kernel"] != "hbm"]
    assert left and all(t["kernel"] == "uvm-caching" for t in left)
    assert all(0 < t["cache_load_factor"] < 1 for t in left)
    assert "leave HBM" in got["summary"]["cluster"]["sharding"]["kernels"]
    for r in got["summary"]["ranks"]:
        assert r["hits"] + r["misses"] == r["lookups"]


def _loads() -> list[TableLoad]:
    return [
        TableLoad("tiny", 50, 16, lookups=100.0, row_bytes=64),
        TableLoad("hot", 100_000, 16, lookups=5000.0, row_bytes=64),
        TableLoad("cold", 1_000_000, 16, lookups=100.0, row_bytes=64),
    ]


def test_choose_kernels_spends_hbm_where_lookups_are() -> None:
    system = resolve_system("hbm-lru", ["cluster.gpus_per_node=2", "cluster.gpu_memory_bytes=25e6"])
    choice = choose_kernels(system, _loads(), nodes=1, gpus_per_node=2)
    kinds = {t.table: t.kernel for t in choice.tables}
    assert kinds["tiny"] == "hbm" and kinds["cold"] == "uvm-caching"
    assert kinds["hot"] == "hbm"  # the most lookups per byte: whole in HBM
    assert sum(t.hbm_bytes for t in choice.tables) <= HBM_FILL * 2 * 25e6
    assert "1 of 3 tables leave HBM" in choice.line
    roomy = resolve_system("hbm-lru", ["cluster.gpus_per_node=2"])
    fits = choose_kernels(roomy, _loads(), nodes=1, gpus_per_node=2)
    assert fits.all_hbm and fits.line.startswith(FITS_LINE)


def test_a_table_whose_next_step_buys_nothing_still_comes_home() -> None:
    """Under ssd-tbe a 2,630-row table's caches at load factors 0.01 and 0.02 are the same
    32-way set (16,896 B, hit 0.0122): the next step gains nothing. The greedy takes the
    best jump from where a table is (here: the whole table), not only the next step; the
    step-by-step greedy left this table, the hottest per byte, at 0.01 with 32 MiB of
    misses a batch over PCIe."""
    small = TableLoad("small", 2630, 128, lookups=65536.0)
    big = TableLoad("big", 5_000_000, 128, lookups=1000.0)
    system = resolve_system("ssd-tbe", ["cluster.gpus_per_node=2", "cluster.gpu_memory_bytes=5e8"])
    first, second = (table_kernel(small, "ssd", c, system, 2) for c in (0.01, 0.02))
    assert (first.hbm_bytes, first.hit) == (second.hbm_bytes, second.hit)
    choice = choose_kernels(system, [small, big], nodes=1, gpus_per_node=2)
    kinds = {t.table: (t.kernel, t.cache_load_factor) for t in choice.tables}
    assert kinds == {"small": ("hbm", None), "big": ("ssd", 0.3)}
    assert "1 of 2 tables leave HBM" in choice.line


def test_one_kernel_for_every_table_and_a_fixed_load_factor() -> None:
    system = resolve_system(
        "hbm-lru",
        ["cluster.gpus_per_node=2", "cluster.kernel=uvm-caching", "cluster.cache_load_factor=0.3"],
    )
    choice = choose_kernels(system, _loads(), nodes=1, gpus_per_node=2)
    assert {t.kernel for t in choice.tables} == {"uvm-caching"}
    assert {t.cache_load_factor for t in choice.tables} == {0.3}
    assert all(t.host_bytes == t.bytes for t in choice.tables)


def test_che_hit_uniform_and_skewed() -> None:
    load = TableLoad("t", 1000, 8, lookups=1.0)
    assert che_hit(load, 250) == pytest.approx(0.25)
    assert che_hit(load, 0) == 0.0 and che_hit(load, 2000) == 1.0
    skew = TableLoad(
        "t", 1000, 8, lookups=1.0, mass=RowMass(1000, np.array([0]), np.array([900.0]), np.ones(10))
    )
    # the hot row (90% of the lookups) is in any cache of a few rows
    assert che_hit(skew, 5) > 0.9 > che_hit(load, 5)
    hits = [che_hit(skew, c) for c in (1, 10, 100, 500, 999)]
    assert hits == sorted(hits)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    codes=st.lists(st.integers(0, 2), min_size=6, max_size=6),
    nkeys=st.integers(0, 60),
    seed=st.integers(0, 1000),
)
def test_rank_split_matches_a_reference(
    rows: list[int], codes: list[int], nkeys: int, seed: int
) -> None:
    codes = codes[: len(rows)]
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    cstarts = np.concatenate(
        [[0], np.cumsum([r if c == 2 else 0 for r, c in zip(rows, codes, strict=True)])[:-1]]
    )
    total = int(sum(rows))
    if total == 0:
        return
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, total, nkeys).astype(np.int64)
    cuts = np.sort(rng.integers(0, nkeys + 1, 2))
    bounds = np.array([0, cuts[0], cuts[1], nkeys], dtype=np.int64)
    split = RankSplit(starts, np.array(codes, dtype=np.int8), cstarts.astype(np.int64), [], 0)
    got, gb, hbm, uvm = split.split(keys, bounds)
    want, wb, wh, wu = [], [0], [], []
    for b in range(3):
        h = u = 0
        for k in keys[bounds[b] : bounds[b + 1]]:
            s = max(i for i, a in enumerate(starts) if a <= k and rows[i] > 0 and k < a + rows[i])
            if codes[s] == 0:
                h += 1
            elif codes[s] == 1:
                u += 1
            else:
                want.append(int(k - starts[s] + cstarts[s]))
        wb.append(len(want))
        wh.append(h)
        wu.append(u)
    assert got.tolist() == want and gb.tolist() == wb
    assert hbm.tolist() == wh and uvm.tolist() == wu


# -- the replay's traffic per kernel --------------------------------------------------------


def test_uvm_tables_read_every_lookup_over_pcie(tmp_path: Path) -> None:
    got = _run(tmp_path, "uvm", "--set", "cluster.kernel=uvm")
    s = got["summary"]
    assert s["policy"]["hits"] == 0 and s["policy"]["misses"] == s["lookups"]
    assert s["links"]["pcie"]["h2d_bytes"] == s["lookups"] * ROW
    assert (
        sum(r["pcie_bytes"] for r in s["ranks"])
        == s["links"]["pcie"]["h2d_bytes"] + s["links"]["pcie"]["d2h_bytes"]
    )
    assert {t["kernel"] for t in got["sharding"]["tables"]} == {"uvm"}


def test_a_mixed_plan_serves_each_table_from_its_tier(tmp_path: Path) -> None:
    plan = _plan_file(
        tmp_path, _whole({"user": "uvm", "item": ("uvm-caching", 0.5), "category": "hbm"})
    )
    got = _run(tmp_path, "mixed", "--set", plan)
    s = got["summary"]
    ranks = {r["rank"]: r for r in s["ranks"]}
    for r in ranks.values():
        assert r["hits"] + r["misses"] == r["lookups"]
    # rank 0 holds user (uvm: every lookup a miss over PCIe) and category (hbm: hits)
    assert ranks[0]["misses"] > 0 and ranks[0]["pcie_bytes"] > 0
    tables = {t["table"]: t for t in got["sharding"]["tables"]}
    assert tables["item"]["cache_load_factor"] == 0.5 and tables["hour"]["kernel"] == "hbm"
    # the same file read back plans the same
    again = _run(tmp_path, "again", "--set", plan)
    assert again["summary"]["ranks"] == s["ranks"]


def test_ssd_tbe_runs_on_a_cluster_and_prices_the_drives(tmp_path: Path) -> None:
    l2 = "policy.l2_capacity_bytes=1e5"
    fits = _run(tmp_path, "fits", "--set", l2, system="ssd-tbe")["summary"]
    # every table fits HBM: whole there, no lookup reaches L2 or the drives
    assert fits["policy"]["misses"] == 0 and fits["tiers"]["nvme"]["read_bytes"] == 0
    got = _run(tmp_path, "ssd", "--set", l2, "--set", "cluster.kernel=ssd", system="ssd-tbe")
    s = got["summary"]
    drives = sum(r["drive_read_bytes"] for r in s["ranks"])
    assert drives == s["tiers"]["nvme"]["read_bytes"] > 0
    offload = _run(
        tmp_path, "ssd-off", "--set", "policy.l2_capacity_bytes=1e5",
        "--set", "cluster.gpu_memory_bytes=3e5", system="ssd-tbe",
    )  # fmt: skip
    kinds = {t["kernel"] for t in offload["sharding"]["tables"]}
    assert kinds == {"hbm", "ssd"}


# -- TorchRec's form ----------------------------------------------------------------------------


def test_kernels_round_trip_through_torchrecs_plan() -> None:
    shapes = table_shapes(["a", "b", "c", "d"], [100, 200, 300, 400], 8)
    plan = plan_from_json(
        {"tables": [
            {"table": "a", "type": "table-wise", "ranks": [0], "kernel": "hbm"},
            {"table": "b", "type": "row-wise", "ranks": [0, 1], "kernel": "uvm-caching",
             "cache_load_factor": 0.25},
            {"table": "c", "type": "table-wise", "ranks": [1], "kernel": "uvm"},
            {"table": "d", "type": "table-wise", "ranks": [1], "kernel": "ssd",
             "cache_load_factor": 0.1},
        ]}
    )  # fmt: skip
    placement = resolve_plan(plan, shapes, nodes=1, gpus_per_node=2)
    doc = torchrec_plan_document(placement)
    items = doc["plan"][next(iter(doc["plan"]))]
    assert [items[n]["compute_kernel"] for n in "abcd"] == [
        "fused", "fused_uvm_caching", "fused_uvm", "key_value",
    ]  # fmt: skip
    assert items["b"]["cache_params"] == {"load_factor": 0.25}
    back = plan_from_torchrec_json(doc)
    assert [(e.kernel, e.cache_load_factor) for e in back.tables] == [
        ("hbm", None), ("uvm-caching", 0.25), ("uvm", None), ("ssd", 0.1),
    ]  # fmt: skip
    splits = rank_splits(placement)
    assert splits is not None and splits[0].cache_rows == 25 and splits[1].cache_rows == 25 + 40


# -- bad input ------------------------------------------------------------------------------------


def test_an_unknown_kernel_in_a_sharding_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(tmp_path, capsys, "--set", _plan_file(tmp_path, _whole({"user": "gpu"})))
    assert "unknown kernel 'gpu'" in err


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--set", "cluster.kernel=foo"], "cluster.kernel"),
        (["--set", "cluster.cache_load_factor=1"], "cluster.cache_load_factor"),
        (["--set", "cluster.kernel=ssd"], "ssd-tbe"),
    ],
)
def test_bad_kernel_settings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    assert words in _refused(tmp_path, capsys, *extra)


def test_a_load_factor_on_an_hbm_table_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(tmp_path, capsys, "--set", _plan_file(tmp_path, _whole({"user": ("hbm", 0.5)})))
    assert "cache_load_factor" in err


def test_tables_over_every_tier_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 GPUs of 3 kB: the batch's ids and buffers alone (37 KB) take more
    err = _refused(tmp_path, capsys, "--set", "cluster.gpu_memory_bytes=3e3")
    assert "leave nothing for the tables" in err and "besides them" in err
    # 2 GPUs of 45 kB: about 8 kB each for the tables, and even the smallest caches and
    # the tables under 1,000 rows (22 kB) do not fit
    err = _refused(tmp_path, capsys, "--set", "cluster.gpu_memory_bytes=45e3")
    assert "smallest caches" in err and "table budgets" in err
    assert TINY_ROWS == 1000
