"""A person's files inside an output, and two commands writing one output (issue 39,
items 2 and 3).

--force replaces an earlier output only when everything in it, sub-folders included, is
what replay writes there (`replay._output.Owned`): a file put in a plan's or a report's
`figures/`, however deep, is refused with one line and left as it was.

Two commands writing one output are kept apart by a claim (`replay._output.claim_output`,
an advisory `flock` on `.NAME.lock` beside the output): the second is refused with one
"in use" line, and the first finishes with an output of its own alone. The concurrent
tests start the first command, wait until its lock file appears, and stop it there
(SIGSTOP to its process group) while the second runs, so the outcome does not depend
on how fast either runs; then the first is let go.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from replay._output import (
    atomic_folder,
    check_leftover,
    check_output_folder,
    claim_output,
    foreign_entry,
    lock_path,
    release_claims,
    release_output,
)
from replay.cli import main
from replay.errors import OutputError
from replay.trace.reader import open_trace

REPLAY = [sys.executable, "-m", "replay"]
PLAN = [
    "plan", "--workload", "criteo-kaggle", "--batches", "1000", "--batch-size", "256",
    "--system", "hbm-lru", "--cache-budget", "64MiB", "--cluster-mtbf", "6h",
]  # fmt: skip
# long enough (about 3 s here) that the first writer is still at work when the test stops
# it: at 300 batches (0.8 s) a loaded CI machine once let it finish first
GENERATE = ["generate", "--preset", "criteo-kaggle", "--batches", "1200", "--batch-size", "2048"]
# claims `out` in another process and reports, on one line, what happened
CLAIM = """
import sys
from pathlib import Path
from replay._output import claim_output
from replay.errors import OutputError
try:
    claim_output(Path(sys.argv[1]))
except OutputError as exc:
    print("refused:", exc)
else:
    print("claimed")
