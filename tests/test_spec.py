"""Workload specs: TOML loading, validation, presets and their published numbers."""

from __future__ import annotations

import pytest

from replay.errors import ConfigError
from replay.workload.presets import PRESETS, get_preset
from replay.workload.spec import load_spec, spec_from_dict, spec_to_toml

GOOD = """
name = "mine"
batch_size = 32
batches = 10
seed = 3

[defaults]
alpha = 1.2
reuse = 0.1

[update]
accumulate_batches = 2

[[tables]]
name = "a"
rows = 100

[[tables]]
name = "b"
rows = 50
alpha = 0.8
pooling = 4
frozen = true
"""


def test_load_spec_applies_defaults_and_overrides(tmp_path) -> None:
    path = tmp_path / "w.toml"
    path.write_text(GOOD)
    spec = load_spec(path)
    a, b = spec.tables
    assert (a.alpha, a.reuse, a.pooling, a.frozen) == (1.2, 0.1, 1, False)
    assert (b.alpha, b.reuse, b.pooling, b.frozen) == (0.8, 0.1, 4, True)
    assert spec.update.accumulate_batches == 2
    assert spec.lookups_per_batch == 32 * 5
    assert load_spec_roundtrip(spec, tmp_path) == spec


def load_spec_roundtrip(spec, tmp_path):
    path = tmp_path / "round.toml"
    path.write_text(spec_to_toml(spec))
    return load_spec(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"alhpa": 1.0}, "unknown key 'alhpa'"),
        ({"alpha": float("nan")}, "finite"),
        ({"alpha": -0.5}, "out of range"),
        ({"rows": 0}, "out of range"),
        ({"rows": "10"}, "expected an integer"),
        ({"reuse": 1.0}, "out of range"),
        ({"drift": 2.0}, "out of range"),
        ({"pooling": 0}, "out of range"),
        ({"mapping": "sorted"}, "not one of"),
        ({"frozen": "yes"}, "true or false"),
    ],
)
def test_bad_table_values_are_rejected(change, message) -> None:
    table = {"name": "a", "rows": 10, **change}
    with pytest.raises(ConfigError, match=message):
        spec_from_dict({"tables": [table]})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tables": []}, "non-empty"),
        ({"tables": [{"name": "a", "rows": 1}], "batches": 0}, "out of range"),
        ({"tables": [{"name": "a", "rows": 1}], "batch_size": -1}, "out of range"),
        ({"tables": [{"name": "a", "rows": 1}], "speed": 3}, "unknown key 'speed'"),
        ({"tables": [{"name": "a", "rows": 1}, {"name": "a", "rows": 2}]}, "appears twice"),
        ({"tables": [{"rows": 1}]}, "missing required key 'name'"),
        ({"tables": [{"name": "a", "rows": 1}], "update": {"rule": "lamb"}}, "not one of"),
    ],
)
def test_bad_specs_are_rejected(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        spec_from_dict(data)


def test_bad_toml_is_a_config_error(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("name = [unclosed")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(path)
    with pytest.raises(ConfigError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml")


def test_presets_match_published_cardinalities() -> None:
    # DESIGN section 4: sums of the published per-table cardinalities
    assert get_preset("criteo-kaggle").total_rows == 33_762_577
    assert get_preset("criteo-terabyte").total_rows == 187_767_399
    dcn = get_preset("criteo-mlperf-dcnv2")
    assert dcn.total_rows == 204_184_588
    assert sum(t.pooling for t in dcn.tables) == 214
    for spec in PRESETS.values():
        assert spec.source, "every preset cites its source"
    assert [len(PRESETS[p].tables) for p in ("criteo-kaggle", "criteo-terabyte")] == [26, 26]
    assert get_preset("criteo-kaggle").batch_size == 128
    assert get_preset("criteo-terabyte").embedding_dim == 128


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match="unknown workload preset 'nope'"):
        get_preset("nope")


def test_overrides_validate() -> None:
    spec = get_preset("tiny")
    assert spec.with_overrides(alpha=1.3).tables[0].alpha == 1.3
    assert all(t.reuse == 0.0 for t in spec.with_overrides(reuse=0).tables)
    with pytest.raises(ConfigError):
        spec.with_overrides(alpha=float("nan"))
    with pytest.raises(ConfigError):
        spec.with_overrides(batches=0)


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("alhpa", "; did you mean 'alpha'? (allowed: "),
        ("interval", None),  # no table key is near it: no hint
    ],
)
def test_an_unknown_key_names_the_nearest(key: str, hint: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"tables": [{"name": "a", "rows": 10, key: 1.0}]})
    message = str(info.value)
    assert message.startswith(f"spec.tables[0]: unknown key {key!r}")
    assert (hint in message) if hint else ("did you mean" not in message)


def test_a_system_key_typo_names_the_keys_it_may_mean() -> None:
    from replay.engine.systems import resolve_system

    with pytest.raises(ConfigError) as info:
        resolve_system("hbm-lru", ["checkpoint.interval=10min"])
    assert str(info.value).startswith(
        "preset hbm-lru.checkpoint: unknown key 'interval'; did you mean 'interval_s' or "
        "'interval_batches'? (allowed: beside_compute, "
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: get_preset("criteo-kagle"), "'criteo-kagle'; did you mean 'criteo-kaggle'? ("),
        (lambda: _system("hbm_lru", []), "'hbm_lru'; did you mean 'hbm-lru' or 'hbm-lfu'? ("),
        (lambda: _system("hbm-lru", ["policy.name=lfuu"]), "'lfuu'; did you mean 'lfu'? ("),
        (
            lambda: _system("hbm-lru", ["checkpoint.strategy=fastpersit"]),
            "'fastpersit'; did you mean 'fastpersist'? (",
        ),
        (lambda: _system("hbm-lru", ["cluster.preset=dgx-h10"]), "did you mean 'dgx-h100' or"),
        (lambda: _system("zzz", []), "unknown system 'zzz' (not a preset: "),  # nothing near
    ],
    ids=["workload", "system", "policy", "strategy", "cluster", "none-near"],
)
def test_an_unknown_name_names_the_nearest(make, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert said in str(info.value)


def _system(name: str, sets: list[str]):
    from replay.engine.systems import check_plugins, resolve_system

    spec = resolve_system(name, sets)
    check_plugins(spec, f"preset {name}")
    return spec
