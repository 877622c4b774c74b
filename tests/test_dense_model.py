"""A workload preset's own dense model (`replay.system.dense`): Terabyte's MLPs from the
MLPerf DLRM reference, not the system presets' Kaggle ones."""

from __future__ import annotations

from replay.engine.systems import resolve_system
from replay.system.dense import (
    DENSE_MODELS,
    PRESET_DENSE_PARAMS,
    DenseModel,
    dense_sets,
    with_workload_dense,
)
from replay.system.optimizer import with_workload_rule

TERABYTE = {"name": "criteo-terabyte", "batch_size": 2048}


def test_the_formulas_give_the_presets_kaggle_model() -> None:
    """DLRM's Kaggle MLPs (13-512-256-64-16, top 512-256-1 after 16 + 351 = 367) give the
    presets' 475,985 parameters: the formulas the Terabyte model is computed with."""
    kaggle = DenseModel((13, 512, 256, 64, 16), (512, 256, 1), 16, 26, "")
    assert kaggle.interaction_width == 367
    assert kaggle.dense_params == PRESET_DENSE_PARAMS


def test_terabyte_is_mlperfs_dlrm_by_hand() -> None:
    """Bottom 13-512-256-128: 7,168 + 131,328 + 32,896; top 479-1024-1024-512-256-1:
    491,520 + 1,049,600 + 524,800 + 131,328 + 257; multiply-adds the weights plus
    27 x 27 x 128 for the interaction, x 6 FLOPs."""
    m = DENSE_MODELS["criteo-terabyte"]
    assert m.interaction_width == 128 + 27 * 26 // 2 == 479
    assert m.dense_params == 171_392 + 2_197_505
    assert m.macs_per_sample == 170_496 + 2_194_688 + 27 * 27 * 128
    assert m.flops_per_sample == 6 * 2_458_496


def test_a_terabyte_run_uses_terabytes_mlps_unless_the_user_set_them() -> None:
    base = resolve_system("hbm-lru", [])
    got = with_workload_rule(base, TERABYTE)
    m = DENSE_MODELS["criteo-terabyte"]
    assert got.compute.flops_per_sample == m.flops_per_sample
    assert got.model.dense_params == m.dense_params
    assert with_workload_dense(got, TERABYTE) is got  # idempotent
    # Kaggle, tiny and unnamed workloads: the same object (results unchanged)
    for workload in ({"name": "criteo-kaggle"}, {"name": "tiny"}, None):
        assert with_workload_rule(base, workload) is base
    # the user's own compute or dense model is kept
    for sets in (["compute.flops_per_sample=1e6"], ["model.dense_params=1000"]):
        own = resolve_system("hbm-lru", sets)
        assert with_workload_rule(own, TERABYTE) is own
    # the plan carries it into every system it resolves, or into none
    systems = [resolve_system(n, []) for n in ("hbm-lru", "ssd-tbe")]
    assert dense_sets(TERABYTE, systems) == [
        f"compute.flops_per_sample={m.flops_per_sample:.17g}",
        f"model.dense_params={m.dense_params}",
    ]
    mixed = [*systems, resolve_system("hbm-lru", ["compute.flops_per_sample=1e6"])]
    assert dense_sets(TERABYTE, mixed) == []


def test_terabytes_step_compute_is_4_6_times_kaggles() -> None:
    """At the presets' 20 TFLOP/s, a 2,048-sample batch: 1.51 ms of dense compute (the
    Kaggle model's 0.33 ms)."""
    base = resolve_system("hbm-lru", [])
    got = with_workload_rule(base, TERABYTE)
    seconds = got.compute.flops_per_sample * 2048 / got.compute.flops_per_s
    assert round(seconds * 1e3, 2) == 1.51
    assert round(base.compute.flops_per_sample * 2048 / base.compute.flops_per_s * 1e3, 2) == 0.33
