"""A checkpoint's write under a per-writer cap takes the busiest GPU's bytes, not an even
split of its node's (`replay.checkpoint.store.StoreModel.writers_s`)."""

from __future__ import annotations

import numpy as np
import pytest

from replay.checkpoint.store import StoreModel, node_bytes
from replay.system.spec import CheckpointStoreSpec, build_cluster

GB = 1e9


def test_a_per_writer_cap_waits_for_the_busiest_gpu() -> None:
    """2 DGX H100 nodes, a 1 GB/s cap per GPU: node 0's GPUs hold 38.5, 0.5 x 7 GB (mean
    5.25 GB): its writers need 38.5 s, not 42 / 8 = 5.25 s; the drives (8 x 4 GB/s) 1.3 s."""
    c = build_cluster({"preset": "dgx-h100", "nodes": 2})
    ranks = np.array([38.5, *[0.5] * 7, *[5.25] * 8]) * GB
    b = node_bytes(ranks, 0.0, c)
    assert b[0] == pytest.approx(b[1]) == pytest.approx(42 * GB)
    capped = StoreModel(c, CheckpointStoreSpec(), 0, 1 * GB)
    lat = CheckpointStoreSpec().latency_s
    assert capped.write_s(b, ranks) == pytest.approx(38.5 + lat)
    assert capped.write_s(b) == pytest.approx(42 / 8 + lat)  # without ranks: an even split
    assert list(capped.writers_s(b, ranks)) == pytest.approx([38.5, 5.25])
    # without a cap the node's drives bound it, whatever the split
    free = StoreModel(c, CheckpointStoreSpec())
    assert free.write_s(b, ranks) == free.write_s(b) == pytest.approx(42 / 32 + lat)


def test_a_store_write_waits_for_the_busiest_gpu_too() -> None:
    c = build_cluster({"preset": "dgx-h100", "nodes": 2})
    ranks = np.array([38.5, *[0.5] * 7, *[5.25] * 8]) * GB
    store = CheckpointStoreSpec(kind="shared-fs")
    capped = StoreModel(c, store, 0, 1 * GB)
    w = capped.write_s(node_bytes(ranks, 0.0, c), ranks)
    assert w == pytest.approx(38.5 + store.latency_s)
