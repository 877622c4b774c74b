"""`stamp`: a document as a writer writes it, `schema_version` first (`replay._schema`);
with `REPLAY_CHECK_SCHEMAS` set, each document is validated against its published schema
as it is written (`replay._schema_docs.check_written`; the test suite sets it). A module
apart from `replay._schema` because the check needs the definitions, which import it.
"""

from __future__ import annotations

import os
from typing import Any

from replay._schema import VERSION_KEY, VERSIONS

# set (to anything but ""): `stamp` validates each document against its published schema
# as it is written; the test suite sets it, so every document it writes is checked
CHECK_ENV = "REPLAY_CHECK_SCHEMAS"


def stamp(name: str, document: dict[str, Any]) -> dict[str, Any]:
    """`document` with `schema_version` first (its current version), the rest in order:
    what a writer writes, as it is written (with `REPLAY_CHECK_SCHEMAS` set, validated)."""
    body = {k: v for k, v in document.items() if k != VERSION_KEY}
    out = {VERSION_KEY: VERSIONS[name], **body}
    if os.environ.get(CHECK_ENV):
        from replay._schema_docs import check_written

        check_written(name, out)
    return out


__all__ = ["CHECK_ENV", "stamp"]
