"""Slow, obviously correct pure-Python versions of the Criteo ingest rules, for the tests.

The tests compare the kernels with these: `split_lines_reference` and
`parse_line_reference` with the line splitting and validation of
`replay.trace.criteo_parse`, `ingest_reference_rows` with its parse and mapping kernels
(a modulo or first-seen order), and `reference_lookups` with the order of lookups in the
batches of `replay.trace.criteo` (by table, then in sample order).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from replay.errors import InputError
from replay.trace.criteo import _check_options
from replay.trace.criteo_parse import (
    BAD_CAT,
    BAD_FIELD_COUNT,
    BAD_INT,
    BAD_LABEL,
    BLANK_LINE,
    FIRST_CAT,
    LINE_TOO_LONG,
    MAX_LINE_BYTES,
    NUM_CAT,
    NUM_FIELDS,
    OK,
)

_INT_RE = re.compile(rb"[+-]?[0-9]+")
_HEX_RE = re.compile(rb"[0-9a-fA-F]{1,8}")


def split_lines_reference(data: bytes) -> list[bytes]:
    """Lines of a file's bytes: split at newlines, one trailing CR dropped per line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def parse_line_reference(line: bytes) -> tuple[int, int, list[int | None]]:
    """(code, field, hashes): code OK with the 26 hashes (None = missing), or the reason
    the line is malformed with its field index (the field count for BAD_FIELD_COUNT)."""
    if line == b"":
        return BLANK_LINE, 0, []
    if len(line) > MAX_LINE_BYTES:
        return LINE_TOO_LONG, 0, []
    fields = line.split(b"\t")
    if len(fields) != NUM_FIELDS:
        return BAD_FIELD_COUNT, len(fields), []
    if fields[0] not in (b"0", b"1"):
        return BAD_LABEL, 0, []
    for i in range(1, FIRST_CAT):
        if fields[i] and not _INT_RE.fullmatch(fields[i]):
            return BAD_INT, i, []
    cats: list[int | None] = []
    for i in range(FIRST_CAT, NUM_FIELDS):
        if not fields[i]:
            cats.append(None)
        elif _HEX_RE.fullmatch(fields[i]):
            cats.append(int(fields[i], 16))
        else:
            return BAD_CAT, i, []
    return OK, 0, cats


def ingest_reference_rows(
    lines: Iterable[bytes],
    *,
    max_ind_range: int | None = None,
    dictionary: bool = False,
    skip_bad_lines: bool = False,
    name: str = "<input>",
) -> tuple[np.ndarray, int]:
    """Rows (samples x 26, uint32) of the good lines and the number of bad lines skipped.

    The slow, obviously correct version of the parse and mapping kernels.
    """
    _check_options(1, max_ind_range, dictionary)
    seen: list[dict[int, int]] = [{} for _ in range(NUM_CAT)]
    rows: list[list[int]] = []
    bad = 0
    for number, line in enumerate(lines, start=1):
        code, field, cats = parse_line_reference(line)
        if code != OK:
            if not skip_bad_lines:
                raise InputError(f"{name}:{number}: malformed line (code {code}, field {field})")
            bad += 1
            continue
        sample = []
        for t, h in enumerate(cats):
            if h is None:
                sample.append(0)
            elif max_ind_range is not None:
                sample.append(1 + h % max_ind_range)
            else:
                sample.append(seen[t].setdefault(h, len(seen[t]) + 1))
        rows.append(sample)
    return np.array(rows, dtype=np.uint32).reshape(-1, NUM_CAT), bad


def reference_lookups(
    rows: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch, table, row) of the lookups of `rows` (samples x tables) in trace order."""
    batch: list[int] = []
    table: list[int] = []
    row: list[int] = []
    for b, s in enumerate(range(0, len(rows), batch_size)):
        chunk = rows[s : s + batch_size]
        for t in range(rows.shape[1]):
            for r in chunk[:, t]:
                batch.append(b)
                table.append(t)
                row.append(int(r))
    return (
        np.array(batch, dtype=np.uint32),
        np.array(table, dtype=np.uint16),
        np.array(row, dtype=np.uint32),
    )
