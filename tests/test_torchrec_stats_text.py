"""torchrec.json's histograms: the counts a plan keeps as arrays (`Counts`), written as
the JSON encoder writes a list; alike tables' numbers computed once; the bins' search in
growing runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.plan.torchrec import (
    MAX_BINS,
    Counts,
    _edge_at,
    choose_bins,
    counts_array,
    histogram,
)
from replay.plan.torchrec_shards import _counts_text, torchrec_text

INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(INT64, st.integers(0, 10**6)), max_size=40))
def test_counts_are_written_as_the_json_encoder_writes_their_list(values: list[int]) -> None:
    counts = Counts(np.array(values, dtype=np.int64))
    assert counts == values and json.loads(json.dumps(counts)) == values
    assert _counts_text(counts) == json.dumps(values, separators=(", ", ": "))


def test_a_changed_counts_list_is_written_as_the_list_it_now_is() -> None:
    """Any change through the list's methods drops the array: the text and the readers
    then take the list."""
    changes = [
        lambda c: c.append(7), lambda c: c.__setitem__(0, -3), lambda c: c.extend([1, 2]),
        lambda c: c.sort(reverse=True), lambda c: c.pop(), lambda c: c.__delitem__(1),
        lambda c: c.insert(0, 9), lambda c: c.remove(2), lambda c: c.reverse(),
        lambda c: c.clear(),
    ]  # fmt: skip
    for change in changes:
        counts = Counts(np.array([4, 2, 0, 5], dtype=np.int64))
        change(counts)
        assert counts.array is None
        assert counts_array(counts).tolist() == list(counts)
        assert _counts_text(counts) == json.dumps(list(counts), separators=(", ", ": "))
    mixed = [1, 2.5, 3]  # a plain list (read from a file, say) is written by the encoder
    assert _counts_text(mixed) == json.dumps(mixed, separators=(", ", ": "))


def test_torchrec_text_of_counts_is_the_text_of_plain_lists() -> None:
    hist = histogram(np.array([0.0, 3.2, 3.2, 10.7]), 40.0)
    assert isinstance(hist, Counts) and hist == [3, 0, 8, 29]
    entry = {"height": 50, "bins": 4, "mrc_hist_counts": hist}
    doc = {"format": "x", "tables": {"a": entry}, "cluster": {"shards": [dict(entry)]}}
    plain = json.loads(json.dumps(doc))
    assert torchrec_text(doc) == torchrec_text(plain)
    assert json.loads(torchrec_text(doc)) == plain


def _first_bins_one_run(height: int, rows: float, n0: int) -> int:
    """`choose_bins`'s search as one run of 65,536 candidates at a time (before the
    growing runs)."""
    limit = min(MAX_BINS, max(4 * n0, int(height) + 1))
    for lo in range(n0, limit + 1, 1 << 16):
        cand = np.arange(lo, min(lo + (1 << 16), limit + 1), dtype=np.int64)
        hit = np.flatnonzero(_edge_at(height, float(rows), cand))
        if len(hit):
            return int(cand[hit[0]])
    return n0


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 10**9), st.floats(0.0, 1.0), st.integers(1, 300))
def test_bins_searched_in_growing_runs_are_the_first_fit(
    height: int, share: float, at_least: int
) -> None:
    rows = max(1.0, math.floor(share * (height - 1)))
    got = choose_bins(height, rows, at_least)
    if got in (MAX_BINS, at_least) or not 1.0 <= rows < height:
        return
    fine = math.ceil(height / (0.05 * rows))
    gap = height - rows + 1.0 - (2.0**-21 * height + 1e-6)
    n0 = max(at_least, fine, int(height // gap) + 1 if gap > 0 else MAX_BINS)
    if n0 < MAX_BINS:
        assert got == _first_bins_one_run(height, rows, n0)


def test_alike_tables_get_the_numbers_computed_for_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tables of one law and load factor (Che's curve alone, as at production scale,
    where no exact head is read) get the entry the first computed, each its own list:
    the same document as every table computed anew."""
    from replay.plan import torchrec_unique as tu
    from replay.plan.torchrec import torchrec_stats
    from replay.workload.sampled import open_sampled_workload
    from replay.workload.spec import TableSpec, WorkloadSpec

    spec = WorkloadSpec(
        name="alike",
        tables=(
            TableSpec("a", 3000, alpha=0.9), TableSpec("b", 3000, alpha=0.9),
            TableSpec("c", 3000, alpha=0.9), TableSpec("d", 3000, alpha=1.2),
            TableSpec("e", 3000, alpha=0.9, pooling=2),
        ),
        batch_size=64, batches=300, embedding_dim=8,
    )  # fmt: skip
    factors = {"a": 0.3, "b": 0.3, "c": 0.05, "d": 0.3, "e": 0.3}
    from replay.plan import torchrec as tr

    # as at production scale: no exact head, the unique ids per batch in closed form
    monkeypatch.setattr(tu, "_unique_heads", lambda *a: None)
    monkeypatch.setattr(tr, "_closed_form", lambda spec: True)
    doc = torchrec_stats(open_sampled_workload(spec, 0.25), bins=20, load_factors=factors)
    monkeypatch.setattr(tu.UniqueCurve, "key", lambda self: None)
    anew = torchrec_stats(open_sampled_workload(spec, 0.25), bins=20, load_factors=factors)
    assert json.dumps(doc) == json.dumps(anew)
    tables = doc["tables"]
    a, b = tables["a"]["mrc_hist_counts"], tables["b"]["mrc_hist_counts"]
    assert a == b and a is not b and a.array is b.array  # one law, one load factor
    assert tables["c"]["bins"] != tables["a"]["bins"] and tables["d"]["mrc_hist_counts"] != a
    b[0] += 1  # one table's list changed leaves the other's as it was
    assert a == anew["tables"]["a"]["mrc_hist_counts"] and b != a
