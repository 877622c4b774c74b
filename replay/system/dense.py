"""A workload preset's own dense model (DLRM's MLPs), in place of the system presets'.

The system presets (`hbm-lru.toml` and those extending it) describe the DLRM reference
model of the Criteo Kaggle configuration (facebookresearch/dlrm
`bench/dlrm_s_criteo_kaggle.sh`: bottom MLP 13-512-256-64-16, top MLP 512-256-1 after the
interaction, embedding dim 16): `compute.flops_per_sample = 3.2e6` and
`model.dense_params = 475,985`. A workload modelled on another reference model carries its
own MLPs here, and a system that keeps the presets' Kaggle model is given them
(`dense_sets`, `with_workload_dense`); a system whose `[compute]` or `model.dense_params`
the user set keeps them.

- `criteo-terabyte`: the MLPerf Training DLRM v1 reference (facebookresearch/dlrm
  `bench/run_and_time.sh`, the MLPerf DLRM reference's command: `--arch-sparse-feature-size=128
  --arch-mlp-bot="13-512-256-128" --arch-mlp-top="1024-1024-512-256-1"`).

DLRM's top MLP reads the interaction (`dlrm_s_pytorch.py`, `arch_mlp_top_adjusted`): the
dense vector (dim d) beside the n(n-1)/2 dot products of the n = tables + 1 vectors
(`--arch-interaction-op=dot`, itself excluded): 128 + 351 = 479 wide for Terabyte's 26
tables (367 for Kaggle's, the presets' figure). Parameters are every layer's weights and
biases; multiply-adds per sample the weights plus the interaction's n x n x d batched
product; FLOPs = 2 x multiply-adds x 3 (forward, and a backward of twice the forward's).

Terabyte: 171,392 + 2,197,505 = 2,368,897 parameters; 170,496 + 2,194,688 + 93,312 =
2,458,496 multiply-adds, 14.75 M FLOPs per sample (the Kaggle model's 0.49 M, 2.9 M
FLOPs; the preset rounds its estimate up to 3.2 M). `criteo-mlperf-dcnv2` (DLRM-DCNv2's
cross network) is not modelled here: it keeps the presets' model.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from dataclasses import Field


class SystemLike(Protocol):
    """What these helpers read of a system spec (a frozen dataclass; not imported:
    replay.system.spec imports this module)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def compute(self) -> Any: ...
    @property
    def model(self) -> Any: ...


S = TypeVar("S", bound=SystemLike)

# the system presets' dense model: DLRM's Kaggle configuration (hbm-lru.toml)
PRESET_FLOPS_PER_SAMPLE = 3.2e6
PRESET_DENSE_PARAMS = 475_985


@dataclass(frozen=True)
class DenseModel:
    """DLRM's dense part: the bottom MLP's widths (13 dense features first, the embedding
    dim last), the top MLP's after the interaction, the sparse features (tables)."""

    bottom: tuple[int, ...]
    top: tuple[int, ...]
    embedding_dim: int
    tables: int
    source: str

    @property
    def interaction_width(self) -> int:
        n = self.tables + 1
        return self.embedding_dim + n * (n - 1) // 2

    def _layers(self) -> list[tuple[int, int]]:
        top = (self.interaction_width, *self.top)
        return [*itertools.pairwise(self.bottom), *itertools.pairwise(top)]

    @property
    def dense_params(self) -> int:
        return sum(a * b + b for a, b in self._layers())

    @property
    def macs_per_sample(self) -> int:
        n = self.tables + 1
        return sum(a * b for a, b in self._layers()) + n * n * self.embedding_dim

    @property
    def flops_per_sample(self) -> float:
        return 6.0 * self.macs_per_sample


DENSE_MODELS: dict[str, DenseModel] = {
    "criteo-terabyte": DenseModel(
        bottom=(13, 512, 256, 128),
        top=(1024, 1024, 512, 256, 1),
        embedding_dim=128,
        tables=26,
        source="MLPerf Training DLRM v1 reference (facebookresearch/dlrm bench/run_and_time.sh: "
        "bottom MLP 13-512-256-128, top MLP 1024-1024-512-256-1)",
    ),
}


def dense_model_for(workload: dict[str, Any] | None) -> DenseModel | None:
    """The dense model of a trace's or workload's spec dict, by its preset name."""
    return DENSE_MODELS.get(str((workload or {}).get("name") or ""))


def keeps_preset_model(system: Any) -> bool:
    """Whether `system` has the system presets' dense model (none set by the user)."""
    c, m = system.compute, system.model
    return (
        c.seconds_per_batch == 0
        and c.flops_per_sample == PRESET_FLOPS_PER_SAMPLE
        and m.dense_params == PRESET_DENSE_PARAMS
    )


def dense_sets(workload: dict[str, Any] | None, systems: list[Any]) -> list[str]:
    """`--set` entries giving every system the workload's dense model, where each keeps the
    presets' (none otherwise: the systems are compared on one model)."""
    model = dense_model_for(workload)
    if model is None or not systems or not all(keeps_preset_model(s) for s in systems):
        return []
    return [
        f"compute.flops_per_sample={model.flops_per_sample:.17g}",
        f"model.dense_params={model.dense_params}",
    ]


def with_workload_dense(system: S, workload: dict[str, Any] | None) -> S:
    """`system` with the workload's dense model where it keeps the presets' (the same
    object otherwise, so results of other workloads stay byte-identical)."""
    model = dense_model_for(workload)
    if model is None or not keeps_preset_model(system):
        return system
    compute = dataclasses.replace(system.compute, flops_per_sample=model.flops_per_sample)
    dense = dataclasses.replace(system.model, dense_params=model.dense_params)
    return dataclasses.replace(system, compute=compute, model=dense)


__all__ = [
    "DENSE_MODELS",
    "PRESET_DENSE_PARAMS",
    "PRESET_FLOPS_PER_SAMPLE",
    "DenseModel",
    "dense_model_for",
    "dense_sets",
    "keeps_preset_model",
    "with_workload_dense",
]
