"""Bad input that only a cross-check finds (issue 31, items 8-9, "Integrity").

A trace manifest whose counts no longer match its files (an entry's `rows`, the `lookups`
total, files that no longer cover the batches) and a trace with nothing in it are refused
by every command that reads traces, with or without checksum verification; a run folder
whose summary.json figures were edited is refused by `replay report`, since they no longer
add up to its batches.parquet.

The cases run through `test_bad_input`'s harness (same promises: exit 2, one line
`replay: error: ...`, no traceback, nothing written or changed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import test_bad_input as harness
from test_bad_input import (  # noqa: F401 (`shared` is the harness's fixture, used by name)
    EMPTY,
    LOOKUPS_PART,
    UPDATES_PART,
    Case,
    Shared,
    _empty_trace,
    _json_edit,
    _refresh_checksums,
    _result_copy,
    _trace_copy,
    case,
    shared,
)

from replay.errors import TraceError
from replay.trace.reader import open_trace
from replay.trace.writer import write_trace_from_arrays

# -- trace manifests whose counts disagree with the files ----------------------------------


def _no_lookup_files(trace: Path) -> None:
    _json_edit(trace / "manifest.json", lambda m: m["files"].update(lookups=[]))


def _no_files_and_no_batches(trace: Path) -> None:
    """A consistent manifest of an empty trace, over files that still hold lookups."""

    def edit(m: dict) -> None:
        m.update(batches=0, lookups=0, updates=0)
        m["files"].update(lookups=[], updates=[])

    _json_edit(trace / "manifest.json", edit)


def _rows_edited(kind: str, rows: int | None, minus: int = 0) -> Callable[[Path], None]:
    """The first `kind` entry's rows set to `rows` (or lowered by `minus`), the total kept
    in step and the checksums made to match: only the count in the footer disagrees."""

    def mutate(trace: Path) -> None:
        def edit(m: dict) -> None:
            entry = m["files"][kind][0]
            new = entry["rows"] - minus if rows is None else rows
            m[kind] -= entry["rows"] - new
            entry["rows"] = new

        _json_edit(trace / "manifest.json", edit)
        _refresh_checksums(trace)

    return mutate


def _lookups_total_edited(trace: Path) -> None:
    _json_edit(trace / "manifest.json", lambda m: m.update(lookups=m["lookups"] - 1))


NO_FILES = ("{bad}/manifest.json", "files.lookups cover 0 of 6 batches")
FOOTER = ("{bad}/" + LOOKUPS_PART, "rows, the manifest says")
TO_ZERO = ("{bad}/" + LOOKUPS_PART, "the manifest says 0")
LOWER = _trace_copy(_rows_edited("lookups", None, minus=6))
ZERO = _trace_copy(_rows_edited("lookups", 0))
SWEEP = "--system hbm-lru --grid policy.capacity_rows=100,1000 --workers 1"

# -- run folders whose summary.json was edited ---------------------------------------------


def _summary_edit(name: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda folder: _json_edit(folder / name, edit)


def _more_lookups(s: dict) -> None:
    s["lookups"] += 1


def _better_hit_ratio(s: dict) -> None:
    s["policy"]["hit_ratio"] = min(1.0, s["policy"]["hit_ratio"] + 0.1)


def _fewer_link_bytes(s: dict) -> None:
    link = next(iter(s["links"].values()))
    link["h2d_bytes"] //= 2


def _faster(s: dict) -> None:
    s["time_s"] /= 2


INTEGRITY_CASES: list[Case] = [
    # -- files that no longer cover the batches ---------------------------------------------
    case("inspect-manifest-lists-no-lookups", "inspect {bad}", *NO_FILES,
         setup=_trace_copy(_no_lookup_files)),
    case("inspect-no-verify-manifest-lists-no-lookups", "inspect {bad} --no-verify", *NO_FILES,
         setup=_trace_copy(_no_lookup_files)),
    case("mrc-manifest-lists-no-lookups", "mrc {bad} --out {out}", *NO_FILES,
         setup=_trace_copy(_no_lookup_files)),
    case("run-manifest-lists-no-lookups", "run {bad} --system hbm-lru --out {out}", *NO_FILES,
         setup=_trace_copy(_no_lookup_files)),
    case("fit-manifest-lists-no-lookups", "fit {bad} --out {out}", *NO_FILES,
         setup=_trace_copy(_no_lookup_files)),
    case("inspect-manifest-emptied", "inspect {bad}", "{bad}", "empty (no lookups)",
         setup=_trace_copy(_no_files_and_no_batches)),
    # -- an entry's row count against its file's footer ---------------------------------------
    case("inspect-entry-rows-lower", "inspect {bad}", *FOOTER, setup=LOWER),
    case("inspect-no-verify-entry-rows-lower", "inspect {bad} --no-verify", *FOOTER,
         setup=LOWER),
    case("run-no-verify-entry-rows-lower", "run {bad} --system hbm-lru --no-verify --out {out}",
         *FOOTER, setup=LOWER),
    case("inspect-entry-rows-zero", "inspect {bad}", *TO_ZERO, setup=ZERO),
    case("inspect-no-verify-entry-rows-zero", "inspect {bad} --no-verify", *TO_ZERO,
         setup=ZERO),
    case("mrc-entry-rows-zero", "mrc {bad} --out {out}", *TO_ZERO, setup=ZERO),
    case("run-updates-entry-rows-lower", "run {bad} --system hbm-lru --out {out}",
         "{bad}/" + UPDATES_PART, "rows, the manifest says",
         setup=_trace_copy(_rows_edited("updates", None, minus=1))),
    case("inspect-lookups-total-edited", "inspect {bad} --no-verify", "{bad}/manifest.json",
         "lookups is", setup=_trace_copy(_lookups_total_edited)),
    # -- an empty trace, refused by every command (run, mrc, compare: test_bad_input) -------
    case("inspect-empty-trace", "inspect {bad}", *EMPTY, setup=_empty_trace),
    case("inspect-no-verify-empty-trace", "inspect {bad} --no-verify --json", *EMPTY,
         setup=_empty_trace),
    case("fit-empty-trace", "fit {bad} --out {out}", *EMPTY, setup=_empty_trace),
    case("sweep-empty-trace", f"sweep {{bad}} {SWEEP} --out {{out}}", *EMPTY,
         setup=_empty_trace),
    case("bench-replay-empty-trace", "bench replay --trace {bad} --repeats 1", *EMPTY,
         setup=_empty_trace),
    case("bench-checkpoint-empty-trace", "bench checkpoint --trace {bad}", *EMPTY,
         setup=_empty_trace),
    # -- summary.json figures against batches.parquet / checkpoints.parquet --------------------
    case("report-summary-lookups-edited", "report {bad} --out {out}", "{bad}/summary.json",
         "lookups", "does not match batches.parquet",
         setup=_result_copy("run", _summary_edit("summary.json", _more_lookups))),
    case("report-summary-hit-ratio-edited", "report {bad} --out {out}", "{bad}/summary.json",
         "policy.hit_ratio", "does not match",
         setup=_result_copy("run", _summary_edit("summary.json", _better_hit_ratio))),
    case("report-summary-link-bytes-edited", "report {bad} --out {out}", "{bad}/summary.json",
         "h2d_bytes", "does not match",
         setup=_result_copy("run", _summary_edit("summary.json", _fewer_link_bytes))),
    case("report-compare-run-time-edited", "report {bad} --out {out}",
         "{bad}/dram/summary.json", "time_s", "does not match",
         setup=_result_copy("cmp", _summary_edit("dram/summary.json", _faster))),
]  # fmt: skip


@pytest.mark.parametrize("c", INTEGRITY_CASES, ids=[c.id for c in INTEGRITY_CASES])
def test_integrity(
    c: Case,
    shared: Shared,  # noqa: F811 (the imported fixture, requested by name)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness.test_bad_input(c, shared, tmp_path, capsys, monkeypatch)


def test_case_ids_are_new() -> None:
    ids = [c.id for c in INTEGRITY_CASES]
    assert len(ids) == len(set(ids))
    assert not set(ids) & {c.id for c in harness.CASES}


# -- the library --------------------------------------------------------------------------------


def _empty(tmp: Path) -> Path:
    none = np.array([], dtype=np.uint32)
    return write_trace_from_arrays(
        tmp / "empty", tables=[("a", 10)], batch=none, table=none, row=none, batch_size=1
    )


def test_open_trace_refuses_an_empty_trace_unless_asked(tmp_path: Path) -> None:
    path = _empty(tmp_path)
    with pytest.raises(TraceError, match="empty \\(no lookups\\)") as caught:
        open_trace(path)
    assert str(path) in str(caught.value)
    trace = open_trace(path, allow_empty=True)  # e.g. a tool listing traces
    assert trace.num_batches == 0 and trace.num_lookups == 0 and len(trace.lookups()) == 0


def test_entry_counts_are_checked_without_verifying(shared: Shared, tmp_path: Path) -> None:  # noqa: F811
    """No checksum is involved: the footer check is part of reading."""
    trace = harness._copy(shared.trace, tmp_path / "t")
    manifest = json.loads((trace / "manifest.json").read_text())
    rows = manifest["files"]["updates"][0]["rows"]
    _rows_edited("updates", rows + 5)(trace)
    opened = open_trace(trace)  # the lookups are intact
    assert len(opened.lookups()) == manifest["lookups"]
    with pytest.raises(TraceError, match=f"holds {rows} rows, the manifest says {rows + 5}"):
        opened.updates()


def test_check_row_counts_reads_only_footers(shared: Shared, tmp_path: Path) -> None:  # noqa: F811
    trace = harness._copy(shared.trace, tmp_path / "t")
    open_trace(trace).check_row_counts("updates")
    _rows_edited("updates", None, minus=1)(trace)
    opened = open_trace(trace)
    with pytest.raises(TraceError, match=UPDATES_PART):
        opened.check_row_counts("updates")


def _summary_digest_recorded(run: Path) -> None:
    """summary.json edited where batches.parquet cannot tell (row_bytes): only the digest
    `replay run` records in meta.json (`summary_sha256`) catches it."""
    assert "summary_sha256" in json.loads((run / "meta.json").read_text())
    _json_edit(run / "summary.json", lambda s: s.update(row_bytes=s["row_bytes"] + 1))


def test_a_recorded_summary_digest_is_checked(
    shared: Shared,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = case("report-summary-digest-recorded", "report {bad} --out {out}", "{bad}/summary.json",
             "summary_sha256", setup=_result_copy("run", _summary_digest_recorded))  # fmt: skip
    harness.test_bad_input(c, shared, tmp_path, capsys, monkeypatch)
