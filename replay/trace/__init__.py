"""The trace dataset: format version 1 (DESIGN section 3).

A trace is a folder with `manifest.json`, `lookups/part-NNNNN.parquet` and
`updates/part-NNNNN.parquet`. `format` holds the constants and the manifest checks,
`writer` writes folders atomically, `reader` streams batch ranges back as numpy arrays.
"""

from replay.trace.format import FORMAT_VERSION
from replay.trace.reader import LookupChunk, Trace, UpdateChunk, open_trace

__all__ = ["FORMAT_VERSION", "LookupChunk", "Trace", "UpdateChunk", "open_trace"]
