"""A FIFO and /dev/zero for every option that names a file (issue 50).

The options are found by walking the commands (the click group typer builds): every
option or argument typed as a path, every string option that `replay.cli._outputs`
knows names a file (`--system`, `--systems`, `--workload`), and every string option
whose metavar says it takes a path or a `KEY=VALUE` override (an override can name a
file: `cluster.sharding_file`). Each must have a command line in `CASES` (or a reason in
`NOT_FILES`), so an option added later fails `test_every_file_option_has_a_case` until it
is covered here.

Each case runs `python -m replay` (the console script, as a user runs it) in a child
process under an address-space limit (`RLIMIT_AS`, 4 GiB: a read until memory runs out
ends in `MemoryError` there rather than in the machine's OOM killer), killed after
`KILL_S`, and must: exit 2 with exactly one line `replay: error: ...` on stderr and no
traceback, within `LIMIT_S` (5 s; `FAST_LIMIT_S` in the normal suite, which shares the
machine with other tests) and at a peak resident size under 1 GiB, and leave the
case's folder as it was: no output, no `.partial`, no lock file.

The options that read a file are fed a FIFO (nobody writes to it: a reader that opens it
blocks forever) and /dev/zero (it never ends: a reader that reads it whole runs out of
memory); a folder argument is fed both itself and a folder whose key file
(`manifest.json`, `summary.json`) is the FIFO or a link to /dev/zero; an output is fed
the FIFO and a link to /dev/zero (a link, so that nothing is ever claimed beside the real
device, in /dev), and the FIFO with `--force`, which replaces no FIFO (nor a device: a
link to one is a link, which `--force` may replace). The whole walk takes about three
minutes on the 2-core VM, so it is a `bench` test; the normal suite runs `FAST`, one case
of each way of reading a file and an output (about 30 s with the tests beside them).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.main import get_command
from typer.models import TyperPath

from replay import _files
from replay.cli import load_commands, main
from replay.cli._outputs import NAMED_FILES
from replay.cli.app import app
from replay.errors import InputError

LIMIT_S = 5.0  # the bound on a refusal (the walk, a bench test on a quiet machine)
# the normal suite's bound: it runs beside other tests on 2 cores, where `replay plan`'s
# imports alone (matplotlib, for its figures) took 3 to 9 s at a load of 12; a reader
# that waits on a FIFO or reads /dev/zero runs into KILL_S or RLIMIT_AS all the same
FAST_LIMIT_S = 15.0
KILL_S = 20.0  # a child still running then has hung (it is killed and the case fails)
AS_LIMIT_BYTES = 4 << 30
RSS_LIMIT_BYTES = 1 << 30
# string options whose metavar says they take a path, or an override that can name one
FILE_METAVARS = frozenset({"PATH", "FILE", "DIR", "KEY=VALUE", "KEY=V1,V2,..."})

CLUSTER = "--set cluster.nodes=2 --set cluster.gpus_per_node=2"
PLAN = "--cache-budget 1MiB --cluster-mtbf 6h --time-per-batch 1s"

# (command, parameter) -> its command line: {bad} is the hostile path; {trace}, {run} and
# {tsv} the shared valid inputs; {out} an output in the case's folder.
CASES: dict[tuple[str, str], str] = {
    ("generate", "spec"): "generate --spec {bad} --out {out}",
    ("generate", "out"): "generate --preset tiny --batches 2 --workers 1 --out {bad}",
    ("ingest", "files"): "ingest {bad} --dictionary --out {out}",
    ("ingest", "out"): "ingest {tsv} --dictionary --out {bad}",
    ("inspect", "trace"): "inspect {bad}",
    ("inspect", "workload"): "inspect --workload {bad} --batches 2",
    ("run", "trace"): "run {bad} --system hbm-lru --out {out}",
    ("run", "system"): "run {trace} --system {bad} --out {out}",
    ("run", "out"): "run {trace} --system hbm-lru --out {bad}",
    ("run", "overrides"): f"run {{trace}} --system hbm-lru {CLUSTER} "
    "--set cluster.sharding_file={bad} --out {out}",
    ("run", "workload"): "run --workload {bad} --batches 2 --system hbm-lru --out {out}",
    ("mrc", "trace"): "mrc {bad} --out {out}",
    ("mrc", "out"): "mrc {trace} --out {bad}",
    ("mrc", "workload"): "mrc --workload {bad} --batches 2 --out {out}",
    ("compare", "trace"): "compare {bad} --systems hbm-lru,dram --workers 1 --out {out}",
    ("compare", "systems"): "compare {trace} --systems hbm-lru,{bad} --workers 1 --out {out}",
    ("compare", "out"): "compare {trace} --systems hbm-lru,dram --workers 1 --out {bad}",
    ("compare", "overrides"): f"compare {{trace}} --systems hbm-lru,dram --workers 1 {CLUSTER} "
    "--set cluster.sharding_file={bad} --out {out}",
    ("compare", "workload"): "compare --workload {bad} --batches 2 --systems hbm-lru,dram "
    "--workers 1 --out {out}",
    ("sweep", "trace"): "sweep {bad} --system hbm-lru --grid policy.capacity_rows=10,100 "
    "--workers 1 --out {out}",
    ("sweep", "system"): "sweep {trace} --system {bad} --grid policy.capacity_rows=10,100 "
    "--workers 1 --out {out}",
    # `sweep` refuses a [cluster] before it would read a sharding plan
    ("sweep", "grid"): f"sweep {{trace}} --system hbm-lru {CLUSTER} "
    "--grid cluster.sharding_file={bad} --workers 1 --out {out}",
    ("sweep", "out"): "sweep {trace} --system hbm-lru --grid policy.capacity_rows=10,100 "
    "--workers 1 --out {bad}",
    ("sweep", "overrides"): f"sweep {{trace}} --system hbm-lru {CLUSTER} "
    "--set cluster.sharding_file={bad} --grid policy.capacity_rows=10,100 --workers 1 "
    "--out {out}",
    ("sweep", "workload"): "sweep --workload {bad} --batches 2 --system hbm-lru "
    "--grid policy.capacity_rows=10,100 --workers 1 --out {out}",
    ("plan", "trace"): f"plan {{bad}} --system hbm-lru {PLAN} --out {{out}}",
    ("plan", "systems"): f"plan {{trace}} --system {{bad}} {PLAN} --out {{out}}",
    ("plan", "out"): f"plan {{trace}} --system hbm-lru {PLAN} --out {{bad}}",
    ("plan", "workload"): f"plan --workload {{bad}} --batches 2 --system hbm-lru {PLAN} "
    "--out {out}",
    ("plan", "sets"): f"plan {{trace}} --system hbm-lru {CLUSTER} "
    f"--set cluster.sharding_file={{bad}} {PLAN} --out {{out}}",
    ("report", "results"): "report {bad} --out {out}",
    ("report", "out"): "report {run} --out {bad}",
    ("fit", "trace"): "fit {bad} --out {out}",
    ("fit", "out"): "fit {trace} --out {bad}",
    ("fit", "figure"): "fit {trace} --check --out {out} --figure {bad}",
    ("fit", "locality_stats"): "fit --locality-stats {bad} --out {out}",
    ("fit", "tbe_config"): "fit --tbe-config {bad} --out {out}",
    ("fit", "torchrec_configs"): "fit --torchrec-configs {bad} --batch-size 8 --out {out}",
    ("quickstart", "out"): "quickstart --batches 101 --workers 1 --out {bad}",
    ("quickstart", "trace"): "quickstart --batches 101 --workers 1 --trace {bad} --out {out}",
    ("bench replay", "trace"): "bench replay --trace {bad} --batches 2 --repeats 1",
    ("bench checkpoint", "trace"): "bench checkpoint --trace {bad} --batches 2",
    ("bench libcachesim", "lcs_python"): "bench libcachesim --lcs-python {bad} --batches 2",
    ("export torchrec-plan", "plan_dir"): "export torchrec-plan {bad} --out {out}",
    ("export torchrec-plan", "out"): "export torchrec-plan {run} --out {bad}",
    ("export tbe-config", "workload"): "export tbe-config --workload {bad} --out {out}",
    ("export tbe-config", "out"): "export tbe-config --workload tiny --out {bad}",
    ("record merge", "rank_dirs"): "record merge {bad} --out {out}",
    ("record merge", "out"): "record merge {trace} --out {bad}",
    ("diff", "a"): "diff {bad} {run}",
    ("diff", "b"): "diff {run} {bad}",
    ("schema", "validate"): "schema plan --validate {bad}",
}
# options the walk finds that name no file, and why
NOT_FILES: dict[tuple[str, str], str] = {
    ("export torchrec-plan", "module"): "a Python attribute path in the model, not a file",
}
# arguments that name a folder, and the file in it a command reads first
FOLDER_KEY_FILES: dict[tuple[str, str], str] = {
    ("inspect", "trace"): "manifest.json",
    ("run", "trace"): "manifest.json",
    ("mrc", "trace"): "manifest.json",
    ("compare", "trace"): "manifest.json",
    ("sweep", "trace"): "manifest.json",
    ("plan", "trace"): "manifest.json",
    ("fit", "trace"): "manifest.json",
    ("report", "results"): "summary.json",
    ("bench replay", "trace"): "manifest.json",
    ("record merge", "rank_dirs"): "manifest.json",
    ("diff", "a"): "summary.json",
    ("diff", "b"): "summary.json",
}
# one case of each way a file is read, for the normal suite: a spec (TOML), a system, a
# sharding plan (JSON, through --set), a workload, locality statistics, a trace's
# manifest, a result folder's JSON, Criteo input, an output
FAST = [
    ("generate", "spec", "fifo"),
    ("run", "system", "zero"),
    ("run", "overrides", "fifo"),
    ("plan", "sets", "zero"),
    ("plan", "workload", "zero"),
    ("fit", "locality_stats", "fifo"),
    ("inspect", "trace", "zero-in-folder"),
    ("report", "results", "fifo-in-folder"),
    ("ingest", "files", "zero"),
    ("run", "out", "zero"),
    ("fit", "out", "fifo-force"),
]


def _walk() -> set[tuple[str, str]]:
    """(command, parameter) of every option or argument that may name a file."""
    load_commands()
    found: set[tuple[str, str]] = set()

    def visit(command: object, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                visit(sub, [*path, name])
            return
        for param in command.params:  # type: ignore[attr-defined]
            names_a_file = (
                isinstance(param.type, TyperPath)
                or param.name in NAMED_FILES
                or getattr(param, "metavar", None) in FILE_METAVARS
            )
            if names_a_file:
                found.add((" ".join(path), param.name))

    visit(get_command(app), [])
    return found


def test_every_file_option_has_a_case() -> None:
    walked = _walk()
    assert ("run", "system") in walked and ("fit", "locality_stats") in walked
    missing = sorted(walked - CASES.keys() - NOT_FILES.keys())
    assert not missing, f"options that name a file with no case here: {missing}"
    gone = sorted((CASES.keys() | NOT_FILES.keys()) - walked)
    assert not gone, f"cases of options the commands no longer have: {gone}"


# -- the shared valid inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    trace: Path
    run: Path
    tsv: Path


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    base = tmp_path_factory.mktemp("hostile-shared")
    s = Shared(base / "trace", base / "run", base / "day.tsv")
    argv = ["generate", "--preset", "tiny", "--batches", "6", "--batch-size", "16",
            "--workers", "1", "--out", str(s.trace)]  # fmt: skip
    assert main(argv) == 0
    assert main(["run", str(s.trace), "--system", "hbm-lru", "--out", str(s.run)]) == 0
    s.tsv.write_text("\t".join(["0", *["1"] * 13, *["0000000a"] * 26]) + "\n")
    return s


# -- a case --------------------------------------------------------------------------------


def _limit_memory() -> None:  # in the child, before it runs replay
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _hostile(tmp: Path, key: tuple[str, str], kind: str, shared: Shared) -> Path:
    """The hostile path of `kind`: `fifo`, `zero` (/dev/zero itself, or a link to it for
    an output), or `fifo-in-folder` / `zero-in-folder` (a copy of the shared trace or
    run folder whose key file is the FIFO or a link to /dev/zero)."""
    is_output = _is_output(key)
    kind = kind.removesuffix("-force")
    if kind.endswith("-in-folder"):
        name = FOLDER_KEY_FILES[key]
        folder = tmp / "in"
        source = shared.run if name == "summary.json" else shared.trace
        folder.mkdir()
        for item in source.rglob("*"):  # links to the shared files: nothing copied
            target = folder / item.relative_to(source)
            if item.is_dir():
                target.mkdir(exist_ok=True)
            elif item.name != name:
                target.symlink_to(item)
        _make(folder / name, kind.split("-")[0])
        return folder
    if kind == "zero" and not is_output:
        return Path("/dev/zero")
    bad = tmp / "bad"
    _make(bad, kind)
    return bad


def _make(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


# `python -m replay` that writes its own peak resident size (VmHWM, its memory map's) to
# the file named by its first argument at exit (the console runs the atexit functions
# before os._exit): ru_maxrss would keep the high-water mark of the process it was
# forked from, this test runner, across the exec (1,352 MiB on a busy xdist worker)
_PEAK = """
import atexit, runpy, sys
peak_file = sys.argv.pop(1)
def _peak():
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(peak_file, "w") as out:
        out.write(str(kib * 1024))
