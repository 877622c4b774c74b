"""TOML parsing and checks shared by the loaders of system and workload specs."""

from __future__ import annotations

import tomllib
from typing import Any

from replay.errors import ConfigError

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


def parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    except ValueError:  # an integer of more than 4300 digits
        raise ConfigError(f"{where}: not valid TOML (a number is too long)") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid TOML (arrays or tables nested too deeply)") from None
    if has_too_long_int(data):
        raise ConfigError(f"{where}: not valid TOML (a number is too long)")
    return data
