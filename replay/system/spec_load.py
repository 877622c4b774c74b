"""A system spec's raw data: a preset or a TOML file read, its `extends` resolved (the
preset it names deep-merged under it), and `--set key.path=value` overrides applied by
dotted path before validation (`replay.system.spec.build_system` validates it).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from replay._files import SPEC, read_text
from replay._toml import has_too_long_int, parse_toml
from replay.errors import ConfigError, did_you_mean, opt


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_extends(
    data: dict[str, Any], where: str, seen: tuple[str, ...] = ()
) -> dict[str, Any]:
    from replay.system.presets import SYSTEM_PRESETS, preset_data

    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{where}.extends: expected a preset name, got {parent!r}")
    if parent not in SYSTEM_PRESETS:
        raise ConfigError(
            f"{where}.extends: unknown system preset {parent!r} "
            f"(known: {', '.join(SYSTEM_PRESETS)})"
        )
    if parent in seen:
        raise ConfigError(f"{where}.extends: preset {parent!r} extends itself")
    base = _resolve_extends(preset_data(parent), parent, (*seen, parent))
    merged = _deep_merge(base, {k: v for k, v in data.items() if k != "extends"})
    if "name" not in data:
        merged.pop("name", None)
    return merged


def parse_value(text: str) -> Any:
    """A `--set` value: a TOML literal (number, bool, string, array), else a bare string."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (ValueError, RecursionError):  # not TOML (or beyond the parser's limits)
        return text
    return text if has_too_long_int(value) else value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.path=value` strings to raw spec data (a new dict; the input is kept)."""
    out = _deep_merge({}, data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{opt('--set', 'overrides')} {item!r}: expected key.path=value")
        parts = key.split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                table = ".".join(parts[: i + 1])
                if not key.isprintable():
                    key, table = repr(key), repr(table)
                raise ConfigError(f"{opt('--set', 'overrides')} {key}: {table} is not a table")
            else:
                child = node[part] = dict(child)
            node = child
        node[parts[-1]] = parse_value(raw.strip())
        if key == "policy.capacity_bytes" and node.get("capacity_rows"):
            # rows take precedence over bytes: a file's capacity_rows would otherwise keep
            # the cache this override resizes, silently; the later size given wins
            node["capacity_rows"] = 0
    return out


def load_system_data(name_or_file: str | Path) -> tuple[dict[str, Any], str]:
    """Raw data of a preset name or a TOML file, with `extends` resolved; and its origin."""
    from replay.system.presets import SYSTEM_PRESETS, preset_data

    text = str(name_or_file)
    path = Path(text)
    try:
        exists = path.exists()
    except OSError:  # e.g. a name too long for a file name
        exists = False
    if text in SYSTEM_PRESETS and not path.suffix:
        data = preset_data(text)
        origin = f"preset {text}"
    elif path.suffix == ".toml" or exists:
        # regular files only, of at most SPEC's limit: a FIFO or /dev/zero is refused
        data = parse_toml(read_text(path, SPEC, ConfigError, noun="system file"), str(path))
        origin = str(path)
    else:
        raise ConfigError(
            f"unknown system {text!r}{did_you_mean(text, sorted(SYSTEM_PRESETS))} (not a "
            f"preset: {', '.join(sorted(SYSTEM_PRESETS))}; nor a .toml file)"
        )
    data = _resolve_extends(data, origin)
    data.setdefault("name", path.stem if origin == str(path) else text)
    return data, origin


__all__ = ["apply_overrides", "load_system_data", "parse_value"]