"""


def tree(folder: Path) -> dict[str, str]:
    """SHA-256 of every file below `folder`, hidden ones included, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def other_process_claims(out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CLAIM, str(out)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("replay: error: "), err
    assert "Traceback" not in err
    return err


@pytest.fixture(autouse=True)
def _no_claims_left() -> Iterator[None]:
    yield
    release_claims()  # a failed unit test must not leave a claim to the next one


@pytest.fixture(scope="module")
def plan_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An earlier `replay plan` output (built once; tests work on copies)."""
    out = tmp_path_factory.mktemp("plan") / "plan"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REPLAY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        assert main([*PLAN, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def report_out(plan_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An earlier `replay report` output of that plan."""
    out = tmp_path_factory.mktemp("report") / "report"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REPLAY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        assert main(["report", str(plan_out), "--out", str(out)]) == 0
    assert any((out / "figures").iterdir())
    return out


# -- a person's files in an earlier output -------------------------------------------------

PERSONS_FILES = [
    "figures/notes.txt",
    "figures/mine.png",  # a PNG too: only the figures replay drew are its own
    "figures/deeper/notes.txt",
    "figures/deeper/deepest/mine.png",
    "figures/.hidden",
    "notes.txt",
]


@pytest.mark.parametrize("where", PERSONS_FILES)
def test_plan_force_keeps_a_persons_file(
    where: str, plan_out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = shutil.copytree(plan_out, tmp_path / "plan")
    (out / where).parent.mkdir(parents=True, exist_ok=True)
    (out / where).write_text("mine")
    before = tree(out)
    assert main([*PLAN, "--out", str(out), "--force"]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "holds other files, not only an earlier `replay plan` output" in err
    # named down to the first entry that is not replay's (a folder in figures/ is not)
    assert f"({'/'.join(where.split('/')[:2])} is not replay's)" in err
    assert "replay replaces only its own outputs or an empty folder" in err
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no lock file, no partial


@pytest.mark.parametrize("where", PERSONS_FILES)
def test_report_force_keeps_a_persons_file(
    where: str, plan_out: Path, report_out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = shutil.copytree(report_out, tmp_path / "report")
    (out / where).parent.mkdir(parents=True, exist_ok=True)
    (out / where).write_text("mine")
    before = tree(out)
    assert main(["report", str(plan_out), "--out", str(out), "--force"]) == 2
    err = one_error_line(capsys.readouterr().err)
    if where == "notes.txt":
        assert "holds other files, not only an earlier report (notes.txt" in err
    else:  # what figures/ holds is checked first, with its own words
        first = where.removeprefix("figures/").split("/")[0]
        assert f"figures/ holds {first!r}, not a report figure" in err
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_force_still_replaces_replays_own_outputs(
    plan_out: Path, report_out: Path, tmp_path: Path
) -> None:
    """The figures an earlier report lists are its own: --force replaces them (a figure
    it no longer draws included), and the owned check never refuses a whole output."""
    report = shutil.copytree(report_out, tmp_path / "report")
    summary = json.loads((report / "summary.json").read_text())
    summary["figures"].append({"name": "older.png"})  # drawn by an earlier version
    (report / "summary.json").write_text(json.dumps(summary))
    (report / "figures" / "older.png").write_bytes(b"png")
    assert main(["report", str(plan_out), "--out", str(report), "--force"]) == 0
    assert tree(report) == tree(report_out)
    plan = shutil.copytree(plan_out, tmp_path / "plan")
    assert main([*PLAN, "--out", str(plan), "--force"]) == 0
    assert sorted(tree(plan)) == sorted(tree(plan_out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan", "report"]


def test_compare_force_keeps_a_persons_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In an earlier compare output, a file beside the run folders or inside one."""
    trace = tmp_path / "trace"
    assert main(["generate", "--preset", "tiny", "--batches", "40", "--out", str(trace)]) == 0
    out = tmp_path / "cmp"
    args = ["compare", str(trace), "--systems", "dram", "--workers", "1", "--out", str(out)]
    assert main(args) == 0
    for where in ("notes.txt", "dram/notes.txt", "mine/notes.txt"):
        (out / where).parent.mkdir(exist_ok=True)
        (out / where).write_text("mine")
        before = tree(out)
        capsys.readouterr()
        assert main([*args, "--force"]) == 2
        err = one_error_line(capsys.readouterr().err)
        assert "holds other files, not only an earlier `replay compare`" in err
        assert f"({where} is not replay's)" in err
        assert tree(out) == before
        (out / where).unlink()
        if where.startswith("mine/"):
            (out / "mine").rmdir()
    assert main([*args, "--force"]) == 0  # its own output, all of it: replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp", "trace"]


def test_quickstart_keeps_a_persons_file_deep_in_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "qs"
    (out / "results" / "ladder" / "ssd").mkdir(parents=True)
    (out / "results" / "ladder" / "ssd" / "notes.txt").write_text("mine")
    trace = tmp_path / "trace"
    args = ["quickstart", "--out", str(out), "--trace", str(trace), "--workers", "1"]
    assert main(args) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "(results/ladder/ssd/notes.txt is not replay's)" in err
    assert (out / "results" / "ladder" / "ssd" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qs"]  # refused before generating


def test_foreign_entry(tmp_path: Path) -> None:
    owned = {"a.json": None, "figures": frozenset({"*.png"}), "runs": {"*": frozenset({"x"})}}
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "f.png").write_text("")
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "x").write_text("")
    assert foreign_entry(tmp_path, owned) is None
    (tmp_path / "runs" / "r1" / "y").write_text("")
    assert foreign_entry(tmp_path, owned) == "runs/r1/y"
    (tmp_path / "runs" / "r1" / "y").unlink()
    (tmp_path / "runs" / "x").write_text("")  # a file where a folder belongs
    assert foreign_entry(tmp_path, owned) == "runs/x"
    (tmp_path / "runs" / "x").unlink()
    (tmp_path / "figures" / "link.png").symlink_to(tmp_path / "a.json")  # never replay's
    assert foreign_entry(tmp_path, owned) == "figures/link.png"
    (tmp_path / "figures" / "link.png").unlink()
    (tmp_path / "a.json").unlink()
    (tmp_path / "a.json").mkdir()  # a folder where a file belongs
    assert foreign_entry(tmp_path, owned) == "a.json"
    # a name holding `[` is matched as a name first (a run folder "s[1]")
    assert foreign_entry(tmp_path / "runs", {"r[1]": None, "r1": frozenset({"x"})}) is None


# -- two writers of one output ---------------------------------------------------------------


def start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*REPLAY, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: stopped and let go as a whole
    )


def _claimed(out: Path) -> bool:
    """The lock file is there and holds its writer's pid: stopping the writer between
    its lock and its pid (a busy CI machine did) would leave the pid out of the message."""
    try:
        return lock_path(out).read_text().strip().isdigit()
    except OSError:
        return False


def wait_for_claim(out: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not _claimed(out):
        if proc.poll() is not None:
            raise AssertionError(f"ended before claiming {out}: {proc.communicate()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no claim of {out} after 120 s")
        time.sleep(0.01)


def second_while_first_holds(
    first: subprocess.Popen[str], out: Path, args: list[str]
) -> subprocess.CompletedProcess[str]:
    """Run `replay ARGS` while `first` (stopped) holds the claim of `out`."""
    wait_for_claim(out, first)
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        return subprocess.run([*REPLAY, *args], capture_output=True, text=True, timeout=120)
    finally:
        os.killpg(first.pid, signal.SIGCONT)


def in_use(out: Path, pid: int) -> str:
    return (
        f"replay: error: {out}: another replay command is writing this output (pid {pid}); "
        "wait for it or choose another --out\n"
    )


def test_two_plans_into_one_folder(plan_out: Path, tmp_path: Path) -> None:
    out = shutil.copytree(plan_out, tmp_path / "plan")  # both replace an earlier plan
    first = start([*PLAN, "--out", str(out), "--force"])
    other = [*PLAN[:-4], "--cache-budget", "16MiB", "--cluster-mtbf", "6h"]  # another plan
    assert "64MiB" in PLAN[-3] and "--cache-budget" not in other[:-4]
    second = second_while_first_holds(first, out, [*other, "--out", str(out), "--force"])
    _, stderr = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert second.stderr == in_use(out, first.pid)
    assert first.returncode == 0, stderr
    # the first plan's files, all of them: not one of the second's
    assert "64 MiB" in (out / "plan.md").read_text()
    assert "16 MiB" not in (out / "plan.md").read_text()
    assert json.loads((out / "plan.json").read_text()) == json.loads(
        (plan_out / "plan.json").read_text()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no lock file left


def test_two_generates_into_one_folder(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    first = start([*GENERATE, "--out", str(out), "--force"])
    second = second_while_first_holds(first, out, [*GENERATE, "--out", str(out), "--force"])
    _, stderr = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert second.stderr == in_use(out, first.pid)
    assert first.returncode == 0, stderr
    open_trace(out).verify()  # every file as its manifest says
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace"]


def test_a_killed_writer_blocks_no_one(tmp_path: Path) -> None:
    """SIGKILL leaves the lock file (and the partial folder); the kernel dropped the lock,
    so the next command claims the output, and removes the file when done."""
    out = tmp_path / "trace"
    first = start([*GENERATE, "--out", str(out)])
    wait_for_claim(out, first)
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert lock_path(out).exists()
    assert main([*GENERATE[:3], "--batches", "20", "--out", str(out), "--force"]) == 0
    open_trace(out).verify()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace"]


# -- the claim itself ------------------------------------------------------------------------


def test_claim_is_reentrant_here_and_exclusive_elsewhere(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert claim_output(out) is True
    assert claim_output(out) is False  # this process holds it already
    check_output_folder(out, force=False)  # and its checks pass through it
    refused = other_process_claims(out)
    assert refused.startswith(f"refused: {out}: another replay command is writing")
    assert f"(pid {os.getpid()})" in refused
    release_output(out, failed=False)
    assert not lock_path(out).exists()
    assert other_process_claims(out) == "claimed"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # its lock file went with it


def test_one_target_through_two_spellings(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert claim_output(tmp_path / "real" / "out") is True
    assert claim_output(tmp_path / "link" / "out") is False  # one lock file: one claim
    release_output(tmp_path / "link" / "out", failed=False)
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("fails", [False, True])
def test_atomic_folder_ends_the_claim(tmp_path: Path, fails: bool) -> None:
    out = tmp_path / "made" / "deeper" / "out"
    check_output_folder(out, force=False)  # claimed early, as commands do
    assert lock_path(out).exists()  # beside it: its parents were made for it
    failing = pytest.raises(ValueError) if fails else contextlib.nullcontext()
    with failing, atomic_folder(out, force=False) as tmp:
        (tmp / "file").write_text("x")
        assert other_process_claims(out).startswith("refused:")
        if fails:
            raise ValueError("the command failed")
    if fails:  # nothing: not the output, not the folders made for it
        assert list(tmp_path.iterdir()) == []
    else:
        assert sorted(p.name for p in out.parent.iterdir()) == ["out"]
    assert other_process_claims(out) == "claimed"


def test_a_refused_check_leaves_no_claim(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"holds other files, not only an earlier output"):
        check_output_folder(out, force=True, owned=frozenset({"plan.md"}))
    assert not lock_path(out).exists()
    assert other_process_claims(out) == "claimed"


def test_a_claim_that_ends_unwritten(tmp_path: Path) -> None:
    """A command that fails after its checks: its claim ends with it (`release_claims`,
    which `replay.cli.main` and the process's exit call), with the folders made for it."""
    out = tmp_path / "a" / "out"
    check_output_folder(out, force=False)
    release_claims()
    assert list(tmp_path.iterdir()) == []
    assert other_process_claims(out) == "claimed"


def test_a_stale_lock_file_is_no_leftover_and_blocks_no_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lock_path(out).write_text("999999\n")  # a killed command's: nobody holds its lock
    check_leftover(out, force=False, resume=False)  # not an interrupted run's leftover
    with atomic_folder(out, force=False) as tmp:
        (tmp / "file").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # and it is gone


def test_a_lock_path_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("mine")
    lock_path(tmp_path / "out").symlink_to(target)
    with pytest.raises(OutputError, match=r"cannot claim the output \(\.out\.lock: "):
        check_output_folder(tmp_path / "out", force=False)
    assert target.read_text() == "mine"


def test_a_forked_child_leaves_its_parents_claim(tmp_path: Path) -> None:
    out = tmp_path / "out"
    claim_output(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads about
        pid = os.fork()
    if pid == 0:  # the child ends what it believes it holds, as a worker's exit would
        try:
            release_output(out, failed=True)
            release_claims()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert lock_path(out).exists()
    assert other_process_claims(out).startswith("refused:")
    release_output(out, failed=False)
    assert not lock_path(out).exists()


def test_a_file_system_without_locks_writes_unclaimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some network mounts cannot lock: the output is written as before claims existed,
    rather than refused, and no lock file is left."""
    import errno
    import fcntl

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "out"
    with atomic_folder(out, force=False) as tmp:
        assert not lock_path(out).exists()
        (tmp / "file").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
