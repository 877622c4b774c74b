"""touched(k) and the distinct rows per batch of an i.i.d. workload, in closed form.

Why. The plan counts touched(k) for small windows over the run's first batches generated
in full (`replay.analysis.touched_plan`), and TorchRec's distinct rows per batch over a
few full batches (`replay.plan.torchrec`). A batch of meta-2021 is 887 M lookups over
5.16 G rows, ~128 M of them distinct: one batch's keys in the counter's map are ~8 GiB,
and generating it is ~45 s of CPU. For such a workload (`closed_form_wanted`: one batch
alone is more than the counted prefix may hold, `PREFIX_MAX_LOOKUPS`) the same
expectations come from the spec without generating anything.

Model (the generator's, `replay.workload.sampler`): table t's L_t = batch_size x pooling
lookups of a batch each draw rank k independently with probability p_k (the bounded power
law with hot shares and rank offset); batches are i.i.d. (no reuse, no drift: checked).
A window of k batches draws k L_t times, so rank k is in it with probability
1 - (1 - p_k)^(k L_t), taken as 1 - exp(-k L_t p_k) (Poisson, exact as p_k -> 0; for the
few hot ranks both are 1 to many digits), and

    E D_t(k) = sum over ranks of 1 - exp(-k L_t p_k),

with the ranks grouped as `replay.workload.locality_model.rank_rates` groups them (ranks
one by one up to 256, then buckets spanning a factor 1.005, each at its mean rate: a
share moves by less than 1e-4). The rows are a permutation of the ranks, so the rows'
count is the ranks'. A frozen table is never updated (`kind="updates"`: 0). This is E
D(k), which the exact count over the run's windows estimates (its own spread about E
D(k) is at most sqrt(m(k, B) / T(k)) relative, `touched_plan`'s bound): the figures are
the expectation, not one draw of the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replay.workload.locality_model import TableShape, rank_rates
from replay.workload.spec import WorkloadSpec


def closed_form_wanted(spec: WorkloadSpec, max_lookups: int) -> bool:
    """Whether touched(k)'s exact prefix is replaced by the closed form: the spec's
    batches are i.i.d. with a step every batch, and one batch has more than
    `max_lookups` lookups (the prefix's memory bound)."""
    iid = not any(t.reuse > 0.0 or t.drift > 0.0 for t in spec.tables)
    step = int(spec.update.accumulate_batches) == 1
    return iid and step and int(spec.lookups_per_batch) > int(max_lookups)


def expected_touched(
    spec: WorkloadSpec, batches: Sequence[float] | np.ndarray, kind: str = "updates"
) -> np.ndarray:
    """float64 [tables, len(batches)]: E D_t(k) for each table t and window k (module
    docstring); frozen tables 0 with `kind="updates"`."""
    ks = np.asarray(batches, dtype=np.float64)
    out = np.zeros((len(spec.tables), len(ks)))
    memo: dict[tuple, np.ndarray] = {}
    for t, table in enumerate(spec.tables):
        if kind == "updates" and table.frozen:
            continue
        key = (table.rows, table.alpha, table.hot_shares, table.rank_offset, table.pooling)
        if key not in memo:
            shape = TableShape(
                lookups=float(spec.batch_size * table.pooling),
                rows=int(table.rows),
                alpha=float(table.alpha),
                hot_shares=tuple(table.hot_shares),
                rank_offset=float(table.rank_offset),
            )
            lam, _, weight = rank_rates(shape)
            memo[key] = np.array(
                [float(np.dot(weight, -np.expm1(-k * lam))) for k in ks], dtype=np.float64
            )
        out[t] = memo[key]
    return out


__all__ = ["closed_form_wanted", "expected_touched"]
