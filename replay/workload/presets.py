"""Built-in workload presets (DESIGN section 4), each number with its source.

Cardinalities are the published per-table row counts of the Criteo datasets as the DLRM
and MLPerf references preprocess them. The access-model knobs (alpha, drift, reuse) are
not published per table; the presets use alpha = 1.05, inside the 0.9-1.45 range of
published synthetic generators (DESIGN section 4), and no drift or extra reuse.

Hot values (`hot_shares`, issue 28) are measured: the two presets built from Criteo 1TB
(`criteo-terabyte`, `criteo-mlperf-dcnv2`) give the tables whose top values stand out in
the real rows (Criteo 1TB Click Logs day 0, first 1,000 rows, by `replay fit`'s test at
the preset's own rows, `replay.workload.fit_stats.hot_values_test`) those values'
observed shares (`CRITEO_1TB_HOT_SHARES`); a hot share is exact whatever alpha and rows,
so rank j takes the observed share in the preset as in the data. `criteo-kaggle` is
left a plain power law: it is another dataset (the Kaggle challenge's 7 days), and no
rows of it were measured. 1,000 rows are few: the shares carry a binomial standard error
of about 0.015, and values below the level-0.001 test's reach are not there.

`meta-2021` (issue 43) is fitted, not transcribed: `replay fit --locality-stats` on Meta's
locality statistics of a production batch (facebookresearch/dlrm_datasets, MIT licence),
856 tables and 887 M lookups per batch of 65,536; the spec is the file `meta-2021.toml`
beside this module, whose header cites the source and the command that wrote it
(docs/locality_fit.md). It is one batch long by default: a batch of it is 887 M lookups,
which no unit test generates (tests that go over every preset only read specs; its batch
is checked by `pytest -m bench tests/test_meta_2021_bench.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from replay.errors import ConfigError, did_you_mean, opt
from replay.workload.spec import TableSpec, UpdateRule, WorkloadSpec, load_spec

DEFAULT_ALPHA = 1.05  # DESIGN s.4: published generators use 0.9-1.45
# the fitted Meta preset (module docstring); 856 tables, read in about 60 ms
META_2021_FILE = Path(__file__).with_name("meta-2021.toml")

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

# The hot values of Criteo 1TB Click Logs day 0, first 1,000 rows (CC BY-NC-SA), measured
# by `replay fit` (`replay ingest --dictionary`, then its hot-value test,
# `fit_stats.hot_values_test`, level 0.001, run at the presets' own rows): per table the
# observed shares of the values that stand out (the LR of rank 1 or 2 above 9.55). C1,
# C10, C20 and C22 share one value on the same 374 rows; C14, C16, C17, C19 and C23 have
# two (the empty value, 461 of 1,000 rows in C14, C16, C17, C23, and one other). C11's
# and C21's second and third values (LR 3-8) do not stand out at the presets' 2.9 M and
# 25.6 M rows (they do at the rows the 1,000 rows themselves extrapolate to: `replay fit
# --rows extrapolate`).
CRITEO_1TB_HOT_SHARES: dict[str, tuple[float, ...]] = {
    "C1": (0.374,),
    "C10": (0.374,),
    "C12": (0.259,),
    "C14": (0.472, 0.461),
    "C16": (0.474, 0.461),
    "C17": (0.461, 0.459),
    "C19": (0.431, 0.374),
    "C20": (0.374,),
    "C22": (0.374,),
    "C23": (0.461, 0.374),
}

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


def _tables(
    rows: tuple[int, ...],
    pooling: tuple[int, ...] | None = None,
    hot: dict[str, tuple[float, ...]] | None = None,
) -> tuple[TableSpec, ...]:
    pooling = pooling or (1,) * len(rows)
    hot = hot or {}
    return tuple(
        TableSpec(
            name=f"C{i + 1}",
            rows=r,
            alpha=DEFAULT_ALPHA,
            hot_shares=hot.get(f"C{i + 1}", ()),
            pooling=p,
        )
        for i, (r, p) in enumerate(zip(rows, pooling, strict=True))
    )


_BUILT: dict[str, WorkloadSpec] = {
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
        tables=_tables(CRITEO_TERABYTE_ROWS, hot=CRITEO_1TB_HOT_SHARES),
        # MLPerf Training DLRM v1 reference: --max-ind-range=40000000,
        # --arch-sparse-feature-size=128, --mini-batch-size=2048
        batch_size=2048,
        batches=1000,
        embedding_dim=128,
        source="Criteo 1TB with DLRM --max-ind-range=40000000 (MLPerf DLRM v1 reference): "
        "cardinalities, batch 2048, dim 128; hot values measured on Criteo 1TB day 0, first "
        "1,000 rows (CC BY-NC-SA), by replay fit",
    ),
    "criteo-mlperf-dcnv2": WorkloadSpec(
        name="criteo-mlperf-dcnv2",
        tables=_tables(MLPERF_DCNV2_ROWS, MLPERF_DCNV2_POOLING, CRITEO_1TB_HOT_SHARES),
        # mlcommons/training recommendation_v2 (DLRM-DCNv2): embedding_dim 128, multi-hot
        # sizes above; per-device batch 2048 (DESIGN section 4)
        batch_size=2048,
        batches=100,
        embedding_dim=128,
        source="MLPerf Training DLRM-DCNv2 reference (mlcommons/training recommendation_v2): "
        "cardinalities, multi-hot sizes, dim 128; hot values measured on Criteo 1TB day 0, "
        "first 1,000 rows (CC BY-NC-SA), by replay fit",
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
# presets kept in their own spec files, read on first use: meta-2021's 856 tables take
# ~50 ms to parse and check, which every command's import would otherwise pay
_FILES: dict[str, Path] = {"meta-2021": META_2021_FILE}


class _Presets(Mapping[str, WorkloadSpec]):
    """The workload presets by name, in listing order; a file's preset is loaded when it
    is first asked for."""

    def __init__(self) -> None:
        self._loaded: dict[str, WorkloadSpec] = dict(_BUILT)

    def __getitem__(self, name: str) -> WorkloadSpec:
        if name not in self._loaded and name in _FILES:
            self._loaded[name] = load_spec(_FILES[name])
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*_BUILT, *_FILES])

    def __len__(self) -> int:
        return len(_BUILT) + len(_FILES)

    def __contains__(self, name: object) -> bool:
        return name in _BUILT or name in _FILES


PRESETS: Mapping[str, WorkloadSpec] = _Presets()


# Samples in one epoch of the dataset a preset models, for `replay plan --epochs`. Kept
# beside the presets, not in their specs, so that the traces generated from them keep
# their manifests byte for byte (`WorkloadSpec.dataset_samples` is for one's own specs;
# `replay presets --show` prints it as a comment to uncomment). Counts as DLRM's
# preprocessing reads them (facebookresearch/dlrm, data_utils.py): Criteo Kaggle's
# train.txt, 7 days, 45,840,617 samples; Criteo 1TB Click Logs, days 0-23,
# 4,373,472,329 samples (the sum of its per-day counts, total_per_file).
DATASET_SAMPLES: dict[str, int] = {
    "criteo-kaggle": 45_840_617,
    "criteo-terabyte": 4_373_472_329,
}
DATASET_SAMPLES_SOURCE: dict[str, str] = {
    "criteo-kaggle": "Criteo Kaggle train.txt, 7 days (DLRM data_utils.py)",
    "criteo-terabyte": "Criteo 1TB Click Logs, 24 days (DLRM data_utils.py)",
}


def dataset_samples(spec: WorkloadSpec, given: str | None = None) -> int | None:
    """Samples in one epoch of `spec`'s dataset: the spec's own `dataset_samples`, else
    the preset's when the workload was `given` as a preset name; None when unknown."""
    if spec.dataset_samples is not None:
        return spec.dataset_samples
    return DATASET_SAMPLES.get(given) if given is not None else None


def get_preset(name: str) -> WorkloadSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown workload preset {name!r}{did_you_mean(name, PRESETS)} (known: "
            f"{', '.join(PRESETS)})"
        ) from None


def preset_summary(spec: WorkloadSpec) -> str:
    """One line describing a preset for `replay presets`."""
    pooling = sum(t.pooling for t in spec.tables)
    hot = "1 per table" if pooling == len(spec.tables) else f"multi-hot, {pooling:,} lookups/sample"
    shape = ", ".join(
        f"{what} {_span([getattr(t, what) for t in spec.tables])}"
        for what in ("alpha", "drift", "reuse")
    )
    return (
        f"{len(spec.tables)} tables, {spec.total_rows:,} rows, dim {spec.embedding_dim}, "
        f"{spec.batches:,} batch{'es' if spec.batches != 1 else ''} of {spec.batch_size:,}, "
        f"{hot}, seed {spec.seed}, {shape}"
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
