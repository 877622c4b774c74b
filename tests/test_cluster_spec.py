"""The `[cluster]` section of system specs (issue 41, item 1): parsed from TOML and from
`--set`, its presets with their published numbers, one-line errors (exit 2 through the
CLI), a system without it serialised exactly as before, and the engine's refusal until
the cluster replay exists."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from replay.cli import main
from replay.engine.systems import resolve_system, system_from_dict
from replay.errors import ConfigError
from replay.system.presets import (
    SYSTEM_PRESETS,
    cluster_preset_data,
    cluster_preset_summary,
    cluster_presets,
)
from replay.system.spec import (
    MAX_GPUS,
    SSD_TBE_KNOBS,
    ClusterSpec,
    SystemSpec,
    apply_overrides,
    build_cluster,
    build_system,
    load_system_data,
)


def _system(*sets: str, base: str = "hbm-lru") -> SystemSpec:
    data, origin = load_system_data(base)
    return build_system(apply_overrides(data, list(sets)), f"{origin} with --set")


def _old_to_dict(spec: SystemSpec) -> dict[str, Any]:
    """`SystemSpec.to_dict` as it was before the `cluster` field existed."""
    data = dataclasses.asdict(spec)
    del data["cluster"]
    del data["checkpoint"]["replicas"], data["checkpoint"]["store"]  # later fields (issue 42)
    del data["compute"]["pipeline"], data["compute"]["activations_bytes"]  # later (issue 53)
    if data["policy"]["name"] != "ssd-tbe":  # later fields, serialised for ssd-tbe only
        for knob in SSD_TBE_KNOBS:
            del data["policy"][knob]
    data["tiers"] = {t.pop("name"): t for t in data["tiers"]}
    data["links"] = {lk.pop("name"): lk for lk in data["links"]}
    return data


# -- parsing ---------------------------------------------------------------------------


def test_a_system_without_cluster_is_one_gpu() -> None:
    assert _system().cluster is None
    assert all(resolve_system(name).cluster is None for name in SYSTEM_PRESETS)


def test_set_makes_any_system_a_cluster_from_the_defaults() -> None:
    spec = _system("cluster.nodes=8", "cluster.gpus_per_node=4")
    c = spec.cluster
    assert c is not None
    assert (c.nodes, c.gpus_per_node, c.world_size) == (8, 4, 32)
    rest = {f.name for f in dataclasses.fields(ClusterSpec)} - {"nodes", "gpus_per_node"}
    assert {k: getattr(c, k) for k in rest} == {k: getattr(ClusterSpec(), k) for k in rest}
    assert c.sharding == "auto" and c.sharding_file == ""
    # the rest of the system is untouched
    assert dataclasses.replace(spec, cluster=None) == _system()


def test_set_takes_units_and_every_sharding() -> None:
    c = _system(
        "cluster.nic_bw_bytes_per_s=25GB/s",
        "cluster.gpu_memory_bytes=40GiB",
        "cluster.inter_node_latency_s=10ms",
        "cluster.sharding=table-row-wise",
    ).cluster
    assert c is not None
    assert c.nic_bw_bytes_per_s == 25e9
    assert c.gpu_memory_bytes == 40 * 2**30
    assert c.inter_node_latency_s == pytest.approx(0.01)
    for sharding in ("table-wise", "row-wise", "column-wise", "data-parallel", "auto"):
        got = _system(f"cluster.sharding={sharding}").cluster
        assert got is not None and got.sharding == sharding
    plan = _system('cluster.sharding_file="plan.json"').cluster
    assert plan is not None and plan.sharding_file == "plan.json"


def test_a_toml_cluster_with_a_preset_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'extends = "fastpersist"\n'
        "[cluster]\n"
        'preset = "dgx-2"\n'
        "nodes = 8\n"
        'sharding = "row-wise"\n'
        "drives_per_node = 16  # the DGX-2's 60 TB option\n"
    )
    data, origin = load_system_data(path)
    spec = build_system(data, origin)
    c = spec.cluster
    assert c is not None
    assert (c.preset, c.nodes, c.gpus_per_node, c.world_size) == ("dgx-2", 8, 16, 128)
    assert (c.sharding, c.drives_per_node, c.gpu_memory_bytes) == ("row-wise", 16, 32e9)
    assert spec.checkpoint.strategy == "fastpersist"
    # a cluster's dict (config.json's "cluster") turns back into the same cluster
    assert build_cluster(json.loads(json.dumps(spec.to_dict()))["cluster"]) == c


def test_set_cluster_preset_on_a_system_preset() -> None:
    c = _system("cluster.preset=pcie-8gpu", "cluster.nodes=2").cluster
    assert c is not None
    assert (c.preset, c.nodes, c.intra_node_fabric, c.intra_node_bw_bytes_per_s) == (
        "pcie-8gpu",
        2,
        "pcie",
        32e9,
    )


# -- presets ---------------------------------------------------------------------------

PUBLISHED = {
    # gpus, HBM per GPU, fabric, per-GPU fabric bw each way, NICs x bw, drives
    "dgx-h100": (8, 80e9, "nvlink4", 450e9, 8, 50e9, 8),
    "dgx-2": (16, 32e9, "nvswitch", 150e9, 8, 12.5e9, 8),
    "pcie-8gpu": (8, 80e9, "pcie", 32e9, 2, 25e9, 4),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_cluster_presets_hold_their_published_numbers(name: str) -> None:
    c = _system(f"cluster.preset={name}").cluster
    assert c is not None
    got = (
        c.gpus_per_node,
        c.gpu_memory_bytes,
        c.intra_node_fabric,
        c.intra_node_bw_bytes_per_s,
        c.nics_per_node,
        c.nic_bw_bytes_per_s,
        c.drives_per_node,
    )
    assert got == PUBLISHED[name]
    assert c.nodes == 1 and c.preset == name
    assert "datasheet" in c.source  # each preset cites where its numbers come from
    assert c.drive_write_bw_bytes_per_s > 0 and c.drive_read_bw_bytes_per_s > 0


def test_the_presets_are_listed_and_the_defaults_are_dgx_h100() -> None:
    assert set(cluster_presets()) == set(PUBLISHED)
    assert {row["name"] for row in cluster_preset_summary()} == set(PUBLISHED)
    assert all(row["source"] and row["description"] for row in cluster_preset_summary())
    dgx = ClusterSpec(**{k: v for k, v in cluster_preset_data("dgx-h100").items()})
    assert dataclasses.replace(dgx, source="") == ClusterSpec()
    # a cluster preset is not a system preset (replay presets resolves every system)
    assert not set(PUBLISHED) & set(SYSTEM_PRESETS)


def test_the_presets_file_cites_a_source_or_an_assumption_on_every_number() -> None:
    text = (Path(__file__).parent.parent / "replay/system/clusters.toml").read_text()
    for line in text.splitlines():
        key = line.split("=")[0].strip()
        if "=" in line and not line.startswith("#") and key not in ("description", "source"):
            assert "#" in line, f"no source for: {line}"


# -- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["cluster.gpus_per_node=0"], r"cluster\.gpus_per_node: 0 is out of range"),
        (["cluster.nodes=0"], r"cluster\.nodes: 0 is out of range"),
        (["cluster.sharding=diagonal"], r"cluster\.sharding: 'diagonal' is not one of"),
        (["cluster.nic_bw_bytes_per_s=-1"], r"cluster\.nic_bw_bytes_per_s: -1.0 is out of"),
        (["cluster.intra_node_bw_bytes_per_s=-5e9"], r"intra_node_bw_bytes_per_s: .* out of"),
        (["cluster.intra_node_bw_bytes_per_s=0"], r"intra_node_bw_bytes_per_s: 0.0 is out"),
        (["cluster.drive_write_bw_bytes_per_s=-1"], r"drive_write_bw_bytes_per_s: -1.0 is"),
        (["cluster.gpu_memory_bytes=0"], r"gpu_memory_bytes: 0.0 is out of range"),
        (["cluster.nodes=1.5"], r"cluster\.nodes: expected an integer"),
        (["cluster.intra_node_fabric=infiniband"], r"intra_node_fabric: 'infiniband' is not"),
        (
            ["cluster.preset=dgx-9"],
            r"unknown cluster preset 'dgx-9'; did you mean 'dgx-2' or 'dgx-h100'\? \(known: ",
        ),
        (["cluster.nodes=4", "cluster.nics_per_node=0"], r"4 nodes need at least one NIC"),
        (["cluster.nic_bw_bytes_per_s=0"], r"nic_bw_bytes_per_s: must be > 0 with nics"),
        (["cluster.drive_read_bw_bytes_per_s=0"], r"drive_read_bw_bytes_per_s: must be > 0"),
        (
            [f"cluster.nodes={MAX_GPUS}", "cluster.gpus_per_node=2"],
            r"GPUs, more than 65,536",
        ),
        (
            ["cluster.sharding=row-wise", 'cluster.sharding_file="p.json"'],
            r"give sharding = 'row-wise' or sharding_file, not both",
        ),
        (["cluster.speed=1"], r"cluster: unknown key 'speed'"),
        (["cluster=8"], r"cluster: expected a table of keys"),
    ],
)
def test_bad_clusters_are_one_line_config_errors(sets: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _system(*sets)
    assert "\n" not in str(err.value)


def test_a_toml_cluster_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('extends = "hbm-lru"\n[cluster]\ngpus_per_node = 0\n')
    data, origin = load_system_data(path)
    with pytest.raises(ConfigError, match=r"bad\.toml\.cluster\.gpus_per_node: 0 is out"):
        build_system(data, origin)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("cluster.gpus_per_node=0", "gpus_per_node"),
        ("cluster.nodes=0", "nodes"),
        ("cluster.sharding=diagonal", "sharding"),
        ("cluster.nic_bw_bytes_per_s=-1", "nic_bw_bytes_per_s"),
    ],
)
def test_bad_clusters_exit_2_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, key: str
) -> None:
    out = tmp_path / "run"
    argv = ["run", "--workload", "tiny", "--batches", "2", "-s", "hbm-lru"]
    assert main([*argv, "--set", override, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cluster.{key}" in err, err
    assert not out.exists()


# -- one GPU exactly as before ---------------------------------------------------------


@pytest.mark.parametrize("name", SYSTEM_PRESETS)
def test_a_system_without_cluster_serialises_exactly_as_before(name: str) -> None:
    spec = resolve_system(name)
    data = spec.to_dict()
    assert "cluster" not in data
    assert json.dumps(data) == json.dumps(_old_to_dict(spec))  # keys, order and values


def test_the_cluster_key_appears_only_with_a_cluster() -> None:
    data = _system("cluster.nodes=2").to_dict()
    assert data["cluster"]["nodes"] == 2 and data["cluster"]["gpus_per_node"] == 8
    assert {k: v for k, v in data.items() if k != "cluster"} == _system().to_dict()


# -- a cluster resolves; what answers one GPU only refuses it ----------------------------

REFUSAL = "answers one GPU only"


def test_a_cluster_resolves_for_the_engine() -> None:
    spec = resolve_system("hbm-lru", ["cluster.nodes=8", "cluster.gpus_per_node=8"])
    assert spec.cluster is not None and spec.cluster.nodes == 8
    data, _ = load_system_data("fastpersist")  # compare and sweep resolve raw data
    spec = system_from_dict(apply_overrides(data, ["cluster.preset=dgx-2"]), "fastpersist")
    assert spec.cluster is not None


def test_the_one_gpu_replay_refuses_a_cluster() -> None:
    from replay.engine.replay import replay_trace
    from replay.workload.onthefly import open_workload

    spec = resolve_system("hbm-lru", ["cluster.nodes=8", "cluster.gpus_per_node=8"])
    with pytest.raises(ConfigError, match=REFUSAL) as err:
        replay_trace(open_workload("tiny", batches=2), spec)
    assert "8 nodes x 8 GPUs" in str(err.value) and "\n" not in str(err.value)
    assert "`replay run`, `replay compare` and `replay plan`" in str(err.value)


def test_sweep_refuses_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["sweep", "-s", "hbm-lru", "--grid", "cluster.nodes=1,2"]
    assert main([*argv, "--workload", "tiny", "--batches", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and REFUSAL in err and "replay sweep" in err, err
    assert not out.exists()


def test_presets_still_list_every_system(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    assert "hbm-lru" in capsys.readouterr().out
