"""A generated piece's keys from its rows alone (`replay.workload.onthefly.piece_keys`):
the flat keys, distinct keys and count that `step_keys` makes of the same lookups with
their table ids, on random runs of tables; and the on-the-fly piece path against it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from replay.trace.keys import batch_bounds, table_offsets
from replay.trace.updates import step_keys
from replay.workload.onthefly import GeneratedTrace, piece_keys
from replay.workload.spec import spec_from_dict


@pytest.mark.parametrize("seed", range(4))
def test_piece_keys_is_step_keys_of_the_runs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 3000, size=12)
    offsets = table_offsets(rows)
    t0, t1 = 2, 2 + int(rng.integers(1, 10))
    counts = rng.integers(0, 400, size=t1 - t0)
    table = np.repeat(np.arange(t0, t1), counts).astype(np.uint16)
    row = (rng.zipf(1.4, len(table)) % rows[table]).astype(np.uint32)
    frozen = np.zeros(len(rows), dtype=np.bool_)
    for dtype in (np.dtype(np.uint32), np.dtype(np.int64)):
        want = step_keys(table, row, batch_bounds(np.zeros(len(row), np.uint32), 0, 1), offsets,
                         frozen, dtype)  # fmt: skip
        span = int(offsets[t1] - offsets[t0])
        seen = np.zeros((span + 7) // 8 + int(rng.integers(0, 5)), dtype=np.uint8)
        keys, ukeys = np.empty(len(row), dtype), np.empty(len(row), dtype)
        for _ in range(2):  # the bitmap is left as it was found
            n = piece_keys(row, counts, offsets[t0:t1], int(offsets[t0]), seen, keys, ukeys)
            assert not seen.any()
            assert np.array_equal(keys, want[0])
            assert np.array_equal(ukeys[:n], want[1])
            assert [0, n] == want[2].tolist()


def test_generated_pieces_from_rows_are_the_lookups_step_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import replay.trace.format as fmt

    monkeypatch.setattr(fmt, "ROW_GROUP_TARGET_LOOKUPS", 60)
    monkeypatch.setattr(fmt, "PIECE_MIN_LOOKUPS", 120)
    spec = spec_from_dict(
        {
            "name": "pk",
            "batch_size": 40,
            "batches": 3,
            "seed": 9,
            "tables": [
                {"name": f"t{i}", "rows": rows, "alpha": 1.1, "pooling": 1 + i % 3}
                for i, rows in enumerate((50, 3000, 7, 100_000) * 2 + (50,))
            ],
        }
    )
    g = GeneratedTrace(spec, threads=1)
    assert g.pieces and g.steps_every_batch
    local = threading.local()
    offsets = table_offsets(g.table_rows)
    made = 0
    for b in range(spec.batches):
        for piece in g.pieces:
            got = g._piece_keys(b, piece, local)
            batch, table, row = g.compiled.lookups(b, b + 1, piece)
            want = step_keys(table, row, batch_bounds(batch, b, b + 1), offsets,
                             g.compiled.frozen, g._key_dtype)  # fmt: skip
            span = int(offsets[piece[1]] - offsets[piece[0]])
            # a span wider than step_keys' set as a bitmap: made as before
            assert (got is None) == (span > 64 << max(4, (2 * len(row)).bit_length()))
            if got is None:
                continue
            made += 1
            for x, y in zip(got, want, strict=True):
                assert x.dtype == y.dtype and np.array_equal(x, y)
    assert 0 < made < spec.batches * len(g.pieces)
