"""Kill points: named places where a test can have the process killed outright.

`kill_point(name)` sends SIGKILL to this process when the environment variable
`REPLAY_KILL_AT` is `name` or `name#k` (the k-th time that point is reached, from 1). The
tests of `--resume` use it to stop `replay generate` and `replay run` at chosen moments
(between two files, half-way through a Parquet file, after the last rename) and then
check that resuming gives the same bytes. Unset, it costs one dictionary lookup per call,
so points sit between files or row groups, never inside a hot loop.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

KILL_ENV = "REPLAY_KILL_AT"

_reached: Counter[str] = Counter()
_lock = threading.Lock()


def kill_point(name: str) -> None:
    """SIGKILL this process here if `REPLAY_KILL_AT` names this point (see module doc)."""
    wanted = os.environ.get(KILL_ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition("#")
    if point != name:
        return
    with _lock:
        _reached[name] += 1
        count = _reached[name]
    if count >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
