"""replay: a trace-driven replay analyzer for recommendation-model training.

Python API (the CLI is a thin layer over it)::

    import replay
    path = replay.generate("tiny", "traces/tiny", batches=100, seed=1)
    trace = replay.open_trace(path)
    for chunk in trace.iter_lookups():
        ...  # chunk.batch, chunk.table, chunk.row are numpy arrays
    # or replay a workload generated on the fly, without writing a trace:
    result = replay.replay_trace(
        replay.open_workload("criteo-kaggle", batches=100), replay.resolve_system("hbm-lru")
    )
"""

from __future__ import annotations

import contextlib as _contextlib
import gc as _gc
from collections.abc import Iterator as _Iterator

from replay._version import __version__
from replay.errors import ReplayError

# numpy, numba and pyarrow allocate objects that live as long as the process; with the
# default thresholds the collector ran ~120 times while they were imported (gc
# callbacks), walking them again and again. So the package itself imports none of them:
# the API below is loaded on first use, with gen0 collected every 100,000 allocations
# instead of 700 while it imports (restored after). The console script
# (`replay.cli`) raises them for its whole command.
GC_THRESHOLDS = (100_000, 20, 10)


@_contextlib.contextmanager
def raised_gc_thresholds() -> _Iterator[None]:
    """`GC_THRESHOLDS` for the duration of the block (for imports), then as before."""
    before = _gc.get_threshold()
    _gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        _gc.set_threshold(*before)


def __getattr__(name: str):  # lazy: `import replay` stays light (see above)
    with raised_gc_thresholds():
        return _load(name)


def _load(name: str):
    if name in ("Trace", "open_trace"):
        from replay.trace import reader

        return getattr(reader, name)
    if name == "generate":
        from replay.workload.generator import generate

        return generate
    if name == "ingest":
        from replay.trace.criteo import ingest

        return ingest
    if name == "inspect_trace":
        from replay.analysis.stats import inspect_trace

        return inspect_trace
    if name == "resolve_system":
        from replay.engine.systems import resolve_system

        return resolve_system
    if name == "replay_trace":
        from replay.engine.replay import replay_trace

        return replay_trace
    if name == "open_workload":
        from replay.workload.onthefly import open_workload

        return open_workload
    if name == "mrc_source":
        from replay.analysis.mrc import mrc_source

        return mrc_source
    if name == "mrc_trace":
        from replay.analysis.mrc import mrc_trace

        return mrc_trace
    if name in ("torchrec_sharding_plan", "sharding_from_torchrec"):
        from replay.system import torchrec_plan

        return getattr(torchrec_plan, name)
    if name == "record":
        from replay.trace.record import record

        return record
    if name == "workload_from_torchrec":
        from replay.workload.from_torchrec import workload_from_torchrec

        return workload_from_torchrec
    if name in ("load_spec", "spec_to_toml"):
        from replay.workload import spec

        return getattr(spec, name)
    if name == "parameter_constraints":
        from replay.plan.torchrec import parameter_constraints

        return parameter_constraints
    raise AttributeError(f"module 'replay' has no attribute {name!r}")


__all__ = [
    "ReplayError",
    "Trace",
    "__version__",
    "generate",
    "ingest",
    "inspect_trace",
    "load_spec",
    "mrc_source",
    "mrc_trace",
    "open_trace",
    "open_workload",
    "parameter_constraints",
    "record",
    "replay_trace",
    "resolve_system",
    "sharding_from_torchrec",
    "spec_to_toml",
    "torchrec_sharding_plan",
    "workload_from_torchrec",
]


def __dir__() -> list[str]:
    """The documented API only (`help(replay)`, tab completion): not the module's
    helpers (the collector's thresholds, the lazy loader)."""
    return sorted(__all__)
