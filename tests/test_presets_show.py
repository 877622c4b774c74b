"""`replay presets --show NAME`: every system and workload preset printed as TOML reads
back, through the loaders the CLI uses, as the same spec; cluster presets as a
`[cluster]` table; an unknown name is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.cli import main
from replay.engine.systems import resolve_system, system_from_dict
from replay.system.presets import SYSTEM_PRESETS, cluster_presets
from replay.system.spec import build_system, load_system_data
from replay.workload.generator import resolve_workload
from replay.workload.presets import PRESETS


def _show(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["presets", "--show", name]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", SYSTEM_PRESETS)
def test_system_presets_read_back(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{name}.toml"
    path.write_text(_show(name, capsys))
    data, _ = load_system_data(path)
    build_system(data)
    assert system_from_dict(data).to_dict() == resolve_system(name).to_dict()


@pytest.mark.parametrize("name", list(PRESETS))
def test_workload_presets_read_back(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{name}.toml"
    path.write_text(_show(name, capsys))
    assert resolve_workload(str(path)).to_dict() == PRESETS[name].to_dict()


def test_comments_and_hot_values(capsys: pytest.CaptureFixture[str]) -> None:
    text = _show("hbm-lru", capsys)
    assert "# datasheet peak" in text and "# ASSUMPTION: a 256 MiB cache budget" in text
    text = _show("criteo-terabyte", capsys)
    assert "hot_shares = [0.472, 0.461]" in text and "# dataset_samples = 4373472329" in text


def test_a_child_preset_shows_its_own_comments(capsys: pytest.CaptureFixture[str]) -> None:
    """A preset that extends another opens with its own description, and a key it sets
    carries its own comment or none: cxl-d's static policy has no cache, so hbm-lru's
    note on a 256 MiB cache budget does not stand above its capacity of 0."""
    text = _show("cxl-d", capsys)
    head = text.split("\nname = ")[0]
    assert "TrainingCXL's ladder, step 3" in head and "A row cache in GPU HBM" not in head
    policy = text.split("[policy]")[1].split("\n[")[0]
    assert 'name = "static"' in policy and "capacity_bytes = 0.0" in policy
    assert "256 MiB" not in policy
    text = _show("ssd", capsys)
    assert "e.g. --set checkpoint.strategy" not in text  # hbm-lru's hint beside "none"
    text = _show("hbm-lru", capsys)  # the base keeps its own
    assert "A row cache in GPU HBM" in text.split("\nname = ")[0]
    assert "e.g. --set checkpoint.strategy" in text


@pytest.mark.parametrize("name", cluster_presets())
def test_cluster_presets_paste_into_a_system(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _show("hbm-lru", capsys)
    path = tmp_path / "s.toml"
    path.write_text(base + "\n" + _show(name, capsys))
    shown = system_from_dict(load_system_data(path)[0])
    assert shown.to_dict() == resolve_system("hbm-lru", [f"cluster.preset={name}"]).to_dict()


def test_unknown_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "--show", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nope'" in err and "hbm-lru" in err


def test_a_name_without_show_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    """`replay presets hbm-lru` is what a user types first: the same TOML as --show."""
    shown = _show("hbm-lru", capsys)
    assert main(["presets", "hbm-lru"]) == 0
    assert capsys.readouterr().out == shown
    assert main(["presets", "hbm-lru", "--show", "hbm-lru"]) == 0
    assert capsys.readouterr().out == shown
    assert main(["presets", "hbm-lru", "--show", "dram"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "replay: error: give one preset: NAME 'hbm-lru' or --show 'dram'"
