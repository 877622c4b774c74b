"""Built-in workload presets (DESIGN section 4), each number with its source.

Cardinalities are the published per-table row counts of the Criteo datasets as the DLRM
and MLPerf references preprocess them. The access-model knobs (alpha, drift, reuse) are
not published per table; the presets use alpha = 1.05, inside the 0.9-1.45 range of
published synthetic generators (DESIGN section 4), and no drift or extra reuse, so that
every preset is a plain bounded power law until the user says otherwise (or fits one
with `replay fit`).
"""

from __future__ import annotations

from pathlib import Path

from replay.errors import ConfigError, opt
from replay.workload.spec import TableSpec, UpdateRule, WorkloadSpec, load_spec

DEFAULT_ALPHA = 1.05  # DESIGN s.4: published generators use 0.9-1.45

# Criteo Kaggle Display Advertising Challenge, 26 categorical features, as counted by
# DLRM's preprocessing (facebookresearch/dlrm, data_utils.py, --data-set=kaggle);
# sum 33,762,577 rows.
CRITEO_KAGGLE_ROWS = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
    14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

# Criteo 1TB Click Logs with DLRM's --max-ind-range=40000000 (hash modulo 40 M), the
# MLPerf Training DLRM v1 reference; sum 187,767,399 rows.
CRITEO_TERABYTE_ROWS = (
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10,
    2208, 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36,
)  # fmt: skip

# MLPerf Training v3.0+ DLRM-DCNv2 reference (mlcommons/training,
# recommendation_v2/torchrec_dlrm): num_embeddings_per_feature; sum 204,184,588 rows.
MLPERF_DCNV2_ROWS = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
    2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
)  # fmt: skip
# ... and its synthetic multi-hot sizes (multi_hot_sizes); 214 lookups per sample.
MLPERF_DCNV2_POOLING = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
)  # fmt: skip


def _tables(rows: tuple[int, ...], pooling: tuple[int, ...] | None = None) -> tuple[TableSpec, ...]:
    pooling = pooling or (1,) * len(rows)
    return tuple(
        TableSpec(name=f"C{i + 1}", rows=r, alpha=DEFAULT_ALPHA, pooling=p)
        for i, (r, p) in enumerate(zip(rows, pooling, strict=True))
    )


PRESETS: dict[str, WorkloadSpec] = {
    "criteo-kaggle": WorkloadSpec(
        name="criteo-kaggle",
        tables=_tables(CRITEO_KAGGLE_ROWS),
        # DLRM's bench/dlrm_s_criteo_kaggle.sh: --mini-batch-size=128,
        # --arch-sparse-feature-size=16
        batch_size=128,
        batches=1000,
        embedding_dim=16,
        source="Criteo Kaggle; cardinalities from DLRM data_utils.py, batch 128 and dim 16 "
        "from DLRM bench/dlrm_s_criteo_kaggle.sh",
    ),
    "criteo-terabyte": WorkloadSpec(
        name="criteo-terabyte",
        tables=_tables(CRITEO_TERABYTE_ROWS),
        # MLPerf Training DLRM v1 reference: --max-ind-range=40000000,
        # --arch-sparse-feature-size=128, --mini-batch-size=2048
        batch_size=2048,
        batches=1000,
        embedding_dim=128,
        source="Criteo 1TB with DLRM --max-ind-range=40000000 (MLPerf DLRM v1 reference): "
        "cardinalities, batch 2048, dim 128",
    ),
    "criteo-mlperf-dcnv2": WorkloadSpec(
        name="criteo-mlperf-dcnv2",
        tables=_tables(MLPERF_DCNV2_ROWS, MLPERF_DCNV2_POOLING),
        # mlcommons/training recommendation_v2 (DLRM-DCNv2): embedding_dim 128, multi-hot
        # sizes above; per-device batch 2048 (DESIGN section 4)
        batch_size=2048,
        batches=100,
        embedding_dim=128,
        source="MLPerf Training DLRM-DCNv2 reference (mlcommons/training recommendation_v2): "
        "cardinalities, multi-hot sizes, dim 128",
    ),
    "tiny": WorkloadSpec(
        name="tiny",
        # A made-up small workload for tests and demos: four tables from tens to tens of
        # thousands of rows, one multi-hot, with some reuse and drift so every knob of
        # the access model is exercised.
        tables=(
            TableSpec(name="user", rows=20000, alpha=1.05, drift=0.0005, reuse=0.2),
            TableSpec(name="item", rows=5000, alpha=1.2, pooling=3, reuse=0.2),
            TableSpec(name="category", rows=300, alpha=0.9),
            TableSpec(name="hour", rows=24, alpha=0.0),
        ),
        batch_size=64,
        batches=200,
        embedding_dim=8,
        update=UpdateRule(),
        source="made up for tests and demos",
    ),
}


def get_preset(name: str) -> WorkloadSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown workload preset {name!r} (known: {', '.join(PRESETS)})"
        ) from None


def preset_summary(spec: WorkloadSpec) -> str:
    """One line describing a preset for `replay presets`."""
    pooling = sum(t.pooling for t in spec.tables)
    hot = "1 per table" if pooling == len(spec.tables) else f"multi-hot, {pooling} lookups/sample"
    shape = ", ".join(
        f"{what} {_span([getattr(t, what) for t in spec.tables])}"
        for what in ("alpha", "drift", "reuse")
    )
    return (
        f"{len(spec.tables)} tables, {spec.total_rows:,} rows, dim {spec.embedding_dim}, "
        f"{spec.batches:,} batches of {spec.batch_size}, {hot}, seed {spec.seed}, {shape}"
        f" — {spec.source}"
    )


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def resolve_spec(preset: str | None = None, spec_file: str | Path | None = None) -> WorkloadSpec:
    """A spec from a preset name or a TOML file (exactly one of them)."""
    if (preset is None) == (spec_file is None):
        raise ConfigError(
            f"give exactly one of {opt('--preset NAME', 'a preset name')} or "
            f"{opt('--spec FILE.toml', 'a spec file')}"
        )
    if preset is not None:
        return get_preset(preset)
    assert spec_file is not None
    return load_spec(spec_file)
