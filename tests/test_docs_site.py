"""The documentation site builds with no warning (`mkdocs build --strict`: a broken link,
a missing anchor, a page left out of the nav all fail it), its CLI reference covers every
command and option, the README stays a front page, and no page points outside the
repository or at issue numbers. mkdocs comes with the `dev` extra: this never skips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site")
    # Material prints a banner about MkDocs 2.0 on every build; it is no build warning
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    return out, log


def test_the_site_builds_strict_with_no_warning(site: tuple[Path, str]) -> None:
    out, log = site
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not warnings, "\n".join(warnings)
    for page in (ROOT / "docs").glob("*.md"):
        built = out / ("" if page.stem == "index" else page.stem) / "index.html"
        assert built.is_file(), f"{page.name} was not built"


def test_each_page_is_in_the_nav_once() -> None:
    """mkdocs warns of a page left out of the nav, not of one listed twice."""
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    twice = sorted({page for page in nav if nav.count(page) > 1})
    assert not twice, twice
    assert "cli.md" in nav and "index.md" in nav


def test_the_built_cli_reference_has_every_command(site: tuple[Path, str]) -> None:
    """The hook generated cli.md into the site (no copy is committed)."""
    from replay.cli import COMMANDS

    out, _ = site
    assert not (ROOT / "docs" / "cli.md").exists(), "cli.md is generated, not committed"
    html = (out / "cli" / "index.html").read_text()
    for name in COMMANDS:
        assert f'id="replay-{name}"' in html, name


def test_the_cli_reference_covers_every_command_and_option() -> None:
    """Every command and sub-command (walked from the click group) has its section, and
    every option of each appears in it: the page is the commands' own --help."""
    from typer.main import get_command

    from replay.cli import load_commands
    from replay.cli._reference import markdown
    from replay.cli.app import app

    text = markdown()
    sections = dict(re.findall(r"^## (replay[^\n]*)\n\n```text\n(.*?)^```", text, re.M | re.S))
    load_commands()
    group = get_command(app)
    expected = {"replay": group}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        expected[f"replay {name}"] = command
        for sub_name, sub in getattr(command, "commands", {}).items():
            expected[f"replay {name} {sub_name}"] = sub
    assert set(sections) == set(expected)
    assert len(expected) >= 18  # 13 commands and bench's sub-commands
    for path, command in expected.items():
        assert sections[path].startswith(f"Usage: {path} "), path
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("-"):
                    assert opt in sections[path], f"{path}: {opt}"
        assert f"| [`{path}`](#{path.replace(' ', '-')}) |" in text or path == "replay"


def test_the_cli_reference_is_deterministic() -> None:
    from replay.cli._reference import markdown

    assert markdown() == markdown()


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    # its two quick-start commands, exactly as CI runs them
    text = "\n".join(lines)
    ci = (ROOT / ".ci" / "run").read_text()
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && replay quickstart"
        in text
    )
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev,torchrec]' "
        "&& pip install --no-deps torchrec==1.8.0 && pytest -n 2" in text
    )
    assert "replay quickstart" in ci and "pytest -n 2" in ci
    # every relative link of the README resolves in the repository
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), target


def test_no_page_points_outside_the_repository_or_at_issue_numbers() -> None:
    bad = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if re.search(r"\bissues? #?\d+|\.\./shared", line, re.I):
                bad.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_docs_extra_pins_what_the_site_needs() -> None:
    """`pip install -e '.[docs]'` (and `.[dev]`, which CI installs) bring mkdocs and the
    Material theme at pinned versions."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra in ("docs", "dev"):
        names = {re.split(r"[=<>!~\[]", req)[0].strip() for req in extras[extra]}
        assert {"mkdocs", "mkdocs-material"} <= names, extra
    assert all("==" in req for req in extras["docs"]), extras["docs"]
