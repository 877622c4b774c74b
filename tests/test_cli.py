"""The command line as a whole: version, exit codes the shell sees."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import replay
from replay.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"replay {replay.__version__}\n"


def test_console_script_exit_codes() -> None:
    """What a shell sees from `python -m replay` (the console script's path)."""
    ok = subprocess.run(
        [sys.executable, "-m", "replay", "--version"], capture_output=True, text=True, check=False
    )
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, f"replay {replay.__version__}\n", "")
    bad = subprocess.run(
        [sys.executable, "-m", "replay", "inspect", "/nonexistent/trace"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr == "replay: error: /nonexistent/trace: no such trace folder\n"


def test_sizes_and_durations_with_units(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--sizes 8KiB` converts with the row's bytes and prints rows and bytes; a system
    field in bytes or seconds takes a unit (`--set policy.capacity_bytes=8GiB`)."""
    from replay.engine.systems import resolve_system

    trace = tmp_path / "t"
    assert main(["generate", "--preset", "tiny", "--batches", "20", "--batch-size", "32",
                 "--workers", "1", "--out", str(trace)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["mrc", str(trace), "--sizes", "8KiB,64KiB", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    row_bytes = document["row_bytes"]  # tiny: fp32 rows of its embedding dimension
    assert [c for c, _ in document["curve"]] == [8192 // row_bytes, 65536 // row_bytes]
    assert document["cache_bytes"] == [8192, 65536]
    assert main(["mrc", str(trace), "--sizes", "8KiB"]) == 0
    assert "8 KiB" in capsys.readouterr().out
    system = resolve_system(
        "hbm-lru", ["policy.capacity_bytes=8GiB", "failures.mtbf_s=6h", "failures.restart_s=90s"]
    )
    assert system.policy.capacity_bytes == 8 * 2**30
    assert system.failures.mtbf_s == 6 * 3600 and system.failures.restart_s == 90


def test_the_api_shows_only_what_it_documents() -> None:
    from replay.engine.replay import RunResult

    assert dir(replay) == sorted(replay.__all__)
    assert "GC_THRESHOLDS" not in dir(replay) and "_gc" not in dir(replay)
    result = replay.replay_trace(
        replay.open_workload("tiny", batches=3), replay.resolve_system("hbm-lru")
    )
    again = replay.replay_trace(
        replay.open_workload("tiny", batches=3), replay.resolve_system("hbm-lru")
    )
    assert isinstance(result, RunResult)
    assert result == result and result != again  # identity; no ValueError from arrays
    assert result.summary == again.summary  # equal results: compare their summaries


def test_help_lists_the_commands_in_workflow_order(capsys: pytest.CaptureFixture[str]) -> None:
    from replay.cli import COMMANDS

    assert main(["--help"]) == 0
    listed = [
        line.split()[0]
        for line in capsys.readouterr().out.split("Commands:")[1].splitlines()
        if line.strip()
    ]
    assert listed == list(COMMANDS)
    assert COMMANDS[:8] == (
        "generate",
        "ingest",
        "inspect",
        "run",
        "mrc",
        "compare",
        "sweep",
        "plan",
    )


# one placeholder style: upper-case words (a literal choice such as `local|` before one)
PLACEHOLDER = (
    r"(local\|)?[A-Z][A-Z0-9_]*([=,][A-Z0-9_]+)*(,\.\.\.|\.\.\.)?"  # DIR, KEY=VALUE, SIZE,...
    r"|\[[A-Z_]+\]"  # an optional argument: [TRACE]
    r"|[a-z]+(\|[a-z]+)+"  # the choices: declared|observed|extrapolate
)
# the same flag for the same thing: these options take these short forms wherever they are
SHORT_FLAGS = {"--out": "-o", "--workers": "-j", "--system": "-s", "--systems": "-s"}


def _commands() -> list:
    from typer.main import get_command

    from replay.cli import COMMANDS, app, load_commands

    load_commands()
    group = get_command(app)
    found = []
    for name in COMMANDS:
        command = group.commands[name]  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None)  # `bench` is a group
        found += [(f"{name} {s}", c) for s, c in subs.items()] if subs else [(name, command)]
    return found


def test_every_option_shows_its_placeholder_and_default() -> None:
    """`--help` of every command: one placeholder style, every default shown (in the
    `[default: ...]` click prints, or in the help text where it depends on the input),
    the same short flag for the same option everywhere."""
    import re

    problems = []
    for name, command in _commands():
        for param in command.params:
            flag = param.opts[0]
            where = f"replay {name} {flag}"
            if param.param_type_name == "argument":
                if not re.fullmatch(PLACEHOLDER, param.metavar or ""):
                    problems.append(f"{where}: placeholder {param.metavar!r}")
                continue
            if not param.is_flag and not re.fullmatch(PLACEHOLDER, param.metavar or ""):
                problems.append(f"{where}: placeholder {param.metavar!r}")
            if flag in SHORT_FLAGS and SHORT_FLAGS[flag] not in param.opts:
                problems.append(f"{where}: no {SHORT_FLAGS[flag]}")
            if param.required or (param.is_flag and not param.secondary_opts):
                continue  # nothing to default; an on/off flag is off unless given
            shown = param.default is not None and param.show_default
            if not shown and "default" not in (param.help or ""):
                problems.append(f"{where}: default not shown")
    assert not problems, "\n".join(problems)


def test_help_shows_each_command_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    # `replay --help` lists a command by its first sentence: never cut off with "..."
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out.split("Commands:")[1]
    assert "..." not in listing, listing
    for name, _ in _commands():
        assert main([*name.split(), "--help"]) == 0, name
        assert "Usage: replay " + name in capsys.readouterr().out


def test_api_errors_name_parameters_and_the_cli_names_flags(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error raised through the Python API names the API's parameter (`force=True`,
    `overrides`); the same error from the command line names the flag (`--force`)."""
    trace = tmp_path / "t"
    replay.generate("tiny", trace, batches=2, workers=1)
    with pytest.raises(replay.ReplayError) as api:
        replay.generate("tiny", trace, batches=2, workers=1)
    assert "use force=True to replace it" in str(api.value) and "--" not in str(api.value)
    assert main(["generate", "--preset", "tiny", "--batches", "2", "-o", str(trace)]) == 2
    assert "(use --force to replace it)" in capsys.readouterr().err
    cases = [
        (lambda: replay.resolve_system("hbm-lru", ["nope"]), "overrides 'nope'"),
        (lambda: replay.mrc_trace(trace, sizes=[0]), "sizes: cache size 0"),
        (lambda: replay.mrc_trace(trace, sample_rate=2.0), "sample_rate 2.0 must be"),
        (lambda: replay.generate("tiny", tmp_path / "u", workers=0), "workers must be"),
        (lambda: replay.ingest([], tmp_path / "v"), "max_ind_range=M or dictionary=True"),
    ]
    for call, message in cases:
        with pytest.raises(replay.ReplayError) as caught:
            call()
        assert message in str(caught.value) and "--" not in str(caught.value)
