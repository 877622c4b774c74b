"""The type check's rules that mypy itself does not hold: CI runs it over all of replay/
between the install and the tests, nothing is left out of it, and every ignore names its
error code and says why on its own line (docs/architecture.md, "Types"). mypy's own run
(about 30 s of CPU) is CI's step, not a test."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")


def test_ci_runs_mypy_after_the_install_and_before_the_tests() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = next(i for i, line in enumerate(lines) if "'.[dev,torchrec]'" in line)
    check = lines.index("mypy")
    tests = next(i for i, line in enumerate(lines) if line.startswith("pytest"))
    assert install < check < tests


def test_mypy_checks_all_of_replay_with_no_module_left_out() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["replay"]
    assert "ignore-without-code" in config["enable_error_code"]
    assert config["warn_unused_ignores"] is True
    for override in config.get("overrides", []):
        modules = override["module"]
        # only third-party packages without types are let off, and only their imports
        assert not any(m == "replay" or m.startswith("replay.") for m in modules), modules
        assert set(override) == {"module", "ignore_missing_imports"}, override
    assert not {"ignore_errors", "disable_error_code"} & set(config)


def test_every_ignore_names_its_code_and_says_why_on_its_line() -> None:
    bad = []
    for path in sorted((ROOT / "replay").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = IGNORE.search(line)
            if found is None:
                continue
            rest = found["rest"]
            if not re.match(r"\[[a-z-]+(, [a-z-]+)*\]\s+#\s*\S", rest):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "an ignore without its code and a reason:\n" + "\n".join(bad)
