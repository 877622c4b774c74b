"""A corpus of bad input for every command (issue 7, "Hardening", item 1).

Each case builds its inputs in its own folder, runs one command in this process
(`replay.cli.main`) and asserts what every command promises for bad input: exit code 2,
exactly one line `replay: error: ...` on stderr that names the problem and where (a path,
an option or a field), no traceback, and no output: the output path does not exist
afterwards and nothing hidden (`.NAME.partial`, `.NAME.old`) is left beside it, or, where
something was there before, it is byte-for-byte as it was. Every file of the case's folder
and of the shared inputs is hashed before and after, so a command that writes or deletes
anything at all fails its case.

Cases whose input could crash the process outright (row ids or table indexes outside the
trace reach numba kernels that do not check bounds) run in a child process, so that a
crash fails its case instead of the whole test session.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.cli import main
from replay.trace.format import PARQUET_WRITE_OPTIONS
from replay.trace.writer import write_trace_from_arrays

# -- shared valid inputs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    base: Path  # everything below is read-only for the cases (hashed around each case)
    trace: Path  # `replay generate --preset tiny --batches 6 --batch-size 16`
    run: Path  # `replay run TRACE --system hbm-lru`
    cmp: Path  # `replay compare TRACE --systems hbm-lru,dram`
    sweep: Path  # `replay sweep TRACE --system hbm-lru --grid policy.capacity_rows=100,1000`
    mrc: Path  # `replay mrc TRACE --out`
    tsv: Path  # ten well-formed Criteo lines


def _ok(*argv: str | Path) -> None:
    assert main([str(a) for a in argv]) == 0, argv


def criteo_line(label: str = "0", cat: str = "0000000a") -> str:
    """label, 13 integer features, 26 categorical features (8 hex digits), tab-separated."""
    return "\t".join([label, *["1"] * 13, *[cat] * 26])


CRITEO_TEXT = "".join(criteo_line(str(i % 2), f"{i + 1:08x}") + "\n" for i in range(10))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    base = tmp_path_factory.mktemp("bad-input-shared")
    s = Shared(
        base=base,
        trace=base / "trace",
        run=base / "run",
        cmp=base / "compare",
        sweep=base / "sweep",
        mrc=base / "mrc",
        tsv=base / "day.tsv",
    )
    _ok("generate", "--preset", "tiny", "--batches", "6", "--batch-size", "16",
        "--workers", "1", "--out", s.trace)  # fmt: skip
    _ok("run", s.trace, "--system", "hbm-lru", "--out", s.run)
    _ok("compare", s.trace, "--systems", "hbm-lru,dram", "--workers", "1", "--out", s.cmp)
    _ok("sweep", s.trace, "--system", "hbm-lru", "--grid", "policy.capacity_rows=100,1000",
        "--workers", "1", "--out", s.sweep)  # fmt: skip
    _ok("mrc", s.trace, "--out", s.mrc)
    s.tsv.write_text(CRITEO_TEXT)
    for folder in (s.trace, s.run, s.cmp, s.sweep, s.mrc):
        assert folder.is_dir() and not list(base.glob(f".{folder.name}.*"))
    return s


# -- building bad inputs ---------------------------------------------------------------------

Setup = Callable[[Path, Shared], dict[str, Path] | None]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _json_edit(path: Path, edit: Callable[[dict], None]) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document, indent=2))


def _rewrite_part(part: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Rewrite a Parquet part with one value changed: still valid Parquet, new bytes."""
    table = pq.read_table(part)
    columns = {name: table.column(name).to_numpy().copy() for name in table.column_names}
    edit(columns)
    arrays = [pa.array(columns[f.name], type=f.type) for f in table.schema]
    pq.write_table(pa.Table.from_arrays(arrays, schema=table.schema), part, **PARQUET_WRITE_OPTIONS)


def _refresh_checksums(trace: Path) -> None:
    """Make the manifest's SHA-256 match the files again (only a range check is left)."""

    def edit(manifest: dict) -> None:
        for kind in ("lookups", "updates"):
            for entry in manifest["files"][kind]:
                entry["sha256"] = _sha256(trace / entry["path"])

    _json_edit(trace / "manifest.json", edit)


def _arrays_trace(out: Path) -> Path:
    """A valid trace of 3 batches of 4 lookups over tables a (100 rows) and b (50 rows)."""
    batch = np.repeat(np.arange(3), 4)
    table = np.tile([0, 0, 1, 1], 3)
    row = np.tile([1, 2, 3, 4], 3)
    return write_trace_from_arrays(
        out, tables=[("a", 100), ("b", 50)], batch=batch, table=table, row=row,
        batch_size=2, workload={"embedding_dim": 8},
    )  # fmt: skip


def _row_out_of_range(tmp: Path, s: Shared) -> dict[str, Path]:
    trace = _arrays_trace(tmp / "trace")

    def edit(cols: dict[str, np.ndarray]) -> None:
        assert cols["table"][6] == 1
        cols["row"][6] = 50  # table b has rows 0..49

    _rewrite_part(trace / "lookups" / "part-00000.parquet", edit)
    _refresh_checksums(trace)
    return {"bad": trace}


def _table_out_of_range(tmp: Path, s: Shared) -> dict[str, Path]:
    trace = _arrays_trace(tmp / "trace")

    def edit(cols: dict[str, np.ndarray]) -> None:
        assert cols["batch"][3] == 0 and cols["batch"][4] == 1
        cols["table"][3] = 2  # the trace has tables 0 and 1; still sorted by (batch, table)

    _rewrite_part(trace / "lookups" / "part-00000.parquet", edit)
    _refresh_checksums(trace)
    return {"bad": trace}


def _empty_trace(tmp: Path, s: Shared) -> dict[str, Path]:
    none = np.array([], dtype=np.uint32)
    trace = write_trace_from_arrays(
        tmp / "empty", tables=[("a", 100), ("b", 50)], batch=none, table=none.astype(np.uint16),
        row=none, batch_size=2, workload={"embedding_dim": 8},
    )  # fmt: skip
    return {"bad": trace}


def _trace_copy(mutate: Callable[[Path], None]) -> Setup:
    """A copy of the shared trace at {bad}, then `mutate(copy)`."""

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        trace = _copy(s.trace, tmp / "trace")
        mutate(trace)
        return {"bad": trace}

    return setup


LOOKUPS_PART = "lookups/part-00000.parquet"
UPDATES_PART = "updates/part-00000.parquet"


def _no_manifest(trace: Path) -> None:
    (trace / "manifest.json").unlink()


def _manifest_not_json(trace: Path) -> None:
    (trace / "manifest.json").write_text('{"format_version": 1, "tables": [')


def _future_version(trace: Path) -> None:
    _json_edit(trace / "manifest.json", lambda m: m.update(format_version=99))


