"""`check-n-run`: Check-N-Run's incremental, optionally quantized checkpoints
(Eisenman et al., NSDI 2022).

A full baseline is written before batch 0 (batch −1). Then every k batches (or
`interval_s`) an increment holds the distinct (table, row) pairs updated:
- `consecutive`: in the batches since the previous checkpoint; recovery reads the last
  full one plus every increment since (the chain);
- `one-shot`: since the last full one; recovery reads the full plus the last increment;
- `intermittent`: one-shot increments, and a new full checkpoint instead when the
  increment would hold more than `full_threshold_fraction` of all rows.
Rows may be quantized to `quantize_bits` (2, 3, 4 or 8; `replay.checkpoint.quantize`):
each row then weighs ceil(dim × b / 8) + 8 bytes plus its unquantized optimizer state.
Every checkpoint also holds the dense parameters and the reader position. Timing is
CheckFreq's snapshot-then-persist (`snapshot_persist`): training stalls for the snapshot
of the changed rows, the next snapshot waits for the last persist.

The distinct rows are counted during the replay by `dirty_kernel` (1 bit per key plus a
list of touched words), so the checkpoint schedule must not depend on stalls: intervals
count failure-free training time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from replay.checkpoint.base import (
    READER_POSITION_BYTES,
    CheckpointContext,
    CheckpointResult,
    CheckpointStrategy,
    Planned,
    Timing,
    register_strategy,
    schedule_in_range,
    snapshot_persist,
    snapshot_tier_name,
)
from replay.checkpoint.dirty import MODES, DirtySet, dirty_kernel
from replay.checkpoint.quantize import DISTRIBUTION, quantization_error, quantized_row_bytes
from replay.errors import ConfigError
from replay.system.spec import SystemSpec, optimizer_bytes_per_row

if TYPE_CHECKING:
    from replay.trace.stream import BatchRange


@register_strategy("check-n-run")
class CheckNRun(CheckpointStrategy):
    needs_updates = True
    state_bytes_per_key = 0.25  # bitmap (1 bit) + touched-word list (1 bit per key)

    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        super().check_spec(system, where)
        cls.check_interval(system, where)
        if not snapshot_tier_name(system):
            raise ConfigError(
                f"{where}.snapshot_tier: the system has no volatile tier off the training "
                "device to snapshot into"
            )

    def __init__(self, ctx: CheckpointContext) -> None:
        super().__init__(ctx)
        spec = ctx.spec
        self.mode = MODES[spec.increment]
        self.threshold_rows = int(spec.full_threshold_fraction * ctx.total_rows)
        self.dirty = DirtySet(ctx.total_rows)
        self.found: list[tuple[int, int, bool]] = []  # (batch, rows, full?)
        self._schedule_state: dict[str, float] = {}

    @property
    def row_bytes(self) -> int:
        """Stored bytes of one row: (quantized) values + unquantized optimizer state."""
        dim = self.ctx.embedding_dim
        opt = optimizer_bytes_per_row(self.ctx.system.model.optimizer, dim)
        return quantized_row_bytes(dim, self.ctx.spec.quantize_bits) + opt

    def observe(self, batch_range: BatchRange, base_s: Callable[[], np.ndarray]) -> None:
        br = batch_range
        cuts = schedule_in_range(
            self.ctx.spec, br.batch_start, br.batches, base_s, self._schedule_state
        )
        if len(cuts) == 0 and len(br.update_keys) == 0:
            return
        n = len(cuts)
        out_batch = np.zeros(n, dtype=np.int64)
        out_rows = np.zeros(n, dtype=np.int64)
        out_full = np.zeros(n, dtype=np.bool_)
        d = self.dirty
        got = dirty_kernel(
            br.update_keys,
            br.update_bounds,
            cuts.astype(np.int64),
            self.mode,
            self.threshold_rows,
            d.bitmap,
            d.touched,
            d.state,
            out_batch,
            out_rows,
            out_full,
        )
        for i in range(got):
            self.found.append(
                (br.batch_start + int(out_batch[i]), int(out_rows[i]), bool(out_full[i]))
            )

    def run(self, timing: Timing) -> CheckpointResult:
        ctx = self.ctx
        fixed = ctx.dense_bytes + READER_POSITION_BYTES
        row_bytes = self.row_bytes
        full_bytes = ctx.total_rows * row_bytes + fixed
        planned = [Planned(-1, "full", ctx.total_rows, full_bytes, full_bytes)]
        chain = full_bytes  # what recovering from the latest checkpoint reads
        last_full = full_bytes
        for batch, rows, full in self.found:
            if full:
                planned.append(Planned(batch, "full", ctx.total_rows, full_bytes, full_bytes))
                chain = last_full = full_bytes
                continue
            nbytes = rows * row_bytes + fixed
            if self.mode == MODES["consecutive"]:
                chain += nbytes
            else:  # one-shot or intermittent: the full plus this increment
                chain = last_full + nbytes
            planned.append(Planned(batch, "incremental", rows, nbytes, chain))
        result = snapshot_persist(ctx, timing, planned)
        bits = ctx.spec.quantize_bits
        dim = ctx.embedding_dim
        result.summary.update(
            {
                "increment": ctx.spec.increment,
                "quantize_bits": bits or None,
                "row_bytes": row_bytes,
                "full_bytes": full_bytes,
                "quantization": {
                    "bits": bits or None,
                    "row_value_bytes": quantized_row_bytes(dim, bits),
                    "row_value_bytes_fp32": 4 * dim,
                    "bytes_saved_fraction": 1 - quantized_row_bytes(dim, bits) / (4 * dim),
                    "relative_error_mean": quantization_error(dim, bits),
                    "sample": DISTRIBUTION,
                },
            }
        )
        return result
