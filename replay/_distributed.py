"""The optional Dask engine (`pip install 'replay[distributed]'`), behind `--scheduler`.

`--scheduler local` starts a `distributed.LocalCluster` of `--workers` processes with
one thread each for the command's lifetime; `--scheduler ADDRESS` (e.g.
tcp://10.0.0.5:8786) uses a running cluster, whose workers must have this package
installed and, for trace folders, see the same paths (a shared filesystem). What is
spread, and what keeps the results identical to a single machine:

- `generate`: one task per trace file (`plan_files`); each draw is a pure function of
  (spec, seed, batch, table, position), so a file's bytes do not depend on who writes it.
  The workers write the parts into the partial folder; the manifest is written here.
- `compare`, `sweep`: one task per run; each run is deterministic and results are
  collected by job index.
- `mrc --sample-rate`: the SHARDS filter (the pass over every lookup, and for a workload
  its generation) in tasks of ~8 M lookups by batch range; the samples come back in
  trace order and feed the stack-distance kernels here (`replay.analysis.mrc.mrc_source`).
  Why batch ranges and not hash partitions of the key space: a partition's stack
  distances would count only its own keys, making it a SHARDS sample at R/P with P times
  the variance, so the merged curve would depend on P and lose accuracy. The filter is
  the pass over every lookup (and the generation); the kernels see only R of them. The
  K hash groups of the error estimate are such partitions: it is built from the spread
  of their curves.

The default, with no `--scheduler`, needs no service: threads and the standard
library's process pool on this machine.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from replay.errors import ConfigError, ReplayError

# tasks in flight per worker in `map_in_order`: enough to keep every worker busy while
# the results are folded in order, few enough that memory stays bounded
IN_FLIGHT_PER_WORKER = 3


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ConfigError(
            "--scheduler needs the optional Dask engine: pip install 'replay[distributed]'"
        ) from None
    return distributed


@contextlib.contextmanager
def dask_client(scheduler: str, workers: int | None = None) -> Iterator[Any]:
    """A `distributed.Client`: a new local cluster ("local") or the one at an address."""
    distributed = _import_distributed()
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if scheduler == "local":
        n = workers or len(os.sched_getaffinity(0))
        cluster = distributed.LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # a free port: the default 8787 may be taken
            silence_logs=50,  # logging.CRITICAL: the command's output stays its own
        )
        try:
            with distributed.Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    if workers is not None:
        raise ConfigError("--workers starts a local cluster; an existing one has its own")
    try:
        client = distributed.Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ReplayError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
    with client:
        yield client


def worker_count(client: Any) -> int:
    return max(1, len(client.scheduler_info().get("workers", {})))


def map_in_order(
    client: Any, fn: Callable[..., Any], args: Iterable[tuple[Any, ...]]
) -> Iterator[Any]:
    """fn(*a) for each a of `args` on the cluster, yielded in the order of `args`, with a
    bounded number of tasks in flight. A task's error is raised here."""
    window = IN_FLIGHT_PER_WORKER * worker_count(client)
    pending: deque[Any] = deque()
    try:
        for a in args:
            pending.append(client.submit(fn, *a, pure=False))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def map_as_completed(
    client: Any, fn: Callable[..., Any], args: Iterable[tuple[Any, ...]]
) -> Iterator[tuple[int, Any]]:
    """(index, fn(*args[index])) as tasks finish; the first error cancels the rest."""
    distributed = _import_distributed()
    futures = [client.submit(fn, *a, pure=False) for a in args]
    index = {future.key: i for i, future in enumerate(futures)}
    try:
        for future in distributed.as_completed(futures):
            yield index[future.key], future.result()
    finally:
        for future in futures:
            future.cancel()


__all__ = ["dask_client", "map_as_completed", "map_in_order", "worker_count"]
