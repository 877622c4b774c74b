"""Shared test set-up."""

from __future__ import annotations

import copy
import fcntl
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

# every JSON document the suite writes is validated against its published schema as it
# is written (`replay._schema.stamp`), in this process and in the commands it starts
os.environ["REPLAY_CHECK_SCHEMAS"] = "1"


@pytest.fixture(autouse=True)
def _own_verified_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    """Each test keeps its verified-checksum records (`replay._verified`) in a folder of
    its own: nothing is written to the user's cache, and no test skips hashing because
    another one verified the same files."""
    where = tmp_path_factory.mktemp("replay-cache")
    monkeypatch.setenv("REPLAY_CACHE_DIR", str(where))
    return where


@pytest.fixture(scope="session", autouse=True)
def _the_quickstarts_plan_once(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The quickstart's plan (one epoch of Criteo Terabyte, ~12 s) is computed once per
    session: test_quickstart runs the quickstart twice and test_readme once more, each
    with the same `PlanRequest`, and the plan is a pure function of it (its determinism is
    pinned by tests/test_plan*.py). Under xdist the first worker to need it pickles it
    into the run's shared folder (under a lock) and the others read it from there. Any
    other request is planned afresh; each caller gets its own copy."""
    from _quickstart_once import session_shared

    import replay.plan.plan as plan_module
    from replay.runs.quickstart import plan_request

    real = plan_module.make_plan
    quickstart = repr(plan_request())
    shared = session_shared(tmp_path_factory)
    kept: list[Any] = []

    def planned(request: Any, progress: Any, resolved: Any) -> Any:
        if shared is None:
            return real(request, progress, resolved)
        with (shared / "quickstart-plan.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            done = shared / "quickstart-plan.pickle"
            if done.exists():
                return pickle.loads(done.read_bytes())
            plan = real(request, progress, resolved)
            partial = done.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(plan))
            partial.replace(done)
            return plan

    def make_plan(request: Any, progress: Any = None, resolved: Any = ()) -> Any:
        if repr(request) != quickstart:
            return real(request, progress, resolved)
        if not kept:
            kept.append(planned(request, progress, resolved))
        return copy.deepcopy(kept[0])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "make_plan", make_plan)
        yield


@pytest.fixture(scope="session")
def tiny_trace_40(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 batches of the `tiny` preset, generated once per worker (read, never changed:
    the runs write their own folders)."""
    from replay.cli import main

    path = tmp_path_factory.mktemp("tiny40") / "t"
    args = ["generate", "--preset", "tiny", "--batches", "40", "-j", "1", "-o", str(path)]
    assert main(args) == 0
    return path
