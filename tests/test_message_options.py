"""Every message names only options that exist: each `--option` in the package's strings
(messages, help, notes; docstrings left out) is an option of some `replay` command, and an
error about a `--set` or `--grid` value names the option apart from the field's path (no
`--set.policy.name`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.main import get_command

import replay
from replay.cli import load_commands, main
from replay.cli.app import app

PACKAGE = Path(replay.__file__).parent
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*")
# options of other programs that messages quote, each with the program
EXTERNAL = {"--no-deps": "pip install --no-deps (the TorchRec install hint)"}


def cli_options() -> set[str]:
    """Every long option of every command and group, `--help` included."""
    load_commands()
    found = {"--help"}

    def walk(command: object) -> None:
        for param in getattr(command, "params", []):
            found.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(get_command(app))
    return found


def message_options() -> dict[str, list[str]]:
    """`--option` tokens in the package's string constants (f-strings' parts included;
    docstrings left out: they may quote other tools), with where each is."""
    out: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docstrings:
                    continue
                for token in OPTION.findall(node.value):
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                    out.setdefault(token, []).append(where)
    return out


def test_every_option_a_message_names_exists() -> None:
    options = cli_options()
    assert {"--set", "--spec", "--system", "--grid", "--out"} <= options  # the walk works
    named = message_options()
    assert len(named) > 30  # the scan sees the messages
    unknown = {k: v for k, v in named.items() if k not in options and k not in EXTERNAL}
    assert not unknown, unknown


@pytest.mark.parametrize(
    ("argv", "given"),
    [
        (
            ["run", "--workload", "tiny", "--batches", "2", "--system", "ssd-tbe", "--set",
             "policy.cache_algorithm=lfu"],
            "(with --set policy.cache_algorithm=lfu)",
        ),
        (
            ["sweep", "--workload", "tiny", "--batches", "2", "--system", "hbm-lru", "--grid",
             "policy.capacity_rows=-1,-2"],
            "(with --grid policy.capacity_rows=-1)",
        ),
    ],
)  # fmt: skip
def test_an_override_error_names_the_option_apart_from_the_path(
    argv: list[str], given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replay: error: preset ") and "\n" not in err
    assert given in err and "--set." not in err and "--grid." not in err, err
    for token in OPTION.findall(err):
        assert token in cli_options(), token
    assert not (tmp_path / "out").exists()
