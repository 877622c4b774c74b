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

Records are separated by blank lines. What is refused, each as one line naming the file,
the line, the record and the field (`ConfigError`), before any fit starts:

- a missing or malformed line, bins other than Meta's;
- a number that is not finite (`1e400` reads as infinity) or out of range: batches and
  batch size at least 1 and at most what a workload spec holds (2^32 - 1 batches,
  2^26 samples), lookups and distinct rows per batch at least 1 and at most the 2^31
  lookups per batch of a workload spec (a record of 1e30 lookups would fit a spec that
  every command refuses), distinct rows at most the lookups, each share in [0, 1];
- a histogram whose 17 shares do not sum to 1 within SUM_TOLERANCE (0.01: the file
  prints 3 decimals, so 17 rounded shares sum to 1 +- 0.0085 at most), a cumulative line
  that is not the running sum of its histogram within the same tolerance;
- an average lookups per distinct row (printed to one decimal) off the ratio of the two
  counts by more than 0.05 plus 5% (averages over several batches are averages of
  per-batch ratios, not the ratio of averages);
- counts and histograms that disagree (`_check_bins`): the rows of bin (lo, hi] were each
  looked up more than lo and at most hi times, so the bin's lookups L x l_j lie between
  D x r_j x (lo + 1) and D x r_j x hi (L lookups, D distinct rows, r_j and l_j the bin's
  shares of each; the last bin has no upper end). Each share may be off by its rounding
  (SHARE_ROUNDING, half the last printed decimal) and the bounds by BIN_SLACK (5%, as the
  average above). Meta's 17 records meet every bin's bounds on the rounding alone (0.1%
  to 1.4% to spare); swapped histograms, or counts that do not belong to them, miss by
  far more.
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
SHARE_ROUNDING = 0.0005  # half the last of the 3 decimals the file prints
BIN_SLACK = 0.05  # relative slack of a bin's lookups against its rows' counts
MAX_BATCHES = 2**32 - 1  # a workload spec's `batches`
MAX_BATCH_SIZE = 1 << 26  # a workload spec's `batch_size`
MAX_LOOKUPS = 1 << 31  # a workload spec's lookups per batch (`replay.workload.spec`)

# at most 19 digits: int() of 4,300 or more raises, and no count here needs more than 10
_HEADER = re.compile(
    r"^Locality stats after processing (\d{1,19}) batch(?:es)? of size (\d{1,19})$"
)
_NUMBER = r"(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
_LOOKUPS = re.compile(r"^Avg # of indices: " + _NUMBER + "$")
_DISTINCT = re.compile(r"^Avg # of unique cols: " + _NUMBER + "$")
_RATIO = re.compile(r"^Avg col size: " + _NUMBER + "$")
_ROWS_TITLE = "Histogram of col sizes:"
_LOOKUPS_TITLE = "Ratio of index distribution at different column sizes:"
_BIN = re.compile(r"^\((\d{1,19})(?:, (\d{1,19})\]|\+): " + _NUMBER + "$")
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
        self.record = ""  # the record's name, once read

    def where(self, line: int | None = None) -> str:
        """`PATH:LINE` (`line`: 0-based; default the current one), and the record."""
        at = f"{self.path}:{(self.i if line is None else line) + 1}"
        if not self.record:
            return at
        name = self.record if self.record.isprintable() else repr(self.record)
        return f"{at}: record {_clip(name)}"

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


def _count(
    lines: _Lines, pattern: re.Pattern[str], field: str, form: str, lo: float, hi: float
) -> float:
    """The number on the line `FIELD: FORM`, finite and in [lo, hi] (else one line
    naming the record and the field)."""
    value = float(lines.match(pattern, f"'{field}: {form}'").group(1))
    problem = _out_of_range(value, lo, hi)
    if problem:
        lines.i -= 1
        raise ConfigError(f"{lines.where()}: '{field}' {problem}")
    return value


def _out_of_range(value: float, lo: float, hi: float) -> str:
    """Why `value` is not a finite number in [lo, hi], or ""."""
    if not math.isfinite(value):
        return f"is not a finite number ({value:g})"
    if value < 0 <= lo:
        return f"is negative ({value:g})"
    if not lo <= value <= hi:
        return f"{value:g} is out of range [{_bound(lo)}, {_bound(hi)}]"
    return ""