atexit.register(_peak)
sys.argv[0] = "replay"
runpy.run_module("replay", run_name="__main__", alter_sys=True)
"""


def _run(argv: list[str], cwd: Path) -> tuple[int | str, str, float, int]:
    """(exit code or how it died, stderr, seconds, peak resident bytes) of `python -m
    replay ARGV`, killed after KILL_S."""
    err_path = cwd.parent / f"{cwd.name}.stderr"
    peak_path = cwd.parent / f"{cwd.name}.peak"
    started = time.perf_counter()
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _PEAK, str(peak_path), *argv], cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=_limit_memory,
        )  # fmt: skip
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            elapsed = time.perf_counter() - started
            if pid:
                break
            if elapsed > KILL_S:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9  # reaped here: Popen must not wait for it again
                return f"hung: killed after {KILL_S:.0f} s", err_path.read_text(), elapsed, 0
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    code: int | str = proc.returncode
    if proc.returncode < 0:
        code = f"killed by signal {-proc.returncode}"
    # no peak file: the child ended without its atexit functions; its rusage then (an
    # upper bound: the runner's own high-water mark is in it)
    peak = int(peak_path.read_text()) if peak_path.exists() else usage.ru_maxrss * 1024
    return code, err_path.read_text(), elapsed, peak


def _check(
    key: tuple[str, str], kind: str, shared: Shared, tmp_path: Path, limit_s: float = LIMIT_S
) -> None:
    tmp = tmp_path / "case"
    tmp.mkdir()
    bad = _hostile(tmp, key, kind, shared)
    fields = {"bad": bad, "out": tmp / "out", "trace": shared.trace, "run": shared.run,
              "tsv": shared.tsv}  # fmt: skip
    argv = [a.format(**fields) for a in CASES[key].split()]
    if kind.endswith("-force"):
        argv.append("--force")
    before = _listing(tmp)
    code, stderr, seconds, rss = _run(argv, tmp)
    shown = f"replay {' '.join(argv)}\nexit {code} in {seconds:.2f} s\nstderr: {stderr!r}"
    assert "Traceback" not in stderr, shown
    assert code == 2, shown
    assert stderr.startswith("replay: error: ") and stderr.count("\n") == 1, shown
    assert seconds < limit_s, shown
    assert rss < RSS_LIMIT_BYTES, f"peak {rss / 2**20:.0f} MiB\n{shown}"
    left = sorted(_listing(tmp) ^ before)
    assert not left, f"written or removed in the case's folder: {left}\n{shown}"


def _is_output(key: tuple[str, str]) -> bool:
    return key[1] in ("out", "figure") or key == ("quickstart", "trace")


def _all_cases() -> list[tuple[str, str, str]]:
    found = []
    for key in CASES:
        kinds = ["fifo", "zero"]
        if key in FOLDER_KEY_FILES:
            kinds += ["fifo-in-folder", "zero-in-folder"]
        if _is_output(key):
            kinds.append("fifo-force")  # --force replaces no FIFO
        found += [(*key, kind) for kind in kinds]
    return found


@pytest.mark.parametrize(("command", "param", "kind"), FAST, ids=lambda v: str(v))
def test_a_hostile_file_is_refused(
    command: str, param: str, kind: str, shared: Shared, tmp_path: Path
) -> None:
    _check((command, param), kind, shared, tmp_path, limit_s=FAST_LIMIT_S)


@pytest.mark.bench
@pytest.mark.parametrize(("command", "param", "kind"), _all_cases(), ids=lambda v: str(v))
def test_every_option_refuses_a_hostile_file(
    command: str, param: str, kind: str, shared: Shared, tmp_path: Path
) -> None:
    _check((command, param), kind, shared, tmp_path)


def test_the_fast_cases_are_cases() -> None:
    assert set(FAST) <= set(_all_cases())


# the row of docs/troubleshooting.md's table of limits for each kind a user can name
DOC_ROWS = {
    _files.SPEC: "| system or workload spec",
    _files.LOCALITY_STATS: "| locality statistics",
    _files.SHARDING_PLAN: "| sharding plan",
    _files.TORCHREC_STATS: "| TorchRec statistics",
    _files.MANIFEST: "| trace manifest",
    _files.RESULT_JSON: "| a result folder's JSON",
    _files.TBE_CONFIG: "| FBGEMM TBE config",
    _files.TORCHREC_CONFIGS: "| TorchRec table configs",
}


def test_the_limits_are_the_documented_ones() -> None:
    assert set(_files.KINDS) - set(DOC_ROWS) == {_files.STATE_JSON}  # replay's own files
    text = (Path(__file__).parents[1] / "docs" / "troubleshooting.md").read_text()
    for kind, start in DOC_ROWS.items():
        (row,) = [line for line in text.splitlines() if line.startswith(start)]
        assert f"| {_files._size(kind.limit_bytes)} |" in row, (kind, row)


def test_the_opener_refuses_what_is_no_regular_file(tmp_path: Path) -> None:
    """In-process: each kind of special file by name, a file over the limit before it is
    read, and a file that grows past the limit between the look and the read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    kind = _files.FileKind("a test file", 16, "")
    for path, what in ((fifo, "is a FIFO (named pipe), not a regular file"),
                       (Path("/dev/zero"), "is a character device, not a regular file"),
                       (tmp_path, "is a folder, not a file"),
                       (tmp_path / "nope", "no such file")):  # fmt: skip
        with pytest.raises(InputError, match=re.escape(f"{path}: {what}")):
            _files.read_bytes(path, kind)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 16)
    assert _files.read_bytes(small, kind) == b"x" * 16
    small.write_bytes(b"x" * 17)
    with pytest.raises(InputError, match="17 B, more than the 16 B that a test file may hold"):
        _files.read_bytes(small, kind)
    proc = tmp_path / "proc"  # a size of 0 that reads as more: what /proc files do
    proc.symlink_to("/proc/self/status")
    with pytest.raises(InputError, match="more than the 16 B that a test file may hold"):
        _files.read_bytes(proc, kind)
    with pytest.raises(InputError, match="not UTF-8 text"):
        small.write_bytes(b"\xff")
        _files.read_text(small, kind)


