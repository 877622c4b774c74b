"""Distinct (table, row) pairs updated per checkpoint interval, in one streaming pass.

Check-N-Run's increments hold the rows changed since the previous checkpoint
(`consecutive`) or since the last full one (`one-shot`); `intermittent` writes one-shot
increments and a new full one when the increment would exceed a threshold. The kernel
keeps one bit per key (the key was updated in the current window) and a list of the
bitmap words it set, so closing a window clears only those words (a whole-bitmap clear
per checkpoint would cost Σ rows / 8 bytes each time); when the list would grow past
the bitmap's size, a full clear is cheaper and the list is dropped.
"""

from __future__ import annotations

import numpy as np

from replay._jit import kernel

CONSECUTIVE = 0
ONE_SHOT = 1
INTERMITTENT = 2
MODES = {"consecutive": CONSECUTIVE, "one-shot": ONE_SHOT, "intermittent": INTERMITTENT}

# state slots
_COUNT = 0
_TOUCHED = 1
_OVERFLOW = 2


class DirtySet:
    """The bitmap, the list of touched words and the running count of a window."""

    def __init__(self, total_keys: int) -> None:
        words = max(1, (total_keys + 63) // 64)
        self.bitmap = np.zeros(words, dtype=np.uint64)
        self.touched = np.zeros(words, dtype=np.int64)
        self.state = np.zeros(3, dtype=np.int64)


@kernel
def _clear(bitmap: np.ndarray, touched: np.ndarray, state: np.ndarray) -> None:
    if state[_OVERFLOW]:
        bitmap[:] = 0
    else:
        for i in range(state[_TOUCHED]):
            bitmap[touched[i]] = 0
    state[_COUNT] = 0
    state[_TOUCHED] = 0
    state[_OVERFLOW] = 0


@kernel
def dirty_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    cuts: np.ndarray,
    mode: int,
    threshold_rows: int,
    bitmap: np.ndarray,
    touched: np.ndarray,
    state: np.ndarray,
    out_batch: np.ndarray,
    out_rows: np.ndarray,
    out_full: np.ndarray,
) -> int:
    """Mark the updated keys of each batch; after each batch in `cuts` (sorted offsets
    into the range) emit (batch offset, rows, full?) and close the window as the mode
    says. Returns the number of checkpoints emitted."""
    n_out = 0
    c = 0
    cap = len(touched)
    for b in range(len(bounds) - 1):
        for i in range(bounds[b], bounds[b + 1]):
            k = keys[i]
            word = k >> 6
            bit = np.uint64(1) << np.uint64(k & 63)
            old = bitmap[word]
            if (old & bit) == 0:
                if old == 0 and state[_OVERFLOW] == 0:
                    if state[_TOUCHED] < cap:
                        touched[state[_TOUCHED]] = word
                        state[_TOUCHED] += 1
                    else:
                        state[_OVERFLOW] = 1
                bitmap[word] = old | bit
                state[_COUNT] += 1
        while c < len(cuts) and cuts[c] == b:
            rows = state[_COUNT]
            full = False
            if mode == CONSECUTIVE:
                _clear(bitmap, touched, state)
            elif mode == INTERMITTENT and rows > threshold_rows:
                full = True
                _clear(bitmap, touched, state)
            out_batch[n_out] = b
            out_rows[n_out] = rows
            out_full[n_out] = full
            n_out += 1
            c += 1
    return n_out


def reference_increments(
    batches: list[list[int]], cuts: list[int], mode: str, threshold_rows: int
) -> list[tuple[int, int, bool]]:
    """Slow reference: (batch, rows counted, full?) after each cut, with Python sets."""
    window: set[int] = set()
    out = []
    for b, keys in enumerate(batches):
        window.update(keys)
        if b in cuts:
            rows = len(window)
            full = mode == "intermittent" and rows > threshold_rows
            if mode == "consecutive" or full:
                window = set()
            out.append((b, rows, full))
    return out
