"""Validation of a system spec's plain data (TOML tables) against its flat frozen
dataclasses, the checks `replay.system.spec`'s builders share.

A field's metadata says what a value may be: `range` (lo, hi, lo_open; default
[0, 1e18]) for a number, `choices` for a string, `choices_int` for an integer from a
list. A `..._bytes`, `..._bytes_per_s` or `..._s` field also takes its value with its
unit (`"8GiB"`, `"30min"`). Every refusal is a `ConfigError` naming the dotted path of
the offending key. Named tables (`[tiers.NAME]`, `[links.NAME]`) may start from a
device's defaults in `replay/system/devices.toml`.
"""

from __future__ import annotations

import functools
import math
import tomllib
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from replay._units import parse_bytes, parse_duration
from replay.errors import ConfigError, unknown_key


def check_number(value: Any, where: str, spec: tuple[float, float, bool], integer: bool) -> Any:
    lo, hi, lo_open = spec
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: expected {kind}, got {value!r}")
    if integer and not isinstance(value, int):
        if not float(value).is_integer():
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        value = int(value)
    if not integer:
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float
            raise ConfigError(f"{where}: {value} is out of range (too large)") from None
        if math.isnan(value) or math.isinf(value):
            raise ConfigError(f"{where}: must be a finite number, got {value}")
    if value < lo or value > hi or (lo_open and value <= lo):
        low = f"({_bound(lo)}" if lo_open else f"[{_bound(lo)}"
        raise ConfigError(f"{where}: {value} is out of range {low}, {_bound(hi)}]")
    return value


def _bound(x: float) -> str:
    """A range's end as written in the spec: `2^62` and `2^63 - 1` rather than
    `4.61169e+18`, `1e+18` as `10^18`, other whole numbers with separators (`1,000`)."""
    if not float(x).is_integer():
        return f"{x:g}"
    n = int(x)
    if n >= 1 << 20:
        for m, suffix in ((n, ""), (n + 1, " - 1")):
            if m & (m - 1) == 0:
                return f"2^{m.bit_length() - 1}{suffix}"
        text = str(n)
        if text.rstrip("0") == "1":
            return f"10^{len(text) - 1}"
    return f"{n:,}"


def with_unit(name: str, value: Any, path: str) -> Any:
    """A size or a duration written with its unit (`"8GiB"`, `"30min"`) as the number
    of the field's own unit, for the fields whose names say it (`..._bytes`,
    `..._bytes_per_s` per second, `..._s`); other values as they are."""
    if not isinstance(value, str):
        return value
    if name.endswith("_bytes") or name.endswith("_bytes_per_s"):
        per_s = name.endswith("_per_s")
        text = value[: -len("/s")] if per_s and value.endswith("/s") else value
        return float(parse_bytes(text, path))
    if name.endswith("_s"):
        return parse_duration(value, path)
    return value


def build_flat(cls: type, data: Any, where: str, **fixed: Any) -> Any:
    """Validate a dict against a flat dataclass (numbers, strings, bools)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    allowed = {f.name for f in fields(cls)} - set(fixed)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise unknown_key(where, unknown[0], allowed)
    values: dict[str, Any] = dict(fixed)
    for f in fields(cls):
        if f.name in fixed:
            continue
        path = f"{where}.{f.name}"
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{where}: missing required key {f.name!r}")
            continue
        value = data[f.name]
        kind = hints[f.name]
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: expected true or false, got {value!r}")
        elif kind is str:
            if not isinstance(value, str):
                raise ConfigError(f"{path}: expected a string, got {value!r}")
            choices = f.metadata.get("choices")
            if choices and value not in choices:
                raise ConfigError(f"{path}: {value!r} is not one of {', '.join(choices)}")
        elif kind is int and "choices_int" in f.metadata:
            choices = f.metadata["choices_int"]
            if isinstance(value, bool) or value not in choices:
                listed = ", ".join(str(c) for c in choices)
                raise ConfigError(f"{path}: {value!r} is not one of {listed}")
        elif kind in (int, float):
            value = check_number(
                with_unit(f.name, value, path),
                path,
                f.metadata.get("range", (0, 1e18, False)),
                kind is int,
            )
        elif kind == tuple[float, ...]:
            if not isinstance(value, list | tuple):
                raise ConfigError(f"{path}: expected a list of numbers, got {value!r}")
            value = tuple(
                check_number(v, f"{path}[{i}]", (0, 1e15, False), False)
                for i, v in enumerate(value)
            )
        values[f.name] = value
    return cls(**values)


DEVICES_FILE = Path(__file__).with_name("devices.toml")


@functools.cache
def device_defaults() -> dict[str, Any]:
    with DEVICES_FILE.open("rb") as fh:
        return tomllib.load(fh)


def dotted(where: str, key: str) -> str:
    """`where.key`, or `where['key']` for a key a one-line message cannot show as is."""
    return f"{where}.{key}" if key.isprintable() and key.strip() == key else f"{where}[{key!r}]"


def build_named(data: Any, cls: type, kind: str, where: str) -> tuple[Any, ...]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected named tables like [{kind}.NAME]")
    devices = device_defaults().get(kind, {})
    out = []
    for name, body in data.items():
        path = dotted(where, name)
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: expected a table of keys, got {body!r}")
        body = dict(body)
        device = body.pop("device", None)
        if device is not None:
            if not isinstance(device, str) or device not in devices:
                known = ", ".join(sorted(devices))
                raise ConfigError(f"{path}.device: unknown device {device!r} (known: {known})")
            body = {**devices[device], **body}
        out.append(build_flat(cls, body, path, name=name))
    return tuple(out)


__all__ = [
    "DEVICES_FILE",
    "build_flat",
    "build_named",
    "check_number",
    "device_defaults",
    "dotted",
    "with_unit",
]
