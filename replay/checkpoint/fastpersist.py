"""`fastpersist`: FastPersist's parallel, overlapped full-state writes (Wang et al. 2024).

The full state is split into equal byte ranges over `checkpoint.writers` data-parallel
writers, each at its share of the drives' aggregate bandwidth (`drives` ×
`drive_write_bw_bytes_per_s`, or the target tier's bandwidth); writers with a
per-writer cap cannot exceed writers × cap. The write goes through a pinned double
buffer and overlaps the next batch's forward and backward passes, and must end before
that batch's optimizer step: stall = max(0, t_write − forward_backward of batch b+1),
attributed to batch b+1 (the last batch's write has nothing to hide behind). Durable
when the write ends.
"""

from __future__ import annotations

from replay.checkpoint.base import FullStateStrategy, register_strategy


@register_strategy("fastpersist")
class FastPersist(FullStateStrategy):
    overlap = True
