"""The CLI reference of the documentation site (`docs/cli.md`), generated from the commands.

Every command and sub-command of `replay` (walked from the click group typer builds) gets
a heading, its one-line summary and its `--help` text verbatim: usage, help and every
option with its default, so the reference says what the installed commands say and cannot
drift from them. The site's build hook (`docs/hooks/cli_reference.py`) calls `markdown()`;
`python -m replay.cli._reference` prints the same page.

The help is formatted at a fixed width (`WIDTH`), not the terminal's, so the page is the
same on every machine.
"""

from __future__ import annotations

from typing import Any

from typer.main import get_command

WIDTH = 88  # the help's line width: a fixed width keeps the page deterministic


def _context(command: Any, name: str, parent: Any = None) -> Any:
    """A context to format `command`'s help in, its arguments left unparsed (typer's
    vendored click: its classes come from the command, not from an import)."""
    return command.make_context(
        name, [], parent=parent, resilient_parsing=True,
        terminal_width=WIDTH, max_content_width=WIDTH,
    )  # fmt: skip


def _commands(command: Any, ctx: Any) -> list[tuple[Any, Any]]:
    """The command and, for a group, every sub-command below it, depth first, in the
    order the group lists them (`replay --help`'s order, the workflow's)."""
    found = [(command, ctx)]
    for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            found += _commands(sub, _context(sub, name, ctx))
    return found


def _path(ctx: Any) -> str:
    return str(ctx.command_path)


def _anchor(path: str) -> str:
    """The anchor mkdocs' table of contents gives a heading `replay run`: `replay-run`."""
    return path.replace(" ", "-")


def markdown() -> str:
    """The reference page: an index of the commands, then each command's `--help`."""
    from replay.cli import load_commands
    from replay.cli.app import app

    load_commands()
    group = get_command(app)
    commands = _commands(group, _context(group, "replay"))
    lines = [
        "# CLI reference",
        "",
        "Every command's `--help`, generated from the commands themselves when this site",
        "is built (`replay/cli/_reference.py`). Bad input ends any command with one line",
        "`replay: error: ...` and exit code 2 ([Troubleshooting](troubleshooting.md)).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for command, ctx in commands[1:]:
        path = _path(ctx)
        summary = command.get_short_help_str(limit=120).replace("|", "\\|")
        lines.append(f"| [`{path}`](#{_anchor(path)}) | {summary} |")
    lines.append("")
    for command, ctx in commands:
        path = _path(ctx)
        lines += [f"## {path}", "", "```text", command.get_help(ctx).rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
