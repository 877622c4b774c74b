"""Checks shared by the TOML loaders of system and workload specs."""

from __future__ import annotations

from typing import Any

# Python prints at most 4300 decimal digits of an int; TOML's hex, octal and binary
# integers have no length limit, so a longer one would crash the error message itself.
MAX_INT_BITS = 14_000  # < 4300 decimal digits


def has_too_long_int(data: Any) -> bool:
    """Whether parsed TOML holds an integer too long to print."""
    if isinstance(data, dict):
        return any(has_too_long_int(v) for v in data.values())
    if isinstance(data, list):
        return any(has_too_long_int(v) for v in data)
    return isinstance(data, int) and data.bit_length() > MAX_INT_BITS
