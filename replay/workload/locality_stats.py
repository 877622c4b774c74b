"""Meta's embedding locality statistics: the text format, parsed and checked.

Source: `embedding_bag/2021/locality_stats.txt` of facebookresearch/dlrm_datasets (MIT
licence), which describes synthetic traces sharing the reuse patterns of Meta's
production ads models. A file holds one or more records, each::

    fbgemm_t856_bs65536.pt                                   <- the record's name
    Locality stats after processing 1 batches of size 65536
    Avg # of indices: 887017990                              <- lookups per batch
    Avg # of unique cols: 128435723                          <- distinct rows per batch
    Avg col size: 6.9                                        <- lookups per distinct row
    Histogram of col sizes:                                  <- share of distinct rows
    (0, 1]: 0.473                                               whose count in the batch
    ...                                                         is in the bin
    (16384, 32768]: 0.000
    (32768+: 0.000
    [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    ['0.000', '0.473', ..., '1.000']                         <- the cumulative shares
    Ratio of index distribution at different column sizes:   <- share of the lookups on
    (0, 1]: 0.069                                               rows of each bin
    ...                                                         (same 17 bins, edges and
                                                                cumulative line)

Records are separated by blank lines. What is refused, each as one line naming the file
and line (`ConfigError`): a missing or malformed line, bins other than Meta's, a negative
count or share, distinct rows above lookups, a histogram whose 17 shares do not sum to 1
within SUM_TOLERANCE (0.01: the file prints 3 decimals, so 17 rounded shares sum to
1 +- 0.0085 at most), a cumulative line that is not the running sum of its histogram
within the same tolerance, and an average lookups per distinct row (printed to one
decimal) off the ratio of the two counts by more than 0.05 plus 5% (averages over
several batches are averages of per-batch ratios, not the ratio of averages).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay._files import LOCALITY_STATS, read_text
from replay.errors import ConfigError
from replay.workload.locality_model import BIN_EDGES, BINS, BatchStats

SUM_TOLERANCE = 0.01
RATIO_SLACK = (0.05, 0.05)  # (absolute, relative) slack of "Avg col size"

_HEADER = re.compile(r"^Locality stats after processing (\d+) batch(?:es)? of size (\d+)$")
_NUMBER = r"(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
_LOOKUPS = re.compile(r"^Avg # of indices: " + _NUMBER + "$")
_DISTINCT = re.compile(r"^Avg # of unique cols: " + _NUMBER + "$")
_RATIO = re.compile(r"^Avg col size: " + _NUMBER + "$")
_ROWS_TITLE = "Histogram of col sizes:"
_LOOKUPS_TITLE = "Ratio of index distribution at different column sizes:"
_BIN = re.compile(r"^\((\d+)(?:, (\d+)\]|\+): " + _NUMBER + "$")
_TABLES_IN_NAME = re.compile(r"_t(\d+)_")


@dataclass(frozen=True)
class LocalityRecord:
    """One record of a locality statistics file."""

    name: str
    batches: int
    batch_size: int
    stats: BatchStats  # lookups and distinct per batch, the two histograms
    line: int  # where the record starts (1-based)

    @property
    def tables_in_name(self) -> int | None:
        """The table count a name like `fbgemm_t856_bs65536.pt` gives, else None."""
        match = _TABLES_IN_NAME.search(self.name)
        return int(match.group(1)) if match else None


class _Lines:
    def __init__(self, path: str, lines: list[str], start: int) -> None:
        self.path, self.lines, self.i = path, lines, start

    def where(self) -> str:
        return f"{self.path}:{self.i + 1}"

    def next(self, what: str) -> str:
        if self.i >= len(self.lines) or not self.lines[self.i].strip():
            raise ConfigError(f"{self.where()}: missing line: expected {what}")
        line = self.lines[self.i].strip()
        self.i += 1
        return line

    def match(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        line = self.next(what)
        found = pattern.match(line)
        if found is None:
            self.i -= 1
            raise ConfigError(f"{self.where()}: expected {what}, got {_clip(line)!r}")
        return found


def _clip(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _count(lines: _Lines, pattern: re.Pattern[str], what: str) -> float:
    value = float(lines.match(pattern, what).group(1))
    if value < 0 or not math.isfinite(value):
        lines.i -= 1
        raise ConfigError(f"{lines.where()}: {what.split(':')[0]} is negative ({value:g})")
    return value


def _histogram(lines: _Lines, title: str, what: str) -> np.ndarray:
    line = lines.next(repr(title))
    if line != title:
        lines.i -= 1
        raise ConfigError(f"{lines.where()}: expected {title!r}, got {_clip(line)!r}")
    start = lines.i
    shares = np.empty(BINS)
    for j in range(BINS):
        last = j == BINS - 1
        label = f"({BIN_EDGES[j]}+" if last else f"({BIN_EDGES[j]}, {BIN_EDGES[j + 1]}]"
        found = lines.match(_BIN, f"the bin '{label}: SHARE'")
        lo, hi = int(found.group(1)), found.group(2)
        if (
            lo != BIN_EDGES[j]
            or (hi is None) != last
            or (hi is not None and int(hi) != BIN_EDGES[j + 1])
        ):
            lines.i -= 1
            raise ConfigError(
                f"{lines.where()}: expected the bin {label}, got {_clip(found.group(0))!r}"
                " (the bins must be Meta's: 0, 1, 2, 4, ..., 32768, the last open)"
            )
        shares[j] = float(found.group(3))
        if shares[j] < 0:
            lines.i -= 1
            raise ConfigError(f"{lines.where()}: {what}: bin {label} has a negative share")
    edges = lines.next("the bin edges list")
    expected = "[" + ", ".join(str(e) for e in BIN_EDGES) + "]"
    if edges.replace(" ", "") != expected.replace(" ", ""):
        lines.i -= 1
        raise ConfigError(
            f"{lines.where()}: expected the bin edges {expected}, got {_clip(edges)!r}"
        )
    cumulative = lines.next("the cumulative shares list")
    try:
        values = [float(v.strip().strip("'\"")) for v in cumulative.strip("[]").split(",")]
    except ValueError:
        values = []
    if len(values) != BINS + 1:
        lines.i -= 1
        raise ConfigError(
            f"{lines.where()}: expected {BINS + 1} cumulative shares, got {_clip(cumulative)!r}"
        )
    total = math.fsum(shares.tolist())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ConfigError(
            f"{lines.path}:{start + 1}: {what} sums to {total:.4f}, not 1 within {SUM_TOLERANCE}"
        )
    running = np.concatenate([[0.0], np.cumsum(shares)])
    gap = np.abs(running - np.asarray(values)).max()
    if gap > SUM_TOLERANCE:
        lines.i -= 1
        raise ConfigError(
            f"{lines.where()}: the cumulative shares differ from the running sum of {what} by "
            f"{gap:.4f} (tolerance {SUM_TOLERANCE})"
        )
    return shares


def _record(path: str, lines: list[str], start: int) -> tuple[LocalityRecord, int]:
    cursor = _Lines(path, lines, start)
    name = cursor.next("the record's name")
    header = cursor.match(_HEADER, "'Locality stats after processing N batches of size B'")
    batches, batch_size = int(header.group(1)), int(header.group(2))
    if batches < 1 or batch_size < 1:
        cursor.i -= 1
        raise ConfigError(f"{cursor.where()}: batches and batch size must be at least 1")
    lookups = _count(cursor, _LOOKUPS, "'Avg # of indices: N'")
    distinct = _count(cursor, _DISTINCT, "'Avg # of unique cols: N'")
    if distinct > lookups:
        cursor.i -= 1
        raise ConfigError(
            f"{cursor.where()}: {distinct:g} distinct rows is more than the {lookups:g} lookups"
        )
    if lookups == 0 or distinct == 0:
        cursor.i -= 1
        raise ConfigError(f"{cursor.where()}: a batch with no lookups has no statistics to fit")
    ratio = _count(cursor, _RATIO, "'Avg col size: X'")
    slack = RATIO_SLACK[0] + RATIO_SLACK[1] * ratio
    if abs(ratio - lookups / distinct) > slack:
        cursor.i -= 1
        raise ConfigError(
            f"{cursor.where()}: 'Avg col size' {ratio:g} is not lookups / distinct rows "
            f"({lookups / distinct:.3f})"
        )
    rows_share = _histogram(cursor, _ROWS_TITLE, "the histogram of col sizes")
    lookups_share = _histogram(cursor, _LOOKUPS_TITLE, "the ratio of index distribution")
    stats = BatchStats(lookups, distinct, rows_share, lookups_share)
    return LocalityRecord(name, batches, batch_size, stats, start + 1), cursor.i


def parse_locality_stats(text: str, path: str = "<text>") -> list[LocalityRecord]:
    """Every record of a locality statistics file (ConfigError, one line, if any is bad)."""
    lines = text.splitlines()
    records = []
    i = 0
    while True:
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines):
            break
        record, i = _record(path, lines, i)
        records.append(record)
    if not records:
        raise ConfigError(f"{path}: no locality statistics records (an empty file)")
    return records


def read_locality_stats(path: str | Path) -> list[LocalityRecord]:
    """Parse the file at `path` (ConfigError if it cannot be read or is malformed): a
    regular file of at most `LOCALITY_STATS`' limit (1 MiB), refused before reading."""
    return parse_locality_stats(read_text(path, LOCALITY_STATS, ConfigError), str(path))


def select_record(records: list[LocalityRecord], which: str | int | None) -> LocalityRecord:
    """The record `which` names: its index (0 the first) or its name; the first if None."""
    if which is None:
        return records[0]
    text = str(which)
    if re.fullmatch(r"\d+", text):
        index = int(text)
        if index >= len(records):
            raise ConfigError(
                f"--record {index}: the file has {len(records)} records (0 to {len(records) - 1})"
            )
        return records[index]
    for record in records:
        if record.name == text:
            return record
    raise ConfigError(f"--record {text!r}: no record of that name (e.g. {records[0].name!r})")
