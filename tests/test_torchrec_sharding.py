"""Our sharding plans and TorchRec's `ShardingPlan`, both ways (`replay.system.torchrec_plan`):
the JSON form round-trips every type; TorchRec's own generators and planner (every
`ShardingType` it emits, `table_column_wise` and grid included) import as the shards
TorchRec would build; which plans TorchRec executes as planned (`torchrec_executable`);
`replay export torchrec-plan` and `cluster.sharding_file` with TorchRec's form; and the
bad inputs, each one line (exit 2 on the command line). The DMP run that judges the
exported plans: tests/test_torchrec_sharding_dmp.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import replay
from replay.cli import main
from replay.errors import ConfigError
from replay.system.sharding import (
    PLAN_TYPES,
    ShardingPlan,
    TableShape,
    TableSharding,
    resolve_plan,
    table_shapes,
    uniform_plan,
)
from replay.system.torchrec_plan import (
    OUR_TYPES,
    placement_of,
    plan_from_torchrec_json,
    read_sharding_file,
    sharding_from_torchrec,
    sharding_plan_from_json,
    torchrec_plan_document,
    torchrec_plan_json,
    torchrec_sharding_plan,
)

SHAPES = table_shapes(["a", "b", "c"], [10, 5, 13], 32)  # column blocks of 4 or more


def _placement(kind: str, nodes: int = 2, gpn: int = 2, shapes: Any = SHAPES) -> Any:
    plan = uniform_plan(kind, shapes, nodes=nodes, gpus_per_node=gpn)
    return resolve_plan(plan, shapes, nodes=nodes, gpus_per_node=gpn)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


# -- the JSON form ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PLAN_TYPES)
@pytest.mark.parametrize(("nodes", "gpn"), [(1, 2), (2, 2), (2, 4)])
def test_every_type_round_trips_through_the_form(kind: str, nodes: int, gpn: int) -> None:
    placement = _placement(kind, nodes, gpn)
    assert placement.plan.torchrec_executable
    form = json.loads(json.dumps(torchrec_plan_document(placement)))
    assert form["world_size"] == nodes * gpn and form["local_world_size"] == gpn
    back = plan_from_torchrec_json(form)
    again = resolve_plan(back, SHAPES, nodes=nodes, gpus_per_node=gpn)
    assert again.shards == placement.shards
    assert [e.type for e in back.tables] == [kind] * 3
    for item in form["plan"][""].values():  # TorchRec's names, its shard order
        assert OUR_TYPES[item["sharding_type"]] == kind
        if kind == "data-parallel":
            assert item["sharding_spec"] is None and item["compute_kernel"] == "dense"
            continue
        assert item["ranks"] == [
            int(s["placement"][5:].split("/")[0]) for s in item["sharding_spec"]
        ]
        if kind == "row-wise":  # every rank in rank order, empty blocks included
            assert item["ranks"] == list(range(nodes * gpn))
            assert len(item["sharding_spec"]) == nodes * gpn
    # as our document, through the Python API
    doc = sharding_from_torchrec(form, tables=SHAPES)
    assert doc["torchrec_executable"] is True and doc["world_size"] == nodes * gpn


def test_torchrec_objects_round_trip() -> None:
    """The form builds TorchRec's `ShardingPlan`, whose attributes read back to it."""
    from torchrec.distributed.types import ParameterSharding
    from torchrec.distributed.types import ShardingPlan as TorchRecPlan

    for kind in PLAN_TYPES:
        form = torchrec_plan_document(_placement(kind), module_path="sparse.ebc")
        plan = sharding_plan_from_json(form)
        assert isinstance(plan, TorchRecPlan)
        assert all(isinstance(ps, ParameterSharding) for ps in plan.plan["sparse.ebc"].values())
        back = torchrec_plan_json(plan, world_size=4)  # a plan object does not say it
        assert back["plan"] == form["plan"]
        assert back["local_world_size"] == 2 or kind not in ("table-row-wise", "grid")
        got = sharding_from_torchrec(plan, tables=SHAPES, world_size=4, local_world_size=2)
        assert got == sharding_from_torchrec(form, tables=SHAPES) | {"source": got["source"]}


