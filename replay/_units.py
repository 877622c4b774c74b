"""Sizes and durations in the user's units: `8GiB`, `512 MiB`, `1.5GB`, `90s`, `30min`, `6h`.

Parsing accepts binary units (KiB, MiB, GiB, TiB, PiB: powers of 1024) and decimal ones
(kB, MB, GB, TB, PB: powers of 1000), with or without a space, case-insensitive apart
from the `i` that marks binary units being optional in its case; a bare number is bytes.
Durations accept ms, s, min, h, d and w (`30d`, `1.5h`); a bare number is seconds. Every
parse error is a `ConfigError` naming the option and the value, with the forms accepted.

Formatting picks the unit that keeps 3 significant digits: `8 GiB`, `14 min`, `2.5 h`.
"""

from __future__ import annotations

import math
import re

from replay.errors import ConfigError

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "pib": 1 << 50,
}
_DURATION_UNITS = {
    "": 1.0,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 7 * 86400.0,
}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str, what: str, forms: str) -> tuple[float, str]:
    match = _NUMBER.match(str(text))
    if match is None:
        raise ConfigError(f"{what}: {text!r} is not a number with a unit ({forms})")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise ConfigError(f"{what}: {text!r} is not finite")
    return value, match.group(2).lower()


def parse_bytes(text: str | int | float, what: str = "size") -> int:
    """Bytes from `8GiB`, `512 MiB`, `1.5GB` or `1024` (rounded to a whole byte)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = repr(text)
    forms = "e.g. 512MiB, 8GiB, 1.5GB or a number of bytes"
    value, unit = _split(str(text), what, forms)
    if unit not in _BYTE_UNITS:
        raise ConfigError(f"{what}: unknown unit {unit!r} in {text!r} ({forms})")
    result = value * _BYTE_UNITS[unit]
    if result > 2**63 - 1:
        raise ConfigError(f"{what}: {text!r} is too large")
    return round(result)


def parse_duration(text: str | int | float, what: str = "duration") -> float:
    """Seconds from `90s`, `30min`, `6h`, `30d`, `1.5h` or a number of seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = repr(text)
    forms = "e.g. 90s, 30min, 6h, 30d or a number of seconds"
    value, unit = _split(str(text), what, forms)
    if unit not in _DURATION_UNITS:
        raise ConfigError(f"{what}: unknown unit {unit!r} in {text!r} ({forms})")
    return value * _DURATION_UNITS[unit]


def plural(count: int, noun: str) -> str:
    """`1 table`, `26 tables`, `1 batch`, `1,000 batches`."""
    es = "es" if noun.endswith(("s", "sh", "ch", "x")) else "s"
    return f"{count:,} {noun}{es * (count != 1)}"


def format_bytes(n: float) -> str:
    """`96 GiB`, `23.5 GiB`, `512 MiB`: binary units, 3 significant digits."""
    n = float(n)
    for unit, size in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30),
                       ("MiB", 1 << 20), ("KiB", 1 << 10)):  # fmt: skip
        if n >= size:
            return f"{_sig3(n / size)} {unit}"
    return f"{n:.0f} B"


def _sig3(value: float) -> str:
    """3 significant digits, never an exponent: 999.6 is `1000`, not `1e+03`, and
    0.0000123 is `0.0000123`, not `0` (a duration of 12 ps in ms)."""
    text = f"{value:.3g}"
    if "e" not in text or not math.isfinite(value):
        return text
    if abs(value) >= 1:
        return f"{value:.0f}"
    decimals = 2 - math.floor(math.log10(abs(value)))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def format_duration(seconds: float) -> str:
    """`850 ms`, `42 s`, `14 min`, `2.5 h`, `24 d`: the largest unit of at least 1, 3
    significant digits (`inf` for an unbounded time)."""
    s = float(seconds)
    if math.isinf(s):
        return "inf"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if abs(s) >= size:
            return f"{_sig3(s / size)} {unit}"
    return f"{_sig3(s * 1e3)} ms"


def format_rate(bytes_per_s: float) -> str:
    """`1.16 GB/s`, `6 TB/s`: a transfer rate (disk, network, link throughput) in decimal
    units, as drives and links are rated; memory sizes stay binary (`format_bytes`)."""
    r = float(bytes_per_s)
    for unit, size in (("PB/s", 1e15), ("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6),
                       ("kB/s", 1e3)):  # fmt: skip
        if r >= size:
            return f"{_sig3(r / size)} {unit}"
    return f"{r:.0f} B/s"


def format_multiple(x: float | None, digits: int = 3) -> str:
    """`2.19×`, `26×`, `6,212×` (`n/a` for None or a non-finite value)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if abs(x) >= 10**digits:
        return f"{x:,.0f}×"
    return f"{x:.{digits}g}×"


def format_number(x: float, digits: int = 3) -> str:
    """`0.102`, `1,360`, `146,000`, `0.0000677`: a plain number (a count, a load factor)
    to `digits` significant digits with thousands separated, never an exponent."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= digits - 1:  # the significant digits are all before the point
        return f"{round(x, digits - 1 - magnitude):,.0f}"
    return f"{x:.{digits - 1 - magnitude}f}".rstrip("0").rstrip(".")


def format_percent(fraction: float, digits: int = 3) -> str:
    """`97.3%`, `0.12%`, `0.00003%`: a fraction as a percentage with `digits` significant
    digits, never an exponent (`3e-05%` is no answer to read)."""
    value = 100 * fraction
    text = f"{value:.{digits}g}"
    if "e" in text and math.isfinite(value):
        if abs(value) >= 1:
            text = f"{value:.0f}"
        else:  # the significant digits after the leading zeros, trailing zeros dropped
            decimals = digits - 1 - math.floor(math.log10(abs(value)))
            text = f"{value:.{decimals}f}".rstrip("0").rstrip(".")
    return f"{text}%"


__all__ = [
    "format_bytes",
    "format_duration",
    "format_hit_ratio",
    "format_multiple",
    "format_number",
    "format_percent",
    "format_rate",
    "format_target",
    "parse_bytes",
    "parse_duration",
    "plural",
]


def format_target(target: float | str) -> str:
    """A hit-ratio target as people say it: `90%`, `99.9%`, `99.99%` (the fraction as the
    user gave it, at %g's six digits: not rounded to three, where 0.9999 would read 100%)."""
    return f"{100 * float(target):g}%"


def format_hit_ratio(value: float | None, missing: str = "n/a") -> str:
    """A hit (or miss) ratio to four places; `missing` for a system with no cache."""
    return missing if value is None else f"{value:.4f}"
