"""The progress display (`replay.cli._progress`, issue 44 item 5): on a terminal every
long command says what it does and how far it is; in pipes, files and CI logs nothing is
drawn and the output is what the command prints without a display.

A terminal is faked by patching `replay.cli._progress.show_progress` (the display then
draws on the test's captured stderr as on a terminal); the stages and counts the commands
feed it are recorded by wrapping `Display.stage` and `Display.update`. One test runs
`replay run` under a real pseudo-terminal, stdout a pipe, and interrupts it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay.cli import _progress, main
from replay.cli._progress import Display, display

DATA = Path(__file__).parent / "data"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERASE_LINE = "\x1b[2K"


class Recorded:
    """What the commands told their displays: ("stage", "COMMAND: NAME", total) and
    ("update", done, total) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any]] = []

    def stages(self) -> list[str]:
        return [name for kind, name, _ in self.events if kind == "stage"]

    def counts(self, stage: str) -> list[tuple[int, int | None]]:
        """The (done, total) updates of the first stage named `stage`."""
        counts: list[tuple[int, int | None]] = []
        inside = False
        for kind, a, b in self.events:
            if kind == "stage":
                if inside:
                    break
                inside = a == stage
            elif inside:
                counts.append((a, b))
        return counts

    def assert_counts_to_the_end(self, stage: str, *, steps: int = 2) -> None:
        """The stage's count never goes back, ends at its total, and advanced at least
        `steps` times on the way."""
        counts = self.counts(stage)
        assert counts, f"no count in {stage!r}: {self.events}"
        done = [d for d, _ in counts]
        total = counts[-1][1]
        assert done == sorted(done), counts
        assert total is not None and done[-1] == total, counts
        assert len(set(done)) >= steps, counts


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """stderr counts as a terminal; every update reaches rich; the calls are recorded."""
    recorded = Recorded()
    real_stage, real_update = Display.stage, Display.update

    def stage(self: Display, name: str, *, total: int | None = None, unit: str = "") -> None:
        recorded.events.append(("stage", f"{self.command}: {name}", total))
        real_stage(self, name, total=total, unit=unit)

    def update(self: Display, done: int, total: int | None = None) -> None:
        recorded.events.append(("update", done, total if total is not None else self._total))
        real_update(self, done, total)

    monkeypatch.setattr(_progress, "show_progress", lambda: True)
    monkeypatch.setattr(_progress, "MIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(Display, "stage", stage)
    monkeypatch.setattr(Display, "update", update)
    yield recorded


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is not a terminal (under pytest it is a capture anyway: said explicitly)."""
    monkeypatch.setattr(_progress, "show_progress", lambda: False)


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err


def _drawn(err: str, *shown: str) -> None:
    """The display drew `shown` on stderr and erased its line at the end."""
    plain = ESCAPE.sub("", err)
    for text in shown:
        assert text in plain, plain
    assert err.rstrip("\n").endswith(ERASE_LINE) or ERASE_LINE in err.splitlines()[-1]


# -- the display itself ---------------------------------------------------------------------


def test_nothing_is_written_when_stderr_is_not_a_terminal(
    pipe: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with display("run") as progress:
        assert not progress.shown
        progress.stage("replaying", total=10, unit="batches")
        for done in range(1, 11):
            progress.batches(done, 10)
        progress.advance(3)
        progress.around(print)("a line")
    assert capsys.readouterr() == ("a line\n", "")


def test_a_terminal_gets_the_stage_the_count_and_a_cleared_line(
    terminal: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    with display("run") as progress:
        assert progress.shown
        progress.stage("replaying", total=1000, unit="batches")
        progress.batches(250, 1000)
        progress.stage("writing [the] run folder")  # brackets are not rich markup
        progress.around(print)("printed between frames")
    out, err = capsys.readouterr()
    assert out == "printed between frames\n"
    plain = ESCAPE.sub("", err)
    assert "run: replaying" in plain and "250/1,000 batches" in plain
    assert "run: writing [the] run folder" in plain
    assert err.endswith(ERASE_LINE)  # the last thing drawn is the line's erasure


def test_sizes_are_counted_in_binary_units(
    terminal: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    with display("ingest") as progress:
        progress.stage("reading", unit="bytes")
        progress.update(3 * 2**20, 12 * 2**20)
    assert "3 MiB/12 MiB" in ESCAPE.sub("", capsys.readouterr().err)


def test_updates_reach_rich_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A callback per batch costs a clock read: rich hears of a count at most every
    MIN_INTERVAL_S, and always of the last one."""
    monkeypatch.setattr(_progress, "show_progress", lambda: True)
    clock = [100.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: clock[0])
    pushed: list[int] = []
    with display("run") as progress:
        live = progress._live
        real = live.update
        monkeypatch.setattr(
            live,
            "update",
            lambda task, **kw: (pushed.append(kw.get("completed")), real(task, **kw)),
        )
        progress.stage("replaying", total=1000, unit="batches")
        for done in range(1, 1001):
            clock[0] += 0.001  # 1 ms a batch: 1 s in all
            progress.batches(done, 1000)
    counts = [c for c in pushed if c is not None]
    assert counts[-1] == 1000
    each = round(1.0 / _progress.MIN_INTERVAL_S)  # in the 1 s, and the last
    assert each - 1 <= len(counts) <= each + 1
    assert each + _progress.REFRESH_PER_SECOND <= 10  # rich's own redraws besides
    capsys.readouterr()


def test_an_interrupt_clears_the_line_and_goes_on_up(
    terminal: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(KeyboardInterrupt), display("run") as progress:
        progress.stage("replaying", total=10, unit="batches")
        progress.batches(5, 10)
        raise KeyboardInterrupt
    assert capsys.readouterr().err.endswith(ERASE_LINE)


# -- every long command ---------------------------------------------------------------------


# tiny's lookups in 4 batches of 64 samples: row groups (and so batch ranges, counts) of
# 4 batches, where one would hold the whole small trace
_GROUP_LOOKUPS = 4 * 384


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workloads generated on the fly come in row groups of 4 batches too."""
    monkeypatch.setattr("replay.trace.format.ROW_GROUP_TARGET_LOOKUPS", _GROUP_LOOKUPS)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small trace of 40 batches in 10 row groups."""
    trace = tmp_path_factory.mktemp("progress") / "trace"
    argv = ["generate", "--preset", "tiny", "--batches", "40", "--batch-size", "64",
            "--workers", "1", "--out", str(trace)]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("replay.trace.format.ROW_GROUP_TARGET_LOOKUPS", _GROUP_LOOKUPS)
        assert main(argv) == 0
    manifest = json.loads((trace / "manifest.json").read_text())
    assert manifest["layout"]["batches_per_row_group"] == 4
    return trace


def _pipe_and_terminal(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[object],
) -> tuple[tuple[str, str], tuple[str, str]]:
    """(stdout, stderr) of `argv` with stderr a pipe, then as a terminal."""
    with monkeypatch.context() as patch:
        patch.setattr(_progress, "show_progress", lambda: False)
        piped = _cli(capsys, *argv)
    return piped, _cli(capsys, *argv)


def test_run(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    piped, shown = _pipe_and_terminal(
        capsys, monkeypatch, ["run", small, "-s", "hbm-lru", "-o", tmp_path / "r", "--force",
                              "--set", "policy.capacity_rows=100", "--json"],
    )  # fmt: skip
    assert piped == (shown[0], "")  # the JSON byte for byte; nothing on stderr
    _drawn(shown[1], "run: checking the inputs", "run: replaying", "run: writing the run folder")
    recorded = terminal
    assert recorded.stages()[-4:] == [
        "run: replaying",
        "run: finishing the replay",
        "run: checking the trace's checksums",
        "run: writing the run folder",
    ]
    recorded.assert_counts_to_the_end("run: replaying")
    assert recorded.counts("run: replaying")[-1] == (40, 40)


def test_run_on_the_fly_with_statistics(
    terminal: Recorded, groups: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case (`--workload`), with the extra statistics pass counted too."""
    _cli(capsys, "run", "--workload", "tiny", "--batches", "40", "--batch-size", "64",
         "-s", "hbm-lru",
         "-o", tmp_path / "r", "--inspect")  # fmt: skip
    terminal.assert_counts_to_the_end("run: replaying")
    assert "run: finishing the replay" in terminal.stages()


def test_run_on_a_cluster_counts_batches(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # the replay merges ranges up to RANK_LOOKUPS a GPU: the small trace would be one
    # call, so merge less for the count to have steps to show
    monkeypatch.setattr("replay.engine.cluster.RANK_LOOKUPS", 64)
    _cli(capsys, "run", small, "-s", "hbm-lru", "--set", "cluster.nodes=2",
         "--set", "cluster.gpus_per_node=2", "-o", tmp_path / "r")  # fmt: skip
    terminal.assert_counts_to_the_end("run: replaying")


def test_compare_and_sweep(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    piped, shown = _pipe_and_terminal(
        capsys, monkeypatch, ["compare", small, "-s", "hbm-lru,hbm-lfu", "-j", "1",
                              "-o", tmp_path / "c", "--force", "--json"],
    )  # fmt: skip
    assert piped[0] == shown[0]
    _drawn(shown[1], "compare: trace statistics", "compare: replaying", "2/2 runs")
    terminal.assert_counts_to_the_end("compare: replaying")
    # the statistics read 1 M lookups at a time: the small trace is one chunk
    terminal.assert_counts_to_the_end("compare: trace statistics", steps=1)
    monkeypatch.setattr("replay.cli.sweep._ANNOUNCE_CHECKING", 2)
    terminal.events.clear()
    out, _ = _cli(capsys, "sweep", small, "-s", "hbm-lru", "-j", "1", "-o", tmp_path / "s",
                    "--grid", "policy.capacity_rows=100,200,400")  # fmt: skip
    assert "sweep: 3 runs, 1 at once" in out  # the sweep's own line stays on stdout
    terminal.assert_counts_to_the_end("sweep: checking points")
    terminal.assert_counts_to_the_end("sweep: replaying")


def test_generate(
    terminal: Recorded, groups: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = _cli(capsys, "generate", "--preset", "tiny", "--batches", "40", "--batch-size",
                    "64", "--workers", "1", "--out", tmp_path / "t")  # fmt: skip
    assert out.startswith("wrote ")
    _drawn(err, "generate: generating")
    terminal.assert_counts_to_the_end("generate: generating")


def test_inspect_and_mrc(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    piped, shown = _pipe_and_terminal(capsys, monkeypatch, ["inspect", small, "--json"])
    assert piped == (shown[0], "")
    _drawn(shown[1], "inspect: checking the trace's checksums", "inspect: reading the lookups")
    terminal.assert_counts_to_the_end("inspect: reading the lookups", steps=1)
    for extra in ([], ["--sample-rate", "0.5"]):
        terminal.events.clear()
        piped, shown = _pipe_and_terminal(
            capsys, monkeypatch, ["mrc", small, "--json", "-o", tmp_path / "m", "--force", *extra]
        )
        assert piped == (shown[0], "")
        _drawn(shown[1], "mrc: reading the lookups", "mrc: writing")
        terminal.assert_counts_to_the_end("mrc: reading the lookups")
    terminal.events.clear()
    with monkeypatch.context() as patch:
        patch.setattr("replay.trace.format.ROW_GROUP_TARGET_LOOKUPS", _GROUP_LOOKUPS)
        _cli(capsys, "mrc", "--workload", "tiny", "--batches", "40", "--batch-size", "64")
    terminal.assert_counts_to_the_end("mrc: reading the lookups")


def _tsv(path: Path, lines: int) -> Path:
    row = "\t".join(["0"] + ["1"] * 13 + [f"{i:08x}" for i in range(26)])
    path.write_bytes(gzip.compress(("\n".join([row] * lines) + "\n").encode(), mtime=0))
    return path


def test_ingest(terminal: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [_tsv(tmp_path / f"day_{i}.tsv.gz", 64) for i in range(3)]
    out, err = _cli(capsys, "ingest", *files, "--max-ind-range", "1000", "--batch-size", "16",
                    "--out", tmp_path / "criteo")  # fmt: skip
    assert out.startswith("ingested 192 samples")
    _drawn(err, "ingest: reading Criteo TSV")
    terminal.assert_counts_to_the_end("ingest: reading Criteo TSV")
    terminal.events.clear()
    tiny = [DATA / "fbgemm_tiny.pt", DATA / "fbgemm_tiny_int32.pt"]
    out, err = _cli(capsys, "ingest", "--format", "fbgemm", *tiny, "--out", tmp_path / "fb")
    _drawn(err, "ingest: reading FBGEMM trace files", "2/2 files")
    assert terminal.counts("ingest: reading FBGEMM trace files") == [(1, 2), (2, 2)]


def test_plan_report_and_bench(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Commands without a count: their stages in order, each with its elapsed time."""
    out, err = _cli(capsys, "plan", "--workload", "tiny", "--batches", "60", "--system",
                    "hbm-lru", "--cache-budget", "1MiB", "--hit-target", "0.5",
                    "--cluster-mtbf", "6h", "--time-per-batch", "200ms", "--draws", "50",
                    "--out", tmp_path / "plan")  # fmt: skip
    assert out.startswith("Cache: ")
    stages = terminal.stages()
    assert stages[0] == "plan: planning" and stages[-1].startswith("plan: writing")
    assert any(s.startswith("plan: curves over 60 batches") for s in stages), stages
    _drawn(err, "plan: curves over 60 batches", "0:00:0")  # an elapsed time
    _cli(capsys, "run", small, "-s", "hbm-lru", "-o", tmp_path / "r")
    out, err = _cli(capsys, "report", tmp_path / "r", "--out", tmp_path / "report")
    assert out.startswith("wrote ")
    _drawn(err, "report: writing")
    terminal.events.clear()
    out, err = _cli(capsys, "bench", "generate", "--preset", "tiny", "--batches", "20",
                    "--batch-size", "32", "--workers", "1", "--json")  # fmt: skip
    assert json.loads(out)["batches"] == 20
    assert terminal.stages() == ["bench generate: measuring"]
    _drawn(err, "bench generate: measuring")


# -- a real terminal ------------------------------------------------------------------------


def _under_pty(argv: list[str], cwd: Path, interrupt_on: str | None = None) -> tuple[int, str, str]:
    """Run `python -m replay ARGV` with stderr on a pseudo-terminal and stdout a pipe:
    (exit code, stdout, what the terminal got). `interrupt_on`: send SIGINT once the
    terminal shows this text."""
    import pty

    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay", *argv], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=follower, env=env,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    sent = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process closed its end
                break
            if not chunk:
                break
            seen += chunk
        if interrupt_on and not sent and interrupt_on.encode() in ESCAPE.sub("", seen.decode(
            errors="replace")).encode():  # fmt: skip
            proc.send_signal(signal.SIGINT)
            sent = True
        if proc.poll() is not None and not ready:
            break
    assert proc.stdout is not None
    with proc.stdout:  # the little a run prints fits a pipe's buffer
        out = proc.stdout.read().decode()
    code = proc.wait(timeout=60)
    os.close(leader)
    return code, out, seen.decode(errors="replace")


def test_a_real_terminal_stdout_a_pipe_and_ctrl_c(small: Path, tmp_path: Path) -> None:
    """stderr a terminal, stdout a pipe: the JSON on stdout is byte for byte that of a run
    with stderr a pipe too (rich's default console is stdout: a bar drawn there added a
    newline); Ctrl-C during the replay exits 130 with one line, the display erased."""
    argv = ["run", str(small), "-s", "hbm-lru", "--set", "policy.capacity_rows=100", "--json",
            "-o"]  # fmt: skip
    piped = subprocess.run(
        [sys.executable, "-m", "replay", *argv, str(tmp_path / "a")], cwd=tmp_path,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    code, out, terminal = _under_pty([*argv, str(tmp_path / "b")], tmp_path)
    assert (code, piped.returncode) == (0, 0)
    assert out == piped.stdout and piped.stderr == ""
    assert "run: replaying" in ESCAPE.sub("", terminal)
    code, out, terminal = _under_pty(
        ["run", "--workload", "criteo-kaggle", "--batches", "200000", "-s", "hbm-lru",
         "-o", str(tmp_path / "c")],
        tmp_path,
        interrupt_on="run: replaying",
    )  # fmt: skip
    assert code == 130 and out == ""
    last = terminal.replace("\r\n", "\n").rstrip("\n").rsplit(ERASE_LINE, 1)
    assert len(last) == 2 and last[1] == "replay: interrupted", repr(terminal[-300:])
    assert not (tmp_path / "c").exists()


def test_fit(
    terminal: Recorded, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    argv = ["fit", small, "--json", "--max-lookups", "20000"]
    (out, err), (term_out, term_err) = _pipe_and_terminal(capsys, monkeypatch, argv)
    assert err == "" and out == term_out  # the display never touches the output
    _drawn(term_err, "fit: sampling the trace and fitting each table")
    assert terminal.stages()[-1] == "fit: sampling the trace and fitting each table"