def test_resume_over_fifos_in_the_partial_folder(tmp_path: Path) -> None:
    """A FIFO where `--resume` looks for its own files (the plan, a finished part) is no
    file of a finished step: the command starts that step over instead of waiting on it."""
    generate = ["generate", "--preset", "tiny", "--batches", "700", "--batch-size", "1024",
                "--workers", "1", "--out", str(tmp_path / "trace")]  # fmt: skip
    env = {**os.environ, "REPLAY_KILL_AT": "trace:part#1"}  # killed after its first part
    killed = subprocess.run([sys.executable, "-m", "replay", *generate], env=env,
                            capture_output=True, timeout=120, check=False)  # fmt: skip
    assert killed.returncode < 0, killed.stderr
    part = tmp_path / ".trace.partial" / "lookups" / "part-00000.parquet"
    part.unlink()
    os.mkfifo(part)
    env.pop("REPLAY_KILL_AT")
    for argv in (generate, ["run", "--workload", "tiny", "--batches", "20", "--system",
                            "hbm-lru", "--out", str(tmp_path / "run")]):  # fmt: skip
        if argv[0] == "run":
            partial = tmp_path / ".run.partial"
            partial.mkdir()
            for name in (".plan.json", "meta.json"):
                os.mkfifo(partial / name)
        done = subprocess.run([sys.executable, "-m", "replay", *argv, "--resume"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("command", ["generate", "run", "fit"])
def test_force_over_a_fifo_where_the_output_is_built(
    tmp_path: Path, shared: Shared, command: str
) -> None:
    """What is in the way of an output's temporary name (`.out.partial` of a folder,
    `.out.tmp` of fit's file) is removed: a FIFO there is unlinked, never opened
    (`shutil.rmtree` of a FIFO opened it and waited for a writer; so did writing it)."""
    argv = {
        "generate": ["generate", "--preset", "tiny", "--batches", "2", "--workers", "1"],
        "run": ["run", "--workload", "tiny", "--batches", "2", "--system", "hbm-lru"],
        "fit": ["fit", str(shared.trace)],
    }[command]
    os.mkfifo(tmp_path / (".out.tmp" if command == "fit" else ".out.partial"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "replay", *argv, "--out", str(out), "--force"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