def _part_missing(trace: Path) -> None:
    (trace / LOOKUPS_PART).unlink()


def _part_truncated(trace: Path) -> None:
    data = (trace / LOOKUPS_PART).read_bytes()
    (trace / LOOKUPS_PART).write_bytes(data[: len(data) // 2])


def _part_random(trace: Path) -> None:
    size = (trace / UPDATES_PART).stat().st_size
    (trace / UPDATES_PART).write_bytes(np.random.default_rng(7).bytes(size))


def _part_changed(trace: Path) -> None:
    """Valid Parquet, one row id changed (still inside its table): only SHA-256 tells."""

    def edit(cols: dict[str, np.ndarray]) -> None:
        assert cols["table"][0] == 0  # tiny's table 0 has 20,000 rows
        cols["row"][0] = (int(cols["row"][0]) + 1) % 20000

    _rewrite_part(trace / LOOKUPS_PART, edit)


def _manifest_sha_edited(trace: Path) -> None:
    _json_edit(trace / "manifest.json", lambda m: m["files"]["lookups"][0].update(sha256="0" * 64))


def _files(**files: str | bytes) -> Setup:
    """Files in the case folder, by name (a trailing '/' makes a folder)."""

    def setup(tmp: Path, s: Shared) -> None:
        for name, content in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)

    return setup


def _out_is_file(tmp: Path, s: Shared) -> None:
    (tmp / "out").write_text("not a folder\n")


def _below_file(tmp: Path, s: Shared) -> None:
    (tmp / "file.txt").write_text("a regular file\n")


def _foreign_out(tmp: Path, s: Shared) -> None:
    (tmp / "out").mkdir()
    (tmp / "out" / "notes.txt").write_text("mine\n")
    (tmp / "out" / "summary.json").write_text('{"mine": true}\n')


def _trace_with_user_files(tmp: Path, s: Shared) -> None:
    """A whole trace at {out} that also holds the user's own files (issue 31, item 1)."""
    out = _copy(s.trace, tmp / "out")
    (out / "NOTES.md").write_text("my notes\n")
    (out / "mine").mkdir()
    (out / "mine" / "data.csv").write_text("1,2,3\n")


def _fake_trace(tmp: Path, s: Shared) -> None:
    """A folder that only looks like a trace: a manifest of `{}` and a lookups folder."""
    (tmp / "out" / "lookups").mkdir(parents=True)
    (tmp / "out" / "manifest.json").write_text("{}\n")
    (tmp / "out" / "lookups" / "part-00000.parquet").write_bytes(b"mine, not a trace part")


def _trace_with_stray_part(tmp: Path, s: Shared) -> None:
    """A whole trace at {out} with a file in lookups/ that its manifest does not list."""
    out = _copy(s.trace, tmp / "out")
    (out / "lookups" / "stray.txt").write_text("not listed in the manifest\n")


def _leftover_partial(tmp: Path, s: Shared) -> None:
    (tmp / ".out.partial").mkdir()
    (tmp / ".out.partial" / "junk.bin").write_bytes(b"half of something")


def _leftover_plan(tmp: Path, s: Shared) -> None:
    (tmp / ".out.partial").mkdir()
    (tmp / ".out.partial" / ".plan.json").write_text('{"another": "plan"}\n')


def _previous(attr: str) -> Setup:
    """The shared result `attr` copied to {out}: an earlier output a failure must keep."""

    def setup(tmp: Path, s: Shared) -> None:
        _copy(getattr(s, attr), tmp / "out")

    return setup


def _both(*setups: Setup) -> Setup:
    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for one in setups:
            found.update(one(tmp, s) or {})
        return found

    return setup


def _result_copy(attr: str, mutate: Callable[[Path], None]) -> Setup:
    """A copy of a shared result folder at {bad}, then `mutate(copy)`."""

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        folder = _copy(getattr(s, attr), tmp / attr)
        mutate(folder)
        return {"bad": folder}

    return setup


def _unlink(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).unlink()


def _write(name: str, content: str | bytes) -> Callable[[Path], None]:
    def mutate(folder: Path) -> None:
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        else:
            (folder / name).write_text(content)

    return mutate


def _config_name_changed(run: Path) -> None:
    _json_edit(run / "config.json", lambda c: c["system"].update(name="hbm-lfu"))


def _config_number_changed(run: Path) -> None:
    def edit(config: dict) -> None:
        config["system"]["tiers"]["hbm"]["read_bw_bytes_per_s"] *= 2

    _json_edit(run / "config.json", edit)


def _trace_digest_changed(run: Path) -> None:
    _json_edit(run / "meta.json", lambda m: m["trace"].update(manifest_sha256="0" * 64))


# -- system and workload files -----------------------------------------------------------------

SYSTEM_MALFORMED = 'name = "mine"\nextends = "hbm-lru"\n[policy\ncapacity_rows = 10\n'
SYSTEM_STRING = 'name = "mine"\nextends = "hbm-lru"\n[policy]\ncapacity_rows = "many"\n'
SYSTEM_UNKNOWN_TABLE = 'name = "mine"\nextends = "hbm-lru"\n[bogus]\nspeed = 1\n'
SYSTEM_NEGATIVE = 'name = "mine"\nextends = "hbm-lru"\n[tiers.hbm]\nread_bw_bytes_per_s = -1\n'
SYSTEM_EXTENDS_UNKNOWN = 'name = "mine"\nextends = "nope"\n'

WORKLOAD_HEAD = 'name = "w"\nbatch_size = 4\nbatches = 2\n'
WORKLOAD_TABLE = '[[tables]]\nname = "a"\nrows = 100\n'
WORKLOAD_NEGATIVE_ALPHA = WORKLOAD_HEAD + WORKLOAD_TABLE + "alpha = -1.0\n"
WORKLOAD_NO_TABLES = WORKLOAD_HEAD + "tables = []\n"
WORKLOAD_STRING = 'name = "w"\nbatch_size = "four"\nbatches = 2\n' + WORKLOAD_TABLE
WORKLOAD_UNKNOWN_KEY = WORKLOAD_HEAD + "bogus = 1\n" + WORKLOAD_TABLE
WORKLOAD_ZERO_ROWS = WORKLOAD_HEAD + '[[tables]]\nname = "a"\nrows = 0\n'


def _gzip_truncated() -> bytes:
    data = gzip.compress(CRITEO_TEXT.encode() * 50, mtime=0)
    return data[: len(data) // 2]


# -- the corpus --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """`argv` and `expect` are formatted with {tmp} (the case's folder), {out} (the output
    path, `out`), the shared inputs ({trace}, {run}, {cmp}, {sweep}, {mrc}, {tsv}) and the
    paths `setup` returns ({bad}). Each item of `expect` must be in the error line; a tuple
    is a choice (any one of them). `absent` must not be in it. `isolate`: run in a child
    process (input that may crash the process)."""

    id: str
    setup: Setup | None
    argv: tuple[str, ...]
    expect: tuple[str | tuple[str, ...], ...]
    out: str = "{tmp}/out"
    absent: tuple[str, ...] = ()
    isolate: bool = False


def case(
    id: str,
    argv: str,
    *expect: str | tuple[str, ...],
    setup: Setup | None = None,
    out: str = "{tmp}/out",
    absent: tuple[str, ...] = (),
    isolate: bool = False,
) -> Case:
    """`argv` is split on spaces (no argument here holds one)."""
    return Case(id, setup, tuple(argv.split()), tuple(expect), out, absent, isolate)


OUT_EXISTS = ("{out}", "not a folder")
# a path below a regular file: the problem is the file in the way, not permissions
BELOW_FILE = ("{tmp}/file.txt", ("not a folder", "is a file"))
NOT_EMPTY = ("{out}", "--force")
FOREIGN = ("{out}", "other files")
INPUT = ("{out}", "an input of this command")
LEFTOVER = (".out.partial", "--force")
CHECKSUM = ("{bad}/" + LOOKUPS_PART, "checksum")
EMPTY = ("{bad}", ("empty", "no lookups", "no batches", "0 lookups", "0 batches"))
# what a command that cannot resume must not suggest
NO_RESUME = ("--resume",)
NO_FORCE = ("--force",)

GEN = "generate --preset tiny --batches 2 --batch-size 4 --workers 1"
RUN = "run {trace} --system hbm-lru"
CMP = "compare {trace} --systems hbm-lru,dram --workers 1"
SWEEP = "sweep {trace} --system hbm-lru --grid policy.capacity_rows=100,1000 --workers 1"
QS = "quickstart --trace {tmp}/qtrace --batches 101 --batch-size 4 --workers 1"
PLAN = "plan --workload tiny --batches 20 --system hbm-lru --time-per-batch 1s"

CASES: list[Case] = [
    # -- generate --------------------------------------------------------------------------
    case("generate-unknown-preset", "generate --preset nope --out {out}",
         "unknown workload preset", "'nope'"),
    case("generate-neither-preset-nor-spec", "generate --out {out}", "--preset", "--spec"),
    case("generate-batches-zero", "generate --preset tiny --batches 0 --out {out}",
         "--batches", "out of range"),
    case("generate-batch-size-negative", "generate --preset tiny --batch-size -1 --out {out}",
         "--batch-size", "out of range"),
    case("generate-batches-absurd",
         "generate --preset tiny --batches 100000000000000 --out {out}",
         "--batches", "out of range"),
    case("generate-batches-not-an-integer", "generate --preset tiny --batches 1e400 --out {out}",
         "--batches", "valid int"),
    case("generate-alpha-nan", "generate --preset tiny --alpha nan --out {out}",
         "--alpha", "finite"),
    case("generate-reuse-above-one", "generate --preset tiny --reuse 1.5 --out {out}",
         "--reuse", "out of range"),
    case("generate-workers-zero", "generate --preset tiny --workers 0 --out {out}",
         "--workers", "at least 1"),
    case("generate-spec-missing", "generate --spec {tmp}/nope.toml --out {out}",
         "{tmp}/nope.toml", "no such"),
    case("generate-spec-malformed-toml", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "not valid TOML", setup=_files(**{"w.toml": SYSTEM_MALFORMED})),
    case("generate-spec-binary", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", setup=_files(**{"w.toml": b"\x00\x01\xff\xfe" * 8})),
    case("generate-spec-string-for-number", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "batch_size", "integer",
         setup=_files(**{"w.toml": WORKLOAD_STRING})),
    case("generate-spec-negative-alpha", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "tables[0].alpha", "out of range",
         setup=_files(**{"w.toml": WORKLOAD_NEGATIVE_ALPHA})),
    case("generate-spec-no-tables", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "tables", setup=_files(**{"w.toml": WORKLOAD_NO_TABLES})),
    case("generate-spec-zero-rows", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "tables[0].rows", "out of range",
         setup=_files(**{"w.toml": WORKLOAD_ZERO_ROWS})),
    case("generate-spec-unknown-key", "generate --spec {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "unknown key", "'bogus'",
         setup=_files(**{"w.toml": WORKLOAD_UNKNOWN_KEY})),
    case("generate-out-is-file", f"{GEN} --out {{out}}", *OUT_EXISTS, setup=_out_is_file),
    case("generate-out-below-file", f"{GEN} --out {{out}}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("generate-out-not-empty", f"{GEN} --out {{out}}", *NOT_EMPTY, setup=_foreign_out),
    case("generate-force-over-foreign", f"{GEN} --force --out {{out}}", *FOREIGN,
         setup=_foreign_out),
    case("generate-force-over-trace-with-user-files", f"{GEN} --force --out {{out}}",
         *FOREIGN, setup=_trace_with_user_files),
    case("generate-force-over-fake-trace", f"{GEN} --force --out {{out}}", *FOREIGN,
         setup=_fake_trace),
    case("generate-force-over-trace-with-stray-part", f"{GEN} --force --out {{out}}",
         *FOREIGN, setup=_trace_with_stray_part),
    case("generate-leftover-partial", f"{GEN} --out {{out}}", *LEFTOVER,
         setup=_leftover_partial),
    case("generate-resume-other-plan", f"{GEN} --resume --out {{out}}", "{out}", "--resume",
         setup=_leftover_plan),
    # -- ingest ----------------------------------------------------------------------------
    case("ingest-missing-file", "ingest {tsv} {tmp}/nope.tsv --dictionary --out {out}",
         "{tmp}/nope.tsv", "no such file"),
    case("ingest-empty-file", "ingest {tmp}/empty.tsv --dictionary --out {out}",
         "{tmp}/empty.tsv", "no samples", setup=_files(**{"empty.tsv": ""})),
    case("ingest-binary-file", "ingest {tmp}/bin.tsv --dictionary --out {out}",
         "{tmp}/bin.tsv:1", "malformed line",
         setup=_files(**{"bin.tsv": np.random.default_rng(3).bytes(3000)})),
    case("ingest-too-few-fields", "ingest {tmp}/short.tsv --max-ind-range 10 --out {out}",
         "{tmp}/short.tsv:11", "malformed line", "fields",
         setup=_files(**{"short.tsv": CRITEO_TEXT + "0\t1\t2\n"})),
    case("ingest-truncated-gzip", "ingest {tmp}/day.tsv.gz --dictionary --out {out}",
         "{tmp}/day.tsv.gz", ("truncated", "corrupt"),
         setup=_files(**{"day.tsv.gz": _gzip_truncated()})),
    case("ingest-folder-as-file", "ingest {tmp}/dir --dictionary --out {out}",
         "{tmp}/dir", "folder", setup=_files(**{"dir/x.tsv": CRITEO_TEXT})),
    case("ingest-no-rule", "ingest {tsv} --out {out}", "--max-ind-range", "--dictionary"),
    case("ingest-max-ind-range-negative", "ingest {tsv} --max-ind-range -3 --out {out}",
         "--max-ind-range", "-3"),
    case("ingest-batch-size-zero", "ingest {tsv} --dictionary --batch-size 0 --out {out}",
         "--batch-size"),
    case("ingest-out-is-file", "ingest {tsv} --dictionary --out {out}", *OUT_EXISTS,
         setup=_out_is_file),
    case("ingest-out-not-empty", "ingest {tsv} --dictionary --out {out}", *NOT_EMPTY,
         setup=_foreign_out),
    case("ingest-force-over-trace-with-user-files",
         "ingest {tsv} --dictionary --force --out {out}", *FOREIGN,
         setup=_trace_with_user_files),
    case("ingest-force-over-fake-trace", "ingest {tsv} --dictionary --force --out {out}",
         *FOREIGN, setup=_fake_trace),
    case("ingest-leftover-partial", "ingest {tsv} --dictionary --out {out}", *LEFTOVER,
         setup=_leftover_partial, absent=NO_RESUME),
    # -- inspect ---------------------------------------------------------------------------
    case("inspect-missing-folder", "inspect {tmp}/nope", "{tmp}/nope", "no such trace folder"),
    case("inspect-file-not-folder", "inspect {tsv}", "{tsv}", "not a folder"),
    case("inspect-not-a-trace", "inspect {tmp}/dir", "{tmp}/dir", "no manifest.json",
         setup=_files(**{"dir/notes.txt": "hello"})),
    case("inspect-manifest-missing", "inspect {bad}", "{bad}", "no manifest.json",
         setup=_trace_copy(_no_manifest)),
    case("inspect-manifest-not-json", "inspect {bad}", "{bad}/manifest.json", "not valid JSON",
         setup=_trace_copy(_manifest_not_json)),
    case("inspect-future-format-version", "inspect {bad}", "{bad}/manifest.json",
         "version 99", setup=_trace_copy(_future_version)),
    case("inspect-part-missing", "inspect {bad}", "{bad}/" + LOOKUPS_PART, "missing",
         setup=_trace_copy(_part_missing)),
    case("inspect-part-truncated", "inspect {bad}", *CHECKSUM,
         setup=_trace_copy(_part_truncated)),
    case("inspect-part-truncated-no-verify", "inspect {bad} --no-verify",
         "{bad}/" + LOOKUPS_PART, ("Parquet", "parquet"), setup=_trace_copy(_part_truncated)),
    case("inspect-part-random-bytes", "inspect {bad}", "{bad}/" + UPDATES_PART, "checksum",
         setup=_trace_copy(_part_random)),
    case("inspect-part-changed-valid-parquet", "inspect {bad}", *CHECKSUM,
         setup=_trace_copy(_part_changed)),
    case("inspect-manifest-checksum-edited", "inspect {bad}", *CHECKSUM,
         setup=_trace_copy(_manifest_sha_edited)),
    case("inspect-row-out-of-range", "inspect {bad}", "{bad}", "out of range",
         setup=_row_out_of_range, isolate=True),
    case("inspect-table-out-of-range", "inspect {bad}", "{bad}", "out of range",
         setup=_table_out_of_range, isolate=True),
    case("inspect-curve-points-one", "inspect {trace} --curve-points 1", "--curve-points"),
    # -- run -------------------------------------------------------------------------------
    case("run-unknown-system", "run {trace} --system nope --out {out}",
         "unknown system", "'nope'"),
    case("run-unknown-checkpoint-strategy",
         f"{RUN} --set checkpoint.strategy=bogus --out {{out}}",
         "checkpoint.strategy", "'bogus'"),
    case("run-unknown-set-key", f"{RUN} --set policy.bogus=1 --out {{out}}",
         "--set", "policy", "unknown key", "'bogus'"),
    case("run-unknown-set-table", f"{RUN} --set nosuch.key=3 --out {{out}}",
         "--set", "unknown key", "'nosuch'"),
    case("run-set-without-value", f"{RUN} --set policy.capacity_rows --out {{out}}",
         "--set", "'policy.capacity_rows'"),
    case("run-set-wrong-type", f"{RUN} --set policy.capacity_rows=many --out {{out}}",
         "policy.capacity_rows", "integer"),
    case("run-set-negative", f"{RUN} --set policy.capacity_rows=-5 --out {{out}}",
         "policy.capacity_rows", "-5 is out of range [0, 2^62]"),
    case("run-set-nan", f"{RUN} --set tiers.hbm.read_bw_bytes_per_s=nan --out {{out}}",
         "tiers.hbm.read_bw_bytes_per_s", "finite"),
    case("run-set-inf", f"{RUN} --set failures.mtbf_s=inf --out {{out}}",
         "failures.mtbf_s", "finite"),
    case("run-set-1e400", f"{RUN} --set policy.capacity_rows=1e400 --out {{out}}",
         "policy.capacity_rows", "integer"),
    case("run-set-zero-mtbf", f"{RUN} --set failures.mtbf_s=0 --out {{out}}",
         "failures.mtbf_s", "out of range"),
    case("run-set-absurd-capacity", f"{RUN} --set tiers.hbm.capacity_bytes=1e30 --out {{out}}",
         "tiers.hbm.capacity_bytes", "out of range (0, 10^18]"),
    case("run-cache-budget-unit-unknown", f"{RUN} --cache-budget 8XB --out {{out}}",
         "--cache-budget", "'xb'"),
    case("run-cache-budget-beside-a-set",
         f"{RUN} --cache-budget 1MiB --set policy.capacity_rows=10 --out {{out}}",
         "--cache-budget 1MiB", "both size the cache"),
    case("run-cache-budget-beyond-the-tier", f"{RUN} --cache-budget 100TiB --out {{out}}",
         "a cache of 100 TiB does not fit tier 'hbm' (74.5 GiB)"),
    case("run-set-unknown-choice", f"{RUN} --set model.optimizer=sgdx --out {{out}}",
         "model.optimizer", "'sgdx'"),
    case("run-set-unknown-tier", f"{RUN} --set policy.fast_tier=bogus --out {{out}}",
         "policy.fast_tier", "'bogus'"),
    case("run-system-missing-file", "run {trace} --system {tmp}/nope.toml --out {out}",
         "{tmp}/nope.toml", "no such"),
    case("run-system-malformed-toml", "run {trace} --system {tmp}/s.toml --out {out}",
         "{tmp}/s.toml", "not valid TOML", setup=_files(**{"s.toml": SYSTEM_MALFORMED})),
    case("run-system-string-for-number", "run {trace} --system {tmp}/s.toml --out {out}",
         "{tmp}/s.toml", "policy.capacity_rows", "integer",
         setup=_files(**{"s.toml": SYSTEM_STRING})),
    case("run-system-unknown-table", "run {trace} --system {tmp}/s.toml --out {out}",
         "{tmp}/s.toml", "unknown key", "'bogus'",
         setup=_files(**{"s.toml": SYSTEM_UNKNOWN_TABLE})),
    case("run-system-negative-bandwidth", "run {trace} --system {tmp}/s.toml --out {out}",
         "{tmp}/s.toml", "tiers.hbm.read_bw_bytes_per_s", "out of range",
         setup=_files(**{"s.toml": SYSTEM_NEGATIVE})),
    case("run-system-extends-unknown", "run {trace} --system {tmp}/s.toml --out {out}",
         "{tmp}/s.toml", "extends", "'nope'",
         setup=_files(**{"s.toml": SYSTEM_EXTENDS_UNKNOWN})),
    case("run-missing-trace", "run {tmp}/nope --system hbm-lru --out {out}",
         "{tmp}/nope", "no such trace folder"),
    case("run-neither-trace-nor-workload", "run --system hbm-lru --out {out}",
         "TRACE", "--workload"),
    case("run-batches-with-a-trace", f"{RUN} --batches 3 --out {{out}}",
         "--batches", "--workload"),
    case("run-workload-unknown", "run --workload nope --system hbm-lru --out {out}",
         "unknown workload preset", "'nope'"),
    case("run-workload-spec-negative-alpha",
         "run --workload {tmp}/w.toml --system hbm-lru --out {out}",
         "{tmp}/w.toml", "alpha", "out of range",
         setup=_files(**{"w.toml": WORKLOAD_NEGATIVE_ALPHA})),
    case("run-future-format-version", "run {bad} --system hbm-lru --out {out}",
         "{bad}/manifest.json", "version 99", setup=_trace_copy(_future_version)),
    case("run-part-random-bytes", "run {bad} --system hbm-lru --out {out}",
         "{bad}/" + UPDATES_PART, ("checksum", "Parquet"), setup=_trace_copy(_part_random)),
    case("run-part-changed-valid-parquet", "run {bad} --system hbm-lru --out {out}",
         *CHECKSUM, setup=_trace_copy(_part_changed)),
    case("run-row-out-of-range", "run {bad} --system hbm-lru --out {out}",
         "{bad}", "out of range", setup=_row_out_of_range, isolate=True),
    case("run-table-out-of-range", "run {bad} --system hbm-lru --out {out}",
         "{bad}", "out of range", setup=_table_out_of_range, isolate=True),
    case("run-empty-trace", "run {bad} --system hbm-lru --out {out}", *EMPTY,
         setup=_empty_trace),
    case("run-out-is-file", f"{RUN} --out {{out}}", *OUT_EXISTS, setup=_out_is_file),
    case("run-out-below-file", f"{RUN} --out {{out}}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("run-out-not-empty", f"{RUN} --out {{out}}", *NOT_EMPTY, setup=_foreign_out),
    case("run-force-over-foreign", f"{RUN} --force --out {{out}}", *FOREIGN,
         setup=_foreign_out),
    case("run-leftover-partial", f"{RUN} --out {{out}}", *LEFTOVER, setup=_leftover_partial),
    case("run-force-keeps-previous-on-error",
         "run {bad} --system hbm-lru --force --out {out}", *CHECKSUM,
         setup=_both(_previous("run"), _trace_copy(_part_changed))),
    # -- mrc -------------------------------------------------------------------------------
    case("mrc-sample-rate-zero", "mrc {trace} --sample-rate 0 --out {out}",
         "--sample-rate", "(0, 1]"),
    case("mrc-sample-rate-above-one", "mrc {trace} --sample-rate 1.5 --out {out}",
         "--sample-rate", "(0, 1]"),
    case("mrc-sample-rate-nan", "mrc {trace} --sample-rate nan --out {out}",
         "--sample-rate", "nan"),
    case("mrc-sizes-not-numbers", "mrc {trace} --sizes a,b --out {out}", "--sizes", "'a'"),
    case("mrc-sizes-negative", "mrc {trace} --sizes -5,10 --out {out}", "--sizes", "-5"),
    case("mrc-sizes-empty-item", "mrc {trace} --sizes 10,,20 --out {out}", "--sizes"),
    case("mrc-workload-no-tables", "mrc --workload {tmp}/w.toml --out {out}",
         "{tmp}/w.toml", "tables", setup=_files(**{"w.toml": WORKLOAD_NO_TABLES})),
    case("mrc-not-a-trace", "mrc {run} --out {out}", "{run}", "no manifest.json"),
    case("mrc-part-truncated", "mrc {bad} --out {out}", "{bad}/" + LOOKUPS_PART,
         ("checksum", "Parquet"), setup=_trace_copy(_part_truncated)),
    case("mrc-part-changed-valid-parquet", "mrc {bad} --out {out}", *CHECKSUM,
         setup=_trace_copy(_part_changed)),
    case("mrc-row-out-of-range", "mrc {bad} --out {out}", "{bad}", "out of range",
         setup=_row_out_of_range, isolate=True),
    case("mrc-table-out-of-range", "mrc {bad} --out {out}", "{bad}", "out of range",
         setup=_table_out_of_range, isolate=True),
    case("mrc-empty-trace", "mrc {bad} --out {out}", *EMPTY, setup=_empty_trace),
    case("mrc-out-is-file", "mrc {trace} --out {out}", *OUT_EXISTS, setup=_out_is_file),
    case("mrc-out-below-file", "mrc {trace} --out {out}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("mrc-force-over-foreign", "mrc {trace} --force --out {out}", *FOREIGN,
         setup=_foreign_out),
    case("mrc-leftover-partial", "mrc {trace} --out {out}", *LEFTOVER,
         setup=_leftover_partial, absent=NO_RESUME),
    # -- compare ---------------------------------------------------------------------------
    case("compare-unknown-system-among-several",
         "compare {trace} --systems hbm-lru,nope,dram --out {out}", "unknown system", "'nope'"),
    case("compare-cache-budget-beside-a-set",
         f"{CMP} --cache-budget 1MiB --set policy.capacity_bytes=2MiB --out {{out}}",
         "--cache-budget 1MiB", "policy.capacity_bytes=2MiB"),
    case("sweep-cache-budget-beside-the-grid", f"{SWEEP} --cache-budget 1MiB --out {{out}}",
         "--grid policy.capacity_rows", "both size the cache"),
    case("compare-duplicate-systems", "compare {trace} --systems hbm-lru,hbm-lru --out {out}",
         "--systems", "'hbm-lru'"),
    case("compare-empty-system-item", "compare {trace} --systems hbm-lru,,dram --out {out}",
         "--systems", "empty"),
    case("compare-workers-zero", "compare {trace} --systems hbm-lru,dram -j 0 --out {out}",
         "--workers", "at least 1"),
    case("compare-unknown-set-key", f"{CMP} --set policy.nope=3 --out {{out}}",
         "--set", "'nope'"),
    case("compare-missing-trace", "compare {tmp}/nope --systems hbm-lru,dram --out {out}",
         "{tmp}/nope", "no such trace folder"),
    case("compare-part-random-bytes",
         "compare {bad} --systems hbm-lru,dram --workers 1 --out {out}",
         "{bad}/" + UPDATES_PART, ("checksum", "Parquet"), setup=_trace_copy(_part_random)),
    case("compare-part-changed-valid-parquet",
         "compare {bad} --systems hbm-lru,dram --workers 1 --out {out}", *CHECKSUM,
         setup=_trace_copy(_part_changed)),
    case("compare-empty-trace", "compare {bad} --systems hbm-lru,dram --workers 1 --out {out}",
         *EMPTY, setup=_empty_trace),
    case("compare-out-is-file", f"{CMP} --out {{out}}", *OUT_EXISTS, setup=_out_is_file),
    case("compare-out-not-empty", f"{CMP} --out {{out}}", *NOT_EMPTY, setup=_foreign_out),
    case("compare-force-over-foreign", f"{CMP} --force --out {{out}}", *FOREIGN,
         setup=_foreign_out),
    case("compare-leftover-partial", f"{CMP} --out {{out}}", *LEFTOVER,
         setup=_leftover_partial, absent=NO_RESUME),
    case("compare-force-keeps-previous-on-error",
         "compare {bad} --systems hbm-lru,dram --workers 1 --force --out {out}",
         "{bad}/" + UPDATES_PART, ("checksum", "Parquet"),
         setup=_both(_previous("cmp"), _trace_copy(_part_random))),
    # -- sweep -----------------------------------------------------------------------------
    case("sweep-grid-without-values",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows --out {out}",
         "--grid", "'policy.capacity_rows'"),
    case("sweep-grid-empty-values",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows= --out {out}",
         "--grid", "'policy.capacity_rows='"),
    case("sweep-grid-not-numbers",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows=a,b --out {out}",
         "--grid", "policy.capacity_rows", "'a'"),
    case("sweep-grid-unknown-key",
         "sweep {trace} --system hbm-lru --grid policy.nope=1,2 --out {out}",
         "--grid", "unknown key", "'nope'"),
    case("sweep-grid-value-twice",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows=1,1 --out {out}",
         "--grid", "policy.capacity_rows", "twice"),
    case("sweep-grid-negative",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows=-1,2 --out {out}",
         "--grid", "policy.capacity_rows", "out of range"),
    case("sweep-unknown-system",
         "sweep {trace} --system nope --grid policy.capacity_rows=1,2 --out {out}",
         "unknown system", "'nope'"),
    case("sweep-part-changed-valid-parquet",
         "sweep {bad} --system hbm-lru --grid policy.capacity_rows=100,1000 --workers 1 "
         "--out {out}", *CHECKSUM, setup=_trace_copy(_part_changed)),
    case("sweep-out-below-file", f"{SWEEP} --out {{out}}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("sweep-force-over-foreign", f"{SWEEP} --force --out {{out}}", *FOREIGN,
         setup=_foreign_out),
    case("sweep-leftover-partial", f"{SWEEP} --out {{out}}", *LEFTOVER,
         setup=_leftover_partial, absent=NO_RESUME),
    case("sweep-force-keeps-previous-on-error",
         "sweep {bad} --system hbm-lru --grid policy.capacity_rows=100,1000 --workers 1 "
         "--force --out {out}", "{bad}/" + LOOKUPS_PART, "missing",
         setup=_both(_previous("sweep"), _trace_copy(_part_missing))),
    # -- report ----------------------------------------------------------------------------
    case("report-missing-folder", "report {tmp}/nope --out {out}",
         "{tmp}/nope", "no such result folder"),
    case("report-trace-is-not-a-result", "report {trace} --out {out}",
         "{trace}", "not a result folder"),
    case("report-run-without-summary", "report {bad} --out {out}", "{bad}", "summary.json",
         setup=_result_copy("run", _unlink("summary.json"))),
    case("report-run-without-batches", "report {bad} --out {out}", "{bad}",
         "batches.parquet", "missing", setup=_result_copy("run", _unlink("batches.parquet"))),
    case("report-run-without-config", "report {bad} --out {out}", "{bad}",
         "config.json", "missing", setup=_result_copy("run", _unlink("config.json"))),
    case("report-summary-not-json", "report {bad} --out {out}", "{bad}/summary.json", "JSON",
         setup=_result_copy("run", _write("summary.json", '{"system": '))),
    case("report-batches-not-parquet", "report {bad} --out {out}", "{bad}/batches.parquet",
         "Parquet", setup=_result_copy("run", _write("batches.parquet", b"PAR1 nope" * 9))),
    case("report-config-name-edited", "report {bad} --out {out}", "config.json",
         ("digest", "does not match"), setup=_result_copy("run", _config_name_changed)),
    case("report-config-number-edited", "report {bad} --out {out}", "config.json",
         ("digest", "does not match"), setup=_result_copy("run", _config_number_changed)),
    case("report-trace-digest-edited", "report {bad} --out {out}", "{bad}",
         ("digest", "does not match"), setup=_result_copy("run", _trace_digest_changed)),
    case("report-compare-without-table", "report {bad} --out {out}",
         "{bad}/comparison.parquet", "missing",
         setup=_result_copy("cmp", _unlink("comparison.parquet"))),
    case("report-compare-run-without-summary", "report {bad} --out {out}",
         "{bad}/dram", "summary.json",
         setup=_result_copy("cmp", _unlink("dram/summary.json"))),
    case("report-sweep-json-corrupt", "report {bad} --out {out}", "{bad}/sweep.json", "JSON",
         setup=_result_copy("sweep", _write("sweep.json", "{"))),
    case("report-mrc-without-parquet", "report {bad} --out {out}", "{bad}", "mrc.parquet",
         setup=_result_copy("mrc", _unlink("mrc.parquet"))),
    case("report-out-is-file", "report {run} --out {out}", *OUT_EXISTS, setup=_out_is_file),
    case("report-out-below-file", "report {run} --out {out}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("report-out-not-empty", "report {run} --out {out}", *NOT_EMPTY, setup=_foreign_out),
    case("report-force-over-foreign", "report {run} --force --out {out}", *FOREIGN,
         setup=_foreign_out),
    case("report-force-over-its-input", "report {out} --force --out {out}", *INPUT,
         setup=_previous("run")),
    case("report-leftover-partial", "report {run} --out {out}", *LEFTOVER,
         setup=_leftover_partial, absent=NO_RESUME),
    # -- fit -------------------------------------------------------------------------------
    case("fit-missing-trace", "fit {tmp}/nope --out {out}", "{tmp}/nope", "no such trace folder"),
    case("fit-neither-out-nor-json", "fit {trace}", "--out", "--json"),
    case("fit-rows-unknown", "fit {trace} --rows some --out {out}", "--rows", "'some'"),
    case("fit-max-lookups-zero", "fit {trace} --max-lookups 0 --out {out}", "--max-lookups"),
    case("fit-figure-without-check", "fit {trace} --figure {tmp}/f.png --out {out}",
         "--figure", "--check"),
    case("fit-out-exists", "fit {trace} --out {out}", "{out}", "--force", setup=_out_is_file),
    case("fit-out-is-folder", "fit {trace} --force --out {out}", "{out}", "folder",
         setup=_foreign_out),
    case("fit-out-below-file", "fit {trace} --out {out}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("fit-out-over-its-trace-manifest", "fit {bad} --force --out {bad}/manifest.json",
         "{bad}/manifest.json", "input", setup=_trace_copy(lambda t: None)),
    # a failing command leaves nothing new: the figure cannot be written (no file can be
    # made in /proc), so the spec, written first to a temporary name, is not kept either
    case("fit-check-figure-unwritable",
         "fit {trace} --check --figure /proc/replay-check.png --out {out}",
         "/proc", "cannot write"),
    case("fit-check-spec-unwritable",
         "fit {trace} --check --figure {tmp}/check.png --out /proc/replay-spec.toml",
         "/proc", "cannot write"),
    case("fit-part-changed-valid-parquet", "fit {bad} --out {out}", *CHECKSUM,
         setup=_trace_copy(_part_changed)),
    case("fit-row-out-of-range", "fit {bad} --out {out}", "{bad}", "out of range",
         setup=_row_out_of_range, isolate=True),
    case("fit-table-out-of-range", "fit {bad} --out {out}", "{bad}", "out of range",
         setup=_table_out_of_range, isolate=True),
    # -- plan ------------------------------------------------------------------------------
    case("plan-budget-unit-unknown", f"{PLAN} --cache-budget 8XB --cluster-mtbf 6h --out {{out}}",
         "--cache-budget", "'xb'"),
    case("plan-budget-zero", f"{PLAN} --cache-budget 0GiB --cluster-mtbf 6h --out {{out}}",
         "--cache-budget", "more than 0"),
    case("plan-no-mtbf", f"{PLAN} --cache-budget 1MiB --out {{out}}", "--cluster-mtbf"),
    case("plan-mtbf-both", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h --nodes 4 "
         "--node-mtbf 30d --out {out}", "--cluster-mtbf", "not both"),
    case("plan-mtbf-not-a-duration", f"{PLAN} --cache-budget 1MiB --cluster-mtbf soon "
         "--out {out}", "--cluster-mtbf", "'soon'"),
    case("plan-hit-target-above-one", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h "
         "--hit-target 1.5 --out {out}", "--hit-target", "1.5"),
    case("plan-hit-target-a-percentage-without-%", f"{PLAN} --cache-budget 1MiB "
         "--cluster-mtbf 6h --hit-target 90 --out {out}", "--hit-target", "did you mean 90%?"),
    case("plan-hit-target-not-a-number", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h "
         "--hit-target most --out {out}", "--hit-target", "'most'", "0.9 or 90%"),
    case("plan-hit-target-100%", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h "
         "--hit-target 100% --out {out}", "--hit-target", "100%"),
    case("plan-sample-rate-on-a-trace", "plan {trace} --system hbm-lru --cache-budget 1MiB "
         "--cluster-mtbf 6h --sample-rate 0.5 --out {out}", "--sample-rate", "workload"),
    case("plan-sampled-reuse", "plan --workload tiny --batches 20 --reuse 0.2 --system hbm-lru "
         "--cache-budget 1MiB --cluster-mtbf 6h --sample-rate 0.5 --out {out}", "reuse"),
    case("plan-out-not-empty", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h --out {{out}}",
         *NOT_EMPTY, setup=_foreign_out),
    case("plan-force-over-foreign", f"{PLAN} --cache-budget 1MiB --cluster-mtbf 6h --force "
         "--out {out}", *FOREIGN, setup=_foreign_out),
    # -- quickstart (only input refused before any work) -----------------------------------
    case("quickstart-out-is-file", f"{QS} --out {{out}}", *OUT_EXISTS, setup=_out_is_file),
    case("quickstart-out-below-file", f"{QS} --out {{out}}", *BELOW_FILE,
         setup=_below_file, out="{tmp}/file.txt/out"),
    case("quickstart-out-foreign-folder", f"{QS} --out {{out}}", *FOREIGN,
         setup=_foreign_out, absent=NO_FORCE),
    case("quickstart-trace-foreign-folder",
         "quickstart --trace {out} --batches 101 --batch-size 4 --workers 1 --out {tmp}/report",
         "{out}", "other files", setup=_foreign_out, absent=NO_FORCE),
    case("quickstart-batches-zero",
         "quickstart --trace {tmp}/qtrace --batches 0 --workers 1 --out {out}",
         "--batches", "out of range"),
    case("quickstart-batches-too-few-for-its-studies",
         "quickstart --trace {tmp}/qtrace --batches 1 --workers 1 --out {out}",
         "--batches", "at least 100"),
    case("quickstart-batch-size-negative",
         "quickstart --trace {tmp}/qtrace --batches 101 --batch-size -1 --workers 1 --out {out}",
         "--batch-size", "out of range"),
    case("quickstart-workers-zero", "quickstart --trace {tmp}/qtrace --workers 0 --out {out}",
         "--workers", "at least 1"),
    case("quickstart-leftover-partial", f"{QS} --out {{out}}", ".out.partial",
         setup=_leftover_partial),
]  # fmt: skip


def test_the_corpus_covers_every_command() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(CASES) >= 55
    commands = {c.argv[0] for c in CASES}
    assert commands == {
        "generate", "ingest", "inspect", "run", "mrc", "compare", "sweep", "report",
        "quickstart", "fit", "plan",
    }  # fmt: skip


# -- running a case ----------------------------------------------------------------------------


def _snapshot(*roots: Path) -> dict[str, str]:
    """Every entry below `roots`: a file by its SHA-256, a folder, a link by its target."""
    found: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                key = str(path)
                if path.is_symlink():
                    found[key] = f"link -> {os.readlink(path)}"
                elif path.is_dir():
                    found[key] = "folder"
                else:
                    found[key] = _sha256(path)
    return found


def _hidden_beside(out: Path) -> set[str]:
    """`.NAME.partial*`, `.NAME.old*` (any hidden name derived from NAME) beside `out`."""
    if not out.parent.is_dir():
        return set()
    return {p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")}


CHILD = "import sys; from replay.cli import main; sys.exit(main(sys.argv[1:]))"


def _run_case(
    argv: list[str], cwd: Path, isolate: bool, capsys: pytest.CaptureFixture[str]
) -> tuple[int | str, str, str]:
    if isolate:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, *argv],
            cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        code: int | str = proc.returncode
        if proc.returncode < 0:
            code = f"killed by signal {-proc.returncode}"
        return code, proc.stdout, proc.stderr
    capsys.readouterr()
    try:
        code = main(argv)
    except BaseException as exc:  # a traceback: what this test is here to catch
        if isinstance(exc, KeyboardInterrupt):
            raise
        code = f"raised {type(exc).__name__}"
        captured = capsys.readouterr()
        return code, captured.out, captured.err + traceback.format_exc()
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    c: Case,
    shared: Shared,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp = tmp_path / "case"
    tmp.mkdir()
    names: dict[str, Path] = {
        "tmp": tmp, "trace": shared.trace, "run": shared.run, "cmp": shared.cmp,
        "sweep": shared.sweep, "mrc": shared.mrc, "tsv": shared.tsv,
    }  # fmt: skip
    names["out"] = Path(c.out.format(**names))
    if c.setup is not None:
        names.update(c.setup(tmp, shared) or {})
    fields = {k: str(v) for k, v in names.items()}
    argv = [a.format(**fields) for a in c.argv]
    out = names["out"]
    out_used = "{out}" in " ".join(c.argv)
    existed = out.exists() or out.is_symlink()
    hidden_before = _hidden_beside(out)
    before = _snapshot(tmp, shared.base)

    monkeypatch.chdir(tmp)  # anything written to a relative path lands where it is seen
    code, stdout, stderr = _run_case(argv, tmp, c.isolate, capsys)

    shown = f"replay {' '.join(argv)}\nexit {code}\nstdout: {stdout!r}\nstderr: {stderr!r}"
    assert "Traceback" not in stdout + stderr, shown
    assert code == 2, shown
    assert stderr.startswith("replay: error: "), shown
    assert stderr.endswith("\n") and stderr.count("\n") == 1, "not one line\n" + shown
    line = stderr.rstrip("\n")
    for item in c.expect:
        choices = (item,) if isinstance(item, str) else item
        wanted = [choice.format(**fields) for choice in choices]
        assert any(w in line for w in wanted), f"wanted one of {wanted}\n{shown}"
    for item in c.absent:
        assert item not in line, f"{item!r} should not be suggested\n{shown}"
    if out_used:
        if not existed:
            assert not out.exists() and not out.is_symlink(), f"{out} was written\n{shown}"
        new_hidden = _hidden_beside(out) - hidden_before
        assert not new_hidden, f"left beside {out}: {sorted(new_hidden)}\n{shown}"
    after = _snapshot(tmp, shared.base)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"written, changed or removed: {changed[:10]}\n{shown}"


# -- outputs never overlap inputs (issue 31, item 2) ---------------------------------------
#
# For every command with --out and --force, --out pointed at each of its inputs, inside
# one, or at the folder holding one is refused and changes nothing; so is --out at a
# folder of unrelated files. All inputs are copies in the case's folder, so the snapshot
# sees any byte the command would change.

OVERLAP_SPEC = WORKLOAD_HEAD + WORKLOAD_TABLE
OVERLAP_SYSTEM = 'name = "mine"\nextends = "hbm-lru"\n'
# command -> (argv; the inputs it names, each a placeholder of the argv)
OVERLAP_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "generate": ("generate --spec {spec} --force --out {out}", ("spec",)),
    "ingest": ("ingest {tsv} --dictionary --force --out {out}", ("tsv",)),
    "run": ("run {trace} --system {system} --force --out {out}", ("trace", "system")),
    "run-workload": ("run --workload {spec} --system hbm-lru --force --out {out}", ("spec",)),
    "mrc": ("mrc {trace} --force --out {out}", ("trace",)),
    "compare": (
        "compare {trace} --systems dram,{system} --workers 1 --force --out {out}",
        ("trace", "system"),
    ),
    "sweep": (
        "sweep {trace} --system {system} --grid policy.capacity_rows=100,1000 --workers 1 "
        "--force --out {out}",
        ("trace", "system"),
    ),
    "report": ("report {run} --force --out {out}", ("run",)),
    "fit": ("fit {trace} --force --out {out}", ("trace",)),
}
RELATIONS = {
    "is": lambda path: path,
    "inside": lambda path: path / "sub" / "out",
    "holding": lambda path: path.parent,
}


def _overlap_inputs(tmp: Path, s: Shared) -> dict[str, Path]:
    """Each input in a folder of its own below {tmp}/in (so `holding` is its folder)."""
    found = {
        "trace": _copy(s.trace, tmp / "in-trace" / "trace"),
        "run": _copy(s.run, tmp / "in-run" / "run"),
        "tsv": tmp / "in-tsv" / "day.tsv",
        "spec": tmp / "in-spec" / "w.toml",
        "system": tmp / "in-system" / "mine.toml",
    }
    for key, text in (("tsv", CRITEO_TEXT), ("spec", OVERLAP_SPEC), ("system", OVERLAP_SYSTEM)):
        found[key].parent.mkdir()
        found[key].write_text(text)
    return found


def _overlap_cases() -> list[tuple[str, str, str]]:
    return [
        (command, given, relation)
        for command, (_, inputs) in OVERLAP_COMMANDS.items()
        for given in inputs
        for relation in RELATIONS
    ]


@pytest.mark.parametrize(("command", "given", "relation"), _overlap_cases(), ids=lambda v: str(v))
def test_out_never_overlaps_an_input(
    command: str,
    given: str,
    relation: str,
    shared: Shared,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, _ = OVERLAP_COMMANDS[command]

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        found = _overlap_inputs(tmp, s)
        return {**found, "out": RELATIONS[relation](found[given])}

    c = case(f"{command}-{given}-{relation}", argv, "an input of this command", setup=setup)
    test_bad_input(c, shared, tmp_path, capsys, monkeypatch)  # setup moves {out}


@pytest.mark.parametrize("command", list(OVERLAP_COMMANDS))
def test_force_never_replaces_unrelated_files(
    command: str,
    shared: Shared,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, _ = OVERLAP_COMMANDS[command]

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        found = _overlap_inputs(tmp, s)
        _trace_with_user_files(tmp, s)  # {tmp}/out: a trace plus NOTES.md and mine/
        return found

    # fit writes a file: a folder at --out is refused as a folder
    c = case(f"{command}-foreign", argv, "{out}", ("other files", "is a folder"), setup=setup)
    test_bad_input(c, shared, tmp_path, capsys, monkeypatch)