def _bound(x: float) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


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
        problem = _out_of_range(shares[j], 0.0, 1.0)
        if problem:
            lines.i -= 1
            raise ConfigError(f"{lines.where()}: {what}: the share of bin {label} {problem}")
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
    if len(values) != BINS + 1 or not all(math.isfinite(v) for v in values):
        lines.i -= 1
        raise ConfigError(
            f"{lines.where()}: expected {BINS + 1} cumulative shares (finite numbers), "
            f"got {_clip(cumulative)!r}"
        )
    total = math.fsum(shares.tolist())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ConfigError(
            f"{lines.where(start)}: {what} sums to {total:.4f}, not 1 within {SUM_TOLERANCE}"
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
    cursor.record = name
    header = cursor.match(_HEADER, "'Locality stats after processing N batches of size B'")
    batches, batch_size = int(header.group(1)), int(header.group(2))
    for field, value, hi in (("batches", batches, MAX_BATCHES),
                             ("batch size", batch_size, MAX_BATCH_SIZE)):  # fmt: skip
        if not 1 <= value <= hi:
            cursor.i -= 1
            raise ConfigError(f"{cursor.where()}: {field} {value} is out of range [1, {hi:,}]")
    lookups = _count(cursor, _LOOKUPS, "Avg # of indices", "N", 1.0, MAX_LOOKUPS)
    distinct = _count(cursor, _DISTINCT, "Avg # of unique cols", "N", 1.0, MAX_LOOKUPS)
    if distinct > lookups:
        cursor.i -= 1
        raise ConfigError(
            f"{cursor.where()}: 'Avg # of unique cols' {distinct:g} distinct rows is more than "
            f"the {lookups:g} lookups"
        )
    ratio = _count(cursor, _RATIO, "Avg col size", "X", 1.0, MAX_LOOKUPS)
    slack = RATIO_SLACK[0] + RATIO_SLACK[1] * ratio
    if abs(ratio - lookups / distinct) > slack:
        cursor.i -= 1
        raise ConfigError(
            f"{cursor.where()}: 'Avg col size' {ratio:g} is not lookups / distinct rows "
            f"({lookups / distinct:.3f})"
        )
    rows_share = _histogram(cursor, _ROWS_TITLE, "the histogram of col sizes")
    first_bin = cursor.i + 1  # the title, then the lookups' bins
    lookups_share = _histogram(cursor, _LOOKUPS_TITLE, "the ratio of index distribution")
    stats = BatchStats(lookups, distinct, rows_share, lookups_share)
    _check_bins(cursor, first_bin, stats)
    return LocalityRecord(name, batches, batch_size, stats, start + 1), cursor.i


def _check_bins(cursor: _Lines, first_bin: int, stats: BatchStats) -> None:
    """The counts and both histograms agree (the module docstring): bin j's lookups
    L x l_j lie between D x r_j x (lo + 1) and D x r_j x hi, each share give or take
    SHARE_ROUNDING and the bounds give or take BIN_SLACK."""
    lookups, distinct = stats.lookups, stats.distinct
    rows = np.asarray(stats.rows_share, dtype=np.float64)
    shares = np.asarray(stats.lookups_share, dtype=np.float64)
    edges = np.asarray(BIN_EDGES, dtype=np.float64)
    fewest = edges + 1.0  # a row of bin (lo, hi] was looked up at least lo + 1 times
    most = np.append(edges[1:], np.inf)  # and at most hi (the last bin: no end)
    h = SHARE_ROUNDING
    low = distinct * np.maximum(rows - h, 0.0) * fewest / lookups / (1.0 + BIN_SLACK)
    with np.errstate(invalid="ignore"):  # inf x 0: the last bin with no rows
        high = distinct * (rows + h) * most / lookups * (1.0 + BIN_SLACK)
    high = np.where(np.isnan(high), 0.0, high)
    bad = np.flatnonzero((shares + h < low) | (shares - h > high))
    if bad.size == 0:
        return
    j = int(bad[0])
    label = f"({BIN_EDGES[j]}+" if j == BINS - 1 else f"({BIN_EDGES[j]}, {BIN_EDGES[j + 1]}]"
    if j == BINS - 1:
        times = f"more than {BIN_EDGES[j]} times"
    elif BIN_EDGES[j] + 1 == BIN_EDGES[j + 1]:
        times = "once" if BIN_EDGES[j + 1] == 1 else f"{BIN_EDGES[j + 1]} times"
    else:
        times = f"{BIN_EDGES[j] + 1} to {BIN_EDGES[j + 1]} times"
    span = f"at least {low[j]:.3f}" if j == BINS - 1 else f"{low[j]:.3f} to {high[j]:.3f}"
    raise ConfigError(
        f"{cursor.where(first_bin + j)}: the counts and histograms disagree: bin {label} holds "
        f"{shares[j]:.3f} of the {lookups:,.0f} lookups, but its {rows[j]:.3f} of the "
        f"{distinct:,.0f} distinct rows, each looked up {times}, make {span} of them"
    )


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
