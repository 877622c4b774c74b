"""The embedding optimizer: what state it keeps per row, where FBGEMM keeps it, and how a
workload's `[update] rule` and a system's `model.optimizer` combine.

State per row, as FBGEMM's `SplitTableBatchedEmbeddingBagsCodegen` allocates it
(`fbgemm_gpu/split_table_batched_embeddings_ops_training.py`, `__init__`, the
`momentum1` / `momentum2` splits built by `construct_split_state`):

- `sgd` (`OptimType.EXACT_SGD`, the constructor's default optimizer and what TorchRec's
  fused TBE gets when `fused_params` names none): no state (`momentum1` is an empty
  non-persistent buffer).
- `rowwise-adagrad` (`EXACT_ROWWISE_ADAGRAD`): `momentum1`, one fp32 per row (`rowwise=True`).
- `adagrad` (`EXACT_ADAGRAD`): `momentum1`, one fp32 per value.
- `adam` (`ADAM`): `momentum1` and `momentum2`, two fp32 per value.

Where it lives (`construct_split_state`): with the table when the table is in HBM or on
the host; for a table in UVM (FBGEMM's `MANAGED` and `MANAGED_CACHING`: TorchRec's
`fused_uvm` and `fused_uvm_caching`) row-wise state goes to HBM (`location == DEVICE or
rowwise`) and per-value state stays in UVM beside the weights. The state is built with
`cacheable=False`: FBGEMM's UVM cache (`lxu_cache_weights`) holds weights only, so a
cache row is `dim x` the weights' bytes whatever the optimizer, and a miss moves no
optimizer state (the backward updates momentum where it lives).

How the two settings combine: `sgd` is the default on both sides (every workload written
before the rule took other values says `sgd`, and the `hbm-lru` preset names it), so it
yields to the other side; a stateful rule on one side is taken; two different stateful
optimizers are a contradiction, refused in one line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from replay.errors import ConfigError
from replay.system.dense import SystemLike, with_workload_dense
from replay.workload.spec import UPDATE_RULES

# a SystemSpec (not imported: replay.system.spec imports this module)
S = TypeVar("S", bound=SystemLike)

OPTIMIZERS = ("sgd", "rowwise-adagrad", "adagrad", "adam")
BYTES_PER_STATE = 4  # fp32: FBGEMM's momentum dtype unless optimizer_state_dtypes says


def optimizer_bytes_per_row(optimizer: str, dim: int) -> int:
    """Optimizer state per row: SGD none, row-wise Adagrad one fp32, Adagrad one fp32
    per value, Adam two (module docstring)."""
    per_value = {"sgd": 0, "rowwise-adagrad": 0, "adagrad": 1, "adam": 2}[optimizer]
    per_row = 1 if optimizer == "rowwise-adagrad" else 0
    return BYTES_PER_STATE * (per_row + per_value * dim)


def state_in_hbm_beside_uvm(optimizer: str) -> bool:
    """Whether a UVM table's optimizer state sits in HBM (row-wise state does;
    `construct_split_state`: `location == DEVICE or rowwise`)."""
    return optimizer == "rowwise-adagrad"


def combine(system_optimizer: str, rule: str, where: str = "model.optimizer") -> str:
    """The optimizer a run uses: the system's `model.optimizer` and the workload's
    `[update] rule` combined (module docstring); a contradiction is a ConfigError."""
    if rule == "sgd" or rule == system_optimizer:
        return system_optimizer
    if system_optimizer == "sgd":
        return rule
    raise ConfigError(
        f"{where}: the system says {system_optimizer!r} but the workload's [update] rule "
        f"says {rule!r}; set one of them (or make them agree)"
    )


def workload_rule(workload: dict[str, Any] | None) -> str:
    """The `[update] rule` of a trace's or workload's spec dict (`sgd` when absent:
    ingested traces and workloads written before the rule existed)."""
    update = (workload or {}).get("update") or {}
    rule = update.get("rule", "sgd") if isinstance(update, dict) else "sgd"
    return str(rule) if rule in UPDATE_RULES else "sgd"


def with_workload_rule(system: S, workload: dict[str, Any] | None) -> S:
    """`system` with `model.optimizer` combined with the workload's rule, and the workload's
    own dense model where the system keeps the presets' (`replay.system.dense`): the same
    object when nothing changes (every `sgd` workload of the presets' dense model), so its
    results stay byte-identical."""
    system = with_workload_dense(system, workload)
    model = system.model
    chosen = combine(model.optimizer, workload_rule(workload))
    if chosen == model.optimizer:
        return system
    return dataclasses.replace(system, model=dataclasses.replace(model, optimizer=chosen))


__all__ = [
    "OPTIMIZERS",
    "UPDATE_RULES",
    "combine",
    "optimizer_bytes_per_row",
    "state_in_hbm_beside_uvm",
    "with_workload_rule",
    "workload_rule",
]
