"""`replay schema`: the JSON Schemas (draft 2020-12) of the documents replay writes
(`replay._schema_docs`): `--list` names them, `replay schema NAME` prints one, and
`--validate FILE` checks a file against it (exit 0 valid, 2 with one line naming the
first bad key).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay.cli.app import app, shown


@app.command("schema", short_help="The JSON Schemas of replay's documents; validate a file.")
def schema_command(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="A document (see --list), e.g. plan, run-summary."),
    ] = None,
    *,
    list_them: Annotated[
        bool, typer.Option("--list", help="Name every document, its version and its file.")
    ] = False,
    validate: Annotated[
        Path | None,
        typer.Option(
            "--validate",
            metavar="FILE",
            help="Check FILE against NAME's schema: exit 0 if valid, 2 naming the first bad key "
            "(default: print the schema).",
        ),
    ] = None,
) -> None:
    """Print a document's JSON Schema (draft 2020-12), list the documents, or validate a
    file: every JSON file replay writes has a `schema_version` and one of these shapes
    (docs/schemas.md)."""
    from replay._schema_docs import DOCUMENTS, document, published_path
    from replay.errors import ConfigError

    if list_them:
        if name is not None or validate is not None:
            raise ConfigError("--list takes no NAME and no --validate")
        width = max(len(n) for n in DOCUMENTS)
        for doc in DOCUMENTS.values():
            typer.echo(f"{doc.name:<{width}}  v{doc.version}  {doc.file:<14} {doc.title}")
        return
    if name is None:
        raise ConfigError("give a document's NAME (replay schema --list names them)")
    doc = document(name)
    if validate is None:
        typer.echo(published_path(doc.name).read_text(), nl=False)
        return
    from replay._files import MANIFEST, RESULT_JSON, SHARDING_PLAN, TORCHREC_STATS, read_json
    from replay._schema_docs import validate as check
    from replay.errors import InputError

    kind = {"trace-manifest": MANIFEST, "sharding": SHARDING_PLAN, "torchrec": TORCHREC_STATS}
    value = read_json(validate, kind.get(doc.name, RESULT_JSON), InputError)
    check(doc.name, value, validate)
    typer.echo(
        f"{shown(validate, markup=False)}: a valid {doc.name} document "
        f"(schema_version {doc.version})"
    )
