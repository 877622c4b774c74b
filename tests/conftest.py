"""Shared test set-up."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_verified_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    """Each test keeps its verified-checksum records (`replay._verified`) in a folder of
    its own: nothing is written to the user's cache, and no test skips hashing because
    another one verified the same files."""
    where = tmp_path_factory.mktemp("replay-cache")
    monkeypatch.setenv("REPLAY_CACHE_DIR", str(where))
    return where
