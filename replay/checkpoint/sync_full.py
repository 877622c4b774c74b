"""`sync-full`: a plain `torch.save` of the full state every k batches, from one writer.

Training stops while the whole state is written: stall = state bytes / write bandwidth +
the target's write latency (`CheckpointContext.write_s`); durable when the write ends.
"One writer" is `checkpoint.writers` (default 1) at `checkpoint.writer_bw_bytes_per_s`
when a per-writer cap is given; without one the target tier's bandwidth applies.
"""

from __future__ import annotations

from replay.checkpoint.base import FullStateStrategy, register_strategy


@register_strategy("sync-full")
class SyncFull(FullStateStrategy):
    overlap = False
