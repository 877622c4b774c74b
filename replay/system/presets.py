"""Built-in system presets: one TOML file per preset in `replay/system/presets/`.

Hardware numbers live in `replay/system/devices.toml`, each with its source; a preset
names devices (`device = "..."`) and states the rest (policy, cache budget, compute),
citing its sources in comments and in its `source` key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.errors import ConfigError

PRESET_DIR = Path(__file__).with_name("presets")
SYSTEM_PRESETS: tuple[str, ...] = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))


def preset_data(name: str) -> dict[str, Any]:
    """Raw TOML data of a preset (its `extends` not yet resolved)."""
    from replay._toml import parse_toml

    if name not in SYSTEM_PRESETS:
        raise ConfigError(f"unknown system preset {name!r} (known: {', '.join(SYSTEM_PRESETS)})")
    return parse_toml((PRESET_DIR / f"{name}.toml").read_text(), f"preset {name}")
