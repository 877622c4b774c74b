"""The trace dataset: format version 1 (DESIGN section 3).

A trace is a folder with `manifest.json`, `lookups/part-NNNNN.parquet` and
`updates/part-NNNNN.parquet`. `format` holds the constants and the manifest checks,
`writer` writes folders atomically, `reader` streams batch ranges back as numpy arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replay.trace.format import FORMAT_VERSION
    from replay.trace.reader import LookupChunk, Trace, UpdateChunk, open_trace


def __getattr__(name: str) -> Any:
    # loaded on first use: a light module of this package (`curve_points`) imported by a
    # command's options does not bring pyarrow and numba with it
    if name == "FORMAT_VERSION":
        from replay.trace import format

        return format.FORMAT_VERSION
    if name in ("LookupChunk", "Trace", "UpdateChunk", "open_trace"):
        from replay.trace import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'replay.trace' has no attribute {name!r}")


__all__ = ["FORMAT_VERSION", "LookupChunk", "Trace", "UpdateChunk", "open_trace"]
