"""JSON parsing for files a user can hand replay (trace manifests, result folders,
`torchrec.json`): every way the standard parser fails on hostile text becomes the
caller's one-line error instead of a traceback.

`json.loads` raises more than `JSONDecodeError`: `RecursionError` on arrays or objects
nested past the interpreter's recursion limit (about 1,000 levels), and a plain
`ValueError` on an integer of more than 4,300 digits (Python's limit on converting
strings to integers). Files replay wrote itself never hold either, so both are refused
as the file's fault. What parses is only well-formed: callers still check each field's
type and range (a 4,000-digit integer parses, and `float()` of it overflows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from replay.errors import ReplayError

# Nesting a parsed document may keep. replay's own files nest a handful of levels; a
# document just under the recursion limit parses, but then any recursive walk of it (a
# check, `json.dumps` of a part of it into another file) would hit the limit itself.
MAX_DEPTH = 64


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_json(
    text: str | bytes, where: str | Path, error: type[ReplayError], *, bad: str = "not valid JSON"
) -> Any:
    """`text` parsed, or `error("WHERE: BAD (WHY)")`: malformed text, a number too long to
    convert, nesting deeper than `MAX_DEPTH`. `bad`: the caller's words for such a file."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: {bad} ({exc})") from None
    except UnicodeDecodeError:  # bytes that are not UTF-8 (a subclass of ValueError)
        raise error(f"{where}: {bad} (not UTF-8 text)") from None
    except ValueError:  # an integer of more than 4,300 digits
        raise error(f"{where}: {bad} (a number is too long)") from None
    except RecursionError:
        raise error(f"{where}: {bad} (nested too deeply)") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise error(f"{where}: {bad} (nested more than {MAX_DEPTH} levels deep)")
    return value


__all__ = ["MAX_DEPTH", "parse_json"]
