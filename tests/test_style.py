"""The code base stays ruff clean (lint rules in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is a dev dependency: pip install -e '.[dev]'")
    proc = subprocess.run(
        [ruff, "check", "replay", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
