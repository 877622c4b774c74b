"""After an interrupt, errors Python would print from a finalizer are dropped (they are
the interrupt's aftermath: llvmlite's half-built ObjectRef raised AttributeError in its
`__del__` when Ctrl-C landed in numba's compilation); before one, they print as usual."""

from __future__ import annotations

import signal
import types
from typing import Any

import pytest

from replay import _signals


def _unraisable(exc: BaseException) -> Any:
    return types.SimpleNamespace(
        exc_type=type(exc), exc_value=exc, exc_traceback=None, err_msg=None, object=None
    )


def test_a_finalizers_error_after_an_interrupt_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    handle = _signals._unraisable(seen.append)
    monkeypatch.setattr(_signals, "_received", None)
    handle(_unraisable(AttributeError("'ValueRef' object has no attribute")))
    assert len(seen) == 1  # no interrupt: printed as Python would
    monkeypatch.setattr(_signals, "_received", signal.SIGINT)
    handle(_unraisable(AttributeError("'ValueRef' object has no attribute")))
    assert len(seen) == 1  # after one: its aftermath, dropped
