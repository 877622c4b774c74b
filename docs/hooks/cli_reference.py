"""MkDocs hook: the CLI reference page (`cli.md`), generated from the commands at build
time (`replay.cli._reference`), so it cannot go stale and no copy is committed."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    from replay.cli._reference import markdown

    files.append(File.generated(config, "cli.md", content=markdown()))
    return files