def _tables_of_torchrec(shapes: list[TableShape]) -> Any:
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    configs = [
        EmbeddingBagConfig(name=s.name, embedding_dim=s.dim, num_embeddings=s.rows,
                           feature_names=[s.name])
        for s in shapes
    ]  # fmt: skip
    return EmbeddingBagCollection(tables=configs, device=torch.device("meta"))


def _torchrec_shards(plan: Any) -> set[tuple[str, int, int, int, int, int]]:
    """(table, rank, row start, row stop, column start, column stop) of every shard."""
    out = set()
    for params in plan.plan.values():
        for name, ps in params.items():
            if ps.sharding_spec is None:  # data-parallel: the whole table on every rank
                continue
            for s in ps.sharding_spec.shards:
                (r0, c0), (nr, nc) = s.shard_offsets, s.shard_sizes
                out.add((name, s.placement.rank(), r0, r0 + nr, c0, c0 + nc))
    return out


def _our_shards(doc: dict[str, Any], shapes: list[TableShape], world: int, gpn: int) -> set:
    placement = resolve_plan(
        ShardingPlan(tuple(TableSharding(**{k: (tuple(map(tuple, v)) if k == "shards" else
                                                 tuple(v) if k == "ranks" else v)
                                            for k, v in t.items()})
                           for t in doc["tables"])),
        shapes, nodes=world // gpn, gpus_per_node=gpn,
    )  # fmt: skip
    return {
        (shapes[s.table].name, s.rank, s.row_start, s.row_stop, s.col_start, s.col_stop)
        for s in placement.shards
        if placement.entry(s.table).type != "data-parallel"
    }


def test_torchrecs_generators_import_as_the_shards_torchrec_builds() -> None:
    """TorchRec's `sharding_plan` generators for every type they make (and a
    `table_column_wise` ParameterSharding as its planner makes them), on 2 nodes of 2:
    our plan of their plan holds exactly their shards."""
    from torchrec.distributed import sharding_plan as sp
    from torchrec.distributed.types import (
        EnumerableShardingSpec,
        ParameterSharding,
        ShardMetadata,
    )
    from torchrec.distributed.types import (
        ShardingPlan as TorchRecPlan,
    )

    # grid_shard cuts the columns in blocks of TorchRec's MIN_CW_DIM (128): two of 256
    names = ["tw", "rw", "cw", "cwu", "twrw", "grid", "dp", "twcw"]
    dims = [16] * 5 + [256] + [16] * 2
    shapes = list(table_shapes(names, [11, 5, 9, 7, 13, 10, 3, 8], dims))
    ebc = _tables_of_torchrec(shapes[:-1])
    module = sp.construct_module_sharding_plan(
        ebc,
        {
            "tw": sp.table_wise(rank=3),
            "rw": sp.row_wise(),
            "cw": sp.column_wise(ranks=[2, 0]),
            "cwu": sp.column_wise(size_per_rank=[4, 12]),
            "twrw": sp.table_row_wise(host_index=1),
            "grid": sp.grid_shard(host_indexes=[1, 0]),
            "dp": sp.data_parallel(),
        },
        local_size=2, world_size=4, device_type="cuda",
    )  # fmt: skip
    module["twcw"] = ParameterSharding(
        sharding_type="table_column_wise", compute_kernel="fused", ranks=[2, 3],
        sharding_spec=EnumerableShardingSpec([
            ShardMetadata([0, 0], [8, 8], "rank:2/cuda:0"),
            ShardMetadata([0, 8], [8, 8], "rank:3/cuda:1"),
        ]),
    )  # fmt: skip
    plan = TorchRecPlan({"": module})
    doc = sharding_from_torchrec(plan, tables=shapes)
    assert {t["table"]: t["type"] for t in doc["tables"]} == {
        "tw": "table-wise", "rw": "row-wise", "cw": "column-wise", "cwu": "column-wise",
        "twrw": "table-row-wise", "grid": "grid", "dp": "data-parallel",
        "twcw": "table-column-wise",
    }  # fmt: skip
    assert doc["torchrec_executable"] is True and doc["gpus_per_node"] == 2
    assert _our_shards(doc, shapes, 4, 2) == _torchrec_shards(plan)


