"""`cpr`: CPR's partial recovery (Maeng et al., "CPR: Understanding and Improving Failure
Tolerant Training for Deep Learning Recommendation with Partial Recovery", MLSys 2021).

Checkpoints are written as `sync-full`'s (the full state every k batches, training stalls
for the write). What differs is the recovery: on a node's failure only that node's
embedding shards roll back to the last checkpoint; every other node keeps its state and
the job goes on from where it was, so a failure loses updates instead of time (the failed
node's updates since its last checkpoint). CPR reports the checkpoint-related overhead
falling from 8.2-8.5% to 0.53-0.68% on Criteo Terabyte against full recovery.

In `replay run` (one GPU) the only node is the failed one, so partial recovery is full
recovery: the run models `sync-full`'s writes and rollback. A cluster's partial recovery is
planned by `replay plan` (`replay.plan.cluster_checkpoint`, the failure draws of
`replay.checkpoint.partial`), which reports the lost updates beside goodput.
"""

from __future__ import annotations

from replay.checkpoint.base import FullStateStrategy, register_strategy


@register_strategy("cpr")
class Cpr(FullStateStrategy):
    overlap = False
