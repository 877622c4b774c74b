"""The LRU's key -> slot hash table (`replay.policies.lru`): its find, insert-at-stop and
backward-shift removal against a dict, on tables small enough that clusters wrap around
the end and collide; and the whole LRU kernel against `reference_lru` on key spaces much
larger than the cache (where the old per-key map would have been the cost)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _lru_helpers import one_table_lru
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import batch_range  # the policy tests' trace-to-range harness

from replay.errors import ConfigError
from replay.policies.base import NUM_COUNTERS
from replay.policies.lru import _find, _home, _remove, reference_lru, table_shape


def run_lru(batches: list[tuple[list[int], list[int]]], capacity: int, total: int) -> np.ndarray:
    """The lru kernel's counters on a key space of `total` keys, one range."""
    policy = one_table_lru(total, capacity, len(batches))
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    policy.process(batch_range(batches, 0, len(batches)), out)
    return out


def _check_table(table: np.ndarray, live: dict[int, int], slot_bits: int, shift: int) -> None:
    assert int(np.count_nonzero(table)) == len(live)
    mask = len(table) - 1
    for k, s in live.items():
        assert _find(table, k, slot_bits, shift) == s
    for i in np.flatnonzero(table):  # no empty entry between a key's home and the key
        k = int((table[i] >> slot_bits) - 1)
        j = _home(k, shift)
        while j != i:
            assert table[j] != 0, (k, i, j)
            j = (j + 1) & mask


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=200),
    log_entries=st.integers(2, 4),
)
def test_table_matches_a_dict(ops: list[tuple[bool, int]], log_entries: int) -> None:
    # tables far fuller than the kernel's (up to all but one entry live), so that clusters
    # collide and wrap around the end
    entries = 1 << log_entries
    capacity = entries - 1
    slot_bits, shift = capacity.bit_length(), 64 - log_entries
    table = np.zeros(entries, dtype=np.int64)
    live: dict[int, int] = {}
    free = list(range(capacity))
    for add, k in ops:
        found = _find(table, k, slot_bits, shift)
        assert (found >= 0) == (k in live)
        if add and k not in live and free:
            s = free.pop()
            assert table[-1 - found] == 0
            table[-1 - found] = ((k + 1) << slot_bits) | s  # what the kernel does on a miss
            live[k] = s
        elif not add and k in live:
            _remove(table, k, slot_bits, shift)
            free.append(live.pop(k))
        _check_table(table, live, slot_bits, shift)


def test_table_refuses_what_cannot_pack() -> None:
    assert table_shape(2**40 - 1, 2**23) == (2**25, 23, 39)
    with pytest.raises(ConfigError, match="64-bit table entries"):
        table_shape(2**41, 2**23)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    capacity=st.integers(1, 50),
    key_bits=st.integers(4, 40),
)
def test_lru_on_large_key_spaces_matches_reference(seed: int, capacity: int, key_bits: int) -> None:
    rng = np.random.default_rng(seed)
    hot = rng.integers(0, 2**key_bits, size=capacity * 2)
    trace = []
    for _ in range(6):
        lookups = rng.choice(hot, size=int(rng.integers(0, 40))).tolist()
        updates = sorted(set(lookups))[: int(rng.integers(0, 10))]
        trace.append((lookups, updates))
    got = run_lru(trace, capacity, 2**key_bits)
    np.testing.assert_array_equal(got, reference_lru(trace, capacity))


def test_lru_runs_on_a_row_space_no_per_row_map_would_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 tables x 4e9 rows: a 4 B per-row map would need 179 GiB; the hash table and the
    on-the-fly stream need no per-row state, so the run fits a 16 GiB budget."""
    from replay.cli import main

    spec = 'name = "w"\nbatch_size = 4\nbatches = 2\n' + "".join(
        f'[[tables]]\nname = "t{i}"\nrows = {4 * 10**9}\n' for i in range(12)
    )
    (tmp_path / "w12.toml").write_text(spec)
    monkeypatch.setenv("REPLAY_MEMORY_LIMIT", "16G")
    out = tmp_path / "out"
    args = ["run", "--workload", str(tmp_path / "w12.toml"), "--system", "hbm-lru"]
    assert main([*args, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"]["misses"] == 95  # 96 lookups, one row looked up twice
    capsys.readouterr()


@pytest.mark.parametrize(
    ("total", "dtype"), [(2**31 - 2, np.int32), (2**31 - 1, np.int64), (2**40, np.int64)]
)
@pytest.mark.parametrize("derived", [False, True])
def test_slot_keys_carry_their_dirty_flags(total: int, dtype: type, derived: bool) -> None:
    """A slot's key is k when clean and -1 - k when dirty, in 4 bytes while -1 - k of the
    largest key fits them: the rows at the top of the key space are written back (or
    not) as the reference says, by the update pass and by the lookups of a batch whose
    update rows are its distinct lookups."""
    from dataclasses import replace

    from replay.trace.stream import updates_as_keys

    top = [total - 1, total - 2, total - 3, 0, 1]
    batches = [[top[0], top[1], top[0]], [top[2], top[3]], [top[4], top[1]], [top[0]]]
    policy = one_table_lru(total, 3, len(batches))
    assert policy.slot_key.dtype == dtype
    trace = [(b, sorted(set(b))[:1] if not derived else sorted(set(b))) for b in batches]
    br = batch_range(trace, 0, len(trace))
    if derived:  # no update keys, their count per batch
        br = replace(br, update_keys=br.keys[:0], updates_are_lookups=True)
        assert updates_as_keys(br, 3).updates_are_lookups  # the kernel's derived mode
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    policy.process(br, out)
    np.testing.assert_array_equal(out, reference_lru(trace, 3))
    cached = {int(k) if k >= 0 else -1 - int(k) for k in policy.slot_key}
    assert cached == {top[0], top[1], top[4]}