def test_torchrecs_planner_plans_import_and_are_executable() -> None:
    """TorchRec's planner (every sharding type it proposes, one table each, 2 nodes of 2
    GPUs) makes a plan we import whole, label executable, and whose shards are its."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )

    types = ["row_wise", "table_row_wise", "data_parallel", "column_wise", "table_wise",
             "table_column_wise", "grid_shard"]  # fmt: skip
    rows = [1000, 50_000, 3, 200_000, 70, 5000, 9000]
    shapes = [TableShape(f"t{i}", r, 64) for i, r in enumerate(rows)]
    constraints = {f"t{i}": ParameterConstraints(sharding_types=[k]) for i, k in enumerate(types)}
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )

    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=4, local_world_size=2, compute_device="cuda"),
        constraints=constraints,
        # the default heuristic warns that it misjudges a dry run's dense tensors
        storage_reservation=FixedPercentageStorageReservation(0.15),
    )
    plan = planner.plan(_tables_of_torchrec(shapes), [EmbeddingBagCollectionSharder()])
    doc = sharding_from_torchrec(plan, tables=shapes)
    assert [OUR_TYPES[k] for k in types] == [t["type"] for t in doc["tables"]]
    assert doc["torchrec_executable"] is True
    assert _our_shards(doc, shapes, 4, 2) == _torchrec_shards(plan)


def test_the_reader_ignores_what_torchrec_adds() -> None:
    form = torchrec_plan_document(_placement("row-wise"))
    form["torchrec_version"] = "9.9"
    for item in form["plan"][""].values():
        item.update(cache_params={"load_factor": 0.2, "algorithm": "LRU", "stats": None},
                    enforce_hbm=True, future_field=[1, 2], output_dtype="FP32")  # fmt: skip
        for shard in item["sharding_spec"]:
            shard["bucket_id_offset"] = 0
    again = resolve_plan(plan_from_torchrec_json(form), SHAPES, nodes=2, gpus_per_node=2)
    assert again.shards == _placement("row-wise").shards


# -- what TorchRec executes ---------------------------------------------------------------

EXECUTABLE = [
    (TableSharding("a", "row-wise", (0, 1, 2, 3)), None),
    (TableSharding("a", "row-wise", (0, 1, 2, 3), ((0, 3), (3, 6), (6, 9), (9, 10))), None),
    (TableSharding("a", "row-wise", (1, 0, 2, 3)), "row-wise over ranks 1, 0, 2, 3"),
    (TableSharding("a", "row-wise", (0, 1, 2)), "row-wise over ranks 0, 1, 2"),
    (TableSharding("a", "row-wise", (0, 1, 2, 3), ((0, 1), (1, 2), (2, 3), (3, 10))), "uneven"),
    (TableSharding("a", "table-row-wise", (2, 3)), None),
    (TableSharding("a", "table-row-wise", (3, 2)), "table-row-wise over ranks 3, 2"),
    (TableSharding("a", "table-row-wise", (2, 3), ((0, 1), (1, 10))), "uneven"),
    (TableSharding("a", "table-wise", (3,)), None),
    (TableSharding("a", "column-wise", (3, 3, 0), ((0, 4), (4, 8), (8, 16))), None),
    (TableSharding("a", "column-wise", (3, 0), ((0, 2), (2, 16))), "2 columns"),
    (TableSharding("a", "table-column-wise", (1, 0)), None),
    (TableSharding("a", "data-parallel", (0, 1, 2, 3)), None),
    (TableSharding("a", "grid", (2, 3, 0, 1)), None),
    (TableSharding("a", "grid", (2, 3, 1, 0)), "grid over ranks 1, 0"),
]


@pytest.mark.parametrize(("entry", "reason"), EXECUTABLE)
def test_torchrec_executable(entry: TableSharding, reason: str | None) -> None:
    placement = resolve_plan(
        ShardingPlan((entry,)), table_shapes(["a"], [10], 16), nodes=2, gpus_per_node=2
    )
    plan = placement.plan
    assert plan.torchrec_executable is (reason is None)
    if reason is None:
        assert "torchrec_executable_reason" not in plan.to_json()
        torchrec_plan_document(placement)
        return
    assert (
        reason in plan.torchrec_executable_reason and "TorchRec" in plan.torchrec_executable_reason
    )
    with pytest.raises(ConfigError) as exc:
        torchrec_plan_document(placement)
    assert plan.torchrec_executable_reason in _one_line(exc)


def test_the_uneven_sharder_is_labelled_and_auto_is_executable() -> None:
    import numpy as np

    from replay.engine.sharder import TableLoad, auto_shard
    from replay.workload.row_mass import RowMass

    hot = np.zeros(1000, dtype=np.int64)
    hot[[3, 500, 999]] = [900, 50, 50]
    loads = [TableLoad(f"t{i}", 1000, 16, 1000.0, mass=RowMass.from_lookups(
        np.repeat(np.arange(1000), hot + 1), 1000)) for i in range(6)]  # fmt: skip
    kw: dict[str, Any] = {"nodes": 2, "gpus_per_node": 2, "gpu_memory_bytes": 1 << 30}
    uneven = auto_shard(loads, **kw)
    assert uneven.placement.plan.torchrec_executable is False
    even = auto_shard(loads, torchrec_executable=True, **kw)
    assert even.placement.plan.torchrec_executable is True
    assert "TorchRec-executable" in even.plan.source
    assert even.max_over_mean >= uneven.max_over_mean * (1 - 1e-9)  # uneven blocks help


# -- the command line and the files -------------------------------------------------------

TINY = ["--workload", "tiny", "--batches", "4"]
CLUSTER = ["--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=2"]


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("replay: error: "), err
    return err


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("auto") / "run"
    assert main(["run", *TINY, "-s", "hbm-lru", *CLUSTER, "-o", str(run)]) == 0
    return run


def test_export_and_run_back_with_torchrecs_form(
    tmp_path: Path, auto_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """auto's plan exports; the form, given back as cluster.sharding_file, replays the
    same ranks; `replay.torchrec_sharding_plan` loads the folder and the form."""
    out = tmp_path / "plan.json"
    assert main(["export", "torchrec-plan", str(auto_run), "-o", str(out),
                 "--module", "sparse_arch.embedding_bag_collection"]) == 0  # fmt: skip
    assert "wrote" in capsys.readouterr().out
    form = json.loads(out.read_text())
    assert list(form["plan"]) == ["sparse_arch.embedding_bag_collection"]
    assert read_sharding_file(out).world_size == 4
    again = tmp_path / "again"
    sets = ["--set", f"cluster.sharding_file={out}"]
    assert main(["run", *TINY, "-s", "hbm-lru", *CLUSTER, *sets, "-o", str(again)]) == 0
    a = json.loads((auto_run / "summary.json").read_text())
    b = json.loads((again / "summary.json").read_text())
    assert a["ranks"] == b["ranks"]
    assert (
        json.loads((again / "sharding.json").read_text())["tables"]
        == (json.loads((auto_run / "sharding.json").read_text())["tables"])
    )
    # the export refuses to replace a file, or to write over its input
    err = _refused(capsys, ["export", "torchrec-plan", str(auto_run), "-o", str(out)])
    assert "already exists" in err
    sharding = auto_run / "sharding.json"
    err = _refused(capsys, ["export", "torchrec-plan", str(sharding), "-o", str(sharding)])
    assert "is the input" in err
    from torchrec.distributed.types import ShardingPlan as TorchRecPlan

    assert isinstance(replay.torchrec_sharding_plan(auto_run, world_size=4), TorchRecPlan)
    assert isinstance(replay.torchrec_sharding_plan(out), TorchRecPlan)
    assert replay.sharding_from_torchrec(out, tables=["user", "item", "category", "hour"])


def test_bad_input_is_one_line(
    tmp_path: Path, auto_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    form = torchrec_plan_document(placement_of(auto_run))
    # a TorchRec plan for a table the workload lacks
    lacks = json.loads(json.dumps(form))
    lacks["plan"][""]["clicks"] = lacks["plan"][""]["hour"]
    path = tmp_path / "lacks.json"
    path.write_text(json.dumps(lacks))
    sets = ["--set", f"cluster.sharding_file={path}"]
    err = _refused(
        capsys, ["run", *TINY, "-s", "hbm-lru", *CLUSTER, *sets, "-o", str(tmp_path / "r1")]
    )
    assert "'clicks' is not in the workload" in err
    with pytest.raises(ConfigError) as exc:
        sharding_from_torchrec(lacks, tables=["user", "item", "category", "hour"])
    assert "'clicks' is not in the workload" in _one_line(exc)
    # a world size that disagrees: the cluster's, and the caller's
    path = tmp_path / "form.json"
    path.write_text(json.dumps(form))
    sets = ["--set", "cluster.nodes=4", "--set", "cluster.gpus_per_node=2",
            "--set", f"cluster.sharding_file={path}"]  # fmt: skip
    err = _refused(capsys, ["run", *TINY, "-s", "hbm-lru", *sets, "-o", str(tmp_path / "r2")])
    assert "is for 4 GPUs" in err and "has 8" in err
    for call in (
        lambda: sharding_from_torchrec(form, world_size=8),
        lambda: torchrec_sharding_plan(auto_run, world_size=8),
        lambda: torchrec_sharding_plan(path, world_size=2),
    ):
        with pytest.raises(ConfigError) as exc:
            call()
        assert "4 GPUs" in _one_line(exc)
    # an export of a replay-only plan
    doc = json.loads((auto_run / "sharding.json").read_text())
    doc["tables"][1] = {**doc["tables"][1], "type": "row-wise", "ranks": [0, 1, 2, 3],
                        "shards": [[0, 1], [1, 2], [2, 3], [3, 5000]]}  # fmt: skip
    uneven = tmp_path / "uneven.json"
    uneven.write_text(json.dumps(doc))
    err = _refused(capsys, ["export", "torchrec-plan", str(uneven), "-o", str(tmp_path / "x")])
    assert "only replay can replay this plan" in err and "uneven blocks" in err
    assert not (tmp_path / "x").exists()
    # a folder without sharding.json, a plan without shapes, a form TorchRec cannot mean
    err = _refused(capsys, ["export", "torchrec-plan", str(tmp_path), "-o", str(tmp_path / "y")])
    assert "no sharding.json" in err
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"tables": [{"table": "user", "type": "table-wise", "ranks": [0]}]}))
    err = _refused(capsys, ["export", "torchrec-plan", str(bare), "-o", str(tmp_path / "z")])
    assert "no rows and dim" in err
    for change, said in (
        (lambda i: i.update(sharding_type="diagonal"), "unknown sharding_type 'diagonal'"),
        (lambda i: i["sharding_spec"][0].update(placement="gpu0"), "placement must be"),
        (lambda i: i["sharding_spec"][0].update(shard_sizes=[1]), "shard_sizes must be"),
    ):
        bad = json.loads(json.dumps(form))
        change(bad["plan"][""]["item"])
        with pytest.raises(ConfigError) as exc:
            plan_from_torchrec_json(bad, "plan.json")
        assert said in _one_line(exc)


def test_without_torchrec_the_builder_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchrec.distributed", None)
    with pytest.raises(ConfigError) as exc:
        torchrec_sharding_plan(torchrec_plan_document(_placement("row-wise")))
    assert "pip install" in _one_line(exc)
