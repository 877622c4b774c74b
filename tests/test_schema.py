"""Versioned documents (`replay._schema`, `replay._schema_docs`): each generated schema is
the one published in replay/schemas/ and has the shape its version was published with
(a change of shape without a version bump fails here); `replay schema` lists, prints and
validates; readers refuse a `schema_version` they do not know in one line; and the
committed example report's documents validate. Every document the rest of the suite
writes is validated as it is written (conftest sets REPLAY_CHECK_SCHEMAS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import jsonschema
import pytest

from replay._schema import VERSIONS, fields, json_schema, unit_of
from replay._schema_docs import (
    DOCUMENTS,
    SchemaViolation,
    check_written,
    fingerprint,
    published_path,
    schema_text,
)
from replay._schema_stamp import stamp
from replay.cli import main

ROOT = Path(__file__).resolve().parent.parent

# The shape of each document at each version (`fingerprint`: the schema without its
# words). A definition whose shape changes must bump its version in
# replay._schema.VERSIONS, add a line here, and publish the schemas again
# (`python -c "from replay._schema_docs import write_published; write_published()"`);
# the lines of earlier versions stay.
FINGERPRINTS = {
    ("plan", 1): "26a8b72b924039b0",
    ("torchrec", 2): "9dcc209e729d54e0",
    ("sharding", 1): "55f1028d3fa89072",
    ("run-summary", 1): "a49b8955507ed9e5",
    ("run-config", 1): "37f5ac303d512d47",
    ("run-meta", 1): "a2fd280e3e3bae90",
    ("run-workload", 1): "3af1719c82060402",
    ("compare", 1): "0f3bf1960f2c86df",
    ("sweep", 1): "2e0255e122e31b2a",
    ("mrc", 1): "3af1719c82060402",
    ("report-summary", 1): "c4eb73d1be939e45",
    ("trace-manifest", 1): "0e81beaed3ed6a53",
    ("diff", 1): "c38ea11b39d10933",
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_each_shape_is_the_one_its_version_was_published_with(name: str) -> None:
    doc = DOCUMENTS[name]
    schema = doc.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    key = (name, doc.version)
    assert key in FINGERPRINTS, f"{name} v{doc.version}: no fingerprint; add {fingerprint(schema)}"
    assert fingerprint(schema) == FINGERPRINTS[key], (
        f"the shape of {name} changed without a version bump: bump VERSIONS[{name!r}], add "
        f"({name!r}, {doc.version + 1}): <its fingerprint> to FINGERPRINTS and publish again"
    )
    # what ships is what the definitions generate, words included
    assert published_path(name).read_text() == schema_text(schema)


def test_every_version_has_its_reader_and_every_published_file_a_document() -> None:
    assert set(DOCUMENTS) == set(VERSIONS)
    shipped = {p.name for p in (ROOT / "replay" / "schemas").glob("*.json")}
    assert shipped == {f"{n}.v{d.version}.json" for n, d in DOCUMENTS.items()}


class _Inner(TypedDict):
    size_bytes: Annotated[int, "a size"]


class _Outer(TypedDict):
    inner: _Inner
    ratio: NotRequired[Annotated[float | None, "a ratio"]]


class _Wider(TypedDict):
    inner: _Inner
    ratio: NotRequired[Annotated[float | None, "a ratio"]]
    extra_s: float


class _Reworded(TypedDict):
    inner: _Inner
    ratio: NotRequired[Annotated[float | None, "another meaning"]]


def test_a_fingerprint_moves_with_the_shape_and_not_with_the_words() -> None:
    VERSIONS["_test"] = 1
    try:

        def of(td: Any) -> str:
            return fingerprint(json_schema("_test", td, title="t", description="d"))

        assert of(_Outer) != of(_Wider)
        assert of(_Outer) == of(_Reworded)
        schema = json_schema("_test", _Outer, title="t", description="d")
        assert schema["required"] == ["schema_version", "inner"]
        assert schema["properties"]["ratio"] == {
            "anyOf": [{"type": "number"}, {"type": "null"}],
            "description": "a ratio",
        }
        assert schema["$defs"]["_Inner"]["additionalProperties"] is False
        assert ("inner.size_bytes", "integer", "bytes", "a size") in fields(_Outer)
    finally:
        del VERSIONS["_test"]


@pytest.mark.parametrize(
    ("key", "unit"),
    [("interval_s", "seconds"), ("budget_bytes", "bytes"),
     ("energy_per_batch_j", "joules per batch"),
     ("aggregate_write_bw_bytes_per_s", "bytes per second"), ("hit_ratio", "")],
)  # fmt: skip
def test_units_come_from_the_key_names(key: str, unit: str) -> None:
    assert unit_of(key) == unit


def test_stamp_puts_the_version_first_and_keeps_the_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REPLAY_CHECK_SCHEMAS")  # not a diff document: only its order
    out = stamp("diff", {"kind": "plan", "schema_version": 99, "a": "x"})
    assert list(out) == ["schema_version", "kind", "a"] and out["schema_version"] == 1


def test_a_document_that_breaks_its_schema_is_refused_as_it_is_written() -> None:
    good = {"kind": "plan", "a": "A", "b": "B", "answers": [], "thresholds": [], "broken": []}
    check_written("diff", stamp("diff", good))
    with pytest.raises(SchemaViolation, match=r"answers\[0\]\.changed is missing"):
        bad = {**good, "answers": [{"path": "p", "unit": "", "a": 1, "b": 2, "change": 1,
                                    "relative_change": 1}]}  # fmt: skip
        check_written("diff", stamp("diff", bad))


# -- the command ----------------------------------------------------------------------


def test_list_names_every_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == list(DOCUMENTS)


def test_a_schema_prints_as_published(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "plan"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(published_path("plan").read_text())
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _sharding() -> dict[str, Any]:
    return stamp("sharding", {"tables": [{"table": "t", "type": "table-wise", "ranks": [0]}]})


def test_validate_a_good_and_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "sharding.json"
    good.write_text(json.dumps(_sharding()))
    assert main(["schema", "sharding", "--validate", str(good)]) == 0
    assert "a valid sharding document" in capsys.readouterr().out
    bad = _sharding()
    bad["tables"][0]["ranks"] = "0"
    del bad["tables"][0]["type"]  # the first bad key in the file's order is named
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main(["schema", "sharding", "--validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tables[0].type is missing" in err, err
    extra = {**_sharding(), "colour": "red"}
    path.write_text(json.dumps(extra))
    assert main(["schema", "sharding", "--validate", str(path)]) == 2
    assert "colour is not a key of this document" in capsys.readouterr().err


def test_bad_names_and_versions_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "nope"]) == 2
    assert "no document 'nope'" in capsys.readouterr().err
    assert main(["schema"]) == 2
    assert "--list" in capsys.readouterr().err
    path = tmp_path / "sharding.json"
    path.write_text(json.dumps({**_sharding(), "schema_version": 7}))
    assert main(["schema", "sharding", "--validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "schema_version 7" in err, err


# -- readers refuse versions they do not know ---------------------------------------


def test_readers_refuse_an_unknown_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.system.sharding import plan_from_json

    with pytest.raises(Exception, match=r"schema_version 2 of a sharding document"):
        plan_from_json({**_sharding(), "schema_version": 2})
    assert plan_from_json({"tables": _sharding()["tables"]}).tables  # written before versions
    # a plan folder whose plan.json is of a later version: report and diff say so
    plan = tmp_path / "p"
    plan.mkdir()
    (plan / "plan.json").write_text(json.dumps({"schema_version": 2, "cache": {}}))
    assert main(["diff", str(plan), str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "schema_version 2 of a plan document" in err, err
    from replay.report.load import ReportError, load_results

    with pytest.raises(ReportError, match=r"schema_version 2 of a plan document"):
        load_results([plan])


def test_a_trace_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    from replay.errors import TraceError
    from replay.trace.format import load_manifest

    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": "1", "tables": []}))
    with pytest.raises(TraceError, match=r"schema_version '1' of a trace-manifest document"):
        load_manifest(tmp_path)


# -- what is committed ----------------------------------------------------------------


def test_the_docs_page_is_the_generated_one() -> None:
    from replay._schema_page import PAGE, page

    assert PAGE.read_text() == page(), "write it again: replay._schema_page.write_page()"


def test_the_example_reports_summary_validates() -> None:
    path = ROOT / "reports" / "example" / "summary.json"
    assert main(["schema", "report-summary", "--validate", str(path)]) == 0


def _document_of(path: Path) -> str:
    """The document a JSON file replay wrote is, by its name and what is beside it."""
    names = {"manifest.json": "trace-manifest", "config.json": "run-config",
             "meta.json": "run-meta", "workload.json": "run-workload"}  # fmt: skip
    if path.name in names:
        return names[path.name]
    if path.name == "summary.json":
        return "run-summary" if (path.parent / "config.json").is_file() else "report-summary"
    return path.stem


@pytest.mark.bench
def test_every_document_the_quickstart_writes_validates(tmp_path: Path) -> None:
    """The quick start (at the README test's size) and its trace, walked file by file."""
    out, trace = tmp_path / "qs", tmp_path / "trace"
    args = ["quickstart", "--batches", "100", "--batch-size", "256"]
    assert main([*args, "--out", str(out), "--trace", str(trace)]) == 0
    files = sorted([*out.rglob("*.json"), *trace.rglob("*.json")])
    assert {_document_of(p) for p in files} >= {
        "plan", "torchrec", "run-summary", "run-config", "run-meta", "compare", "sweep",
        "report-summary", "trace-manifest",
    }  # fmt: skip
    for path in files:
        assert main(["schema", _document_of(path), "--validate", str(path)]) == 0, path
