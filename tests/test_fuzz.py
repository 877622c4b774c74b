"""Fuzzing the input boundaries: TOML specs, Criteo TSV files and trace folders.

Random bytes and random mutations of valid files must end in a valid result or in one
clean `ReplayError` (a one-line, non-empty message), never in any other exception. The
tests are derandomized (the same examples on every run) and each example works in a
temporary folder of its own (Hypothesis reruns a test with the same fixtures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

import replay.trace.format as trace_format
from replay.analysis.stats import inspect_trace
from replay.cli import main
from replay.engine.systems import resolve_system, resolve_system_with_origin, system_from_dict
from replay.errors import ConfigError, ReplayError, TraceError
from replay.system.presets import PRESET_DIR, SYSTEM_PRESETS
from replay.system.spec import SystemSpec
from replay.trace import open_trace
from replay.trace.criteo import ingest
from replay.trace.criteo_parse import MAX_IND_RANGE, MAX_LINE_BYTES
from replay.trace.criteo_reference import (
    ingest_reference_rows,
    reference_lookups,
    split_lines_reference,
)
from replay.trace.format import safe_member
from replay.trace.writer import write_trace_from_arrays
from replay.workload.generator import resolve_workload
from replay.workload.presets import PRESETS
from replay.workload.spec import load_spec, spec_to_toml

ROOT = Path(__file__).parents[1]

_FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


# A longer, random campaign: REPLAY_FUZZ_SCALE=50 runs 50 times the examples, new ones
# each run (the default, 1, runs the same examples every time).
SCALE = int(os.environ.get("REPLAY_FUZZ_SCALE", "1"))


def fuzz(examples: int) -> settings:
    """Deterministic Hypothesis settings for CI: the same `examples` inputs every run."""
    return settings(_FUZZ, max_examples=examples * SCALE, derandomize=SCALE == 1)


def clean_error(exc: ReplayError) -> None:
    """A ReplayError as the CLI prints it: one non-empty line."""
    message = str(exc)
    assert message.strip(), f"{type(exc).__name__} with an empty message"
    assert "\n" not in message and "\r" not in message, f"multi-line message: {message!r}"


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn's result, or the ReplayError it raised (checked); any other exception fails.

    Under Hypothesis each outcome is an event (`--hypothesis-show-statistics` shows how
    many examples got how far)."""
    name = getattr(fn, "__name__", "step")
    try:
        result = fn(*args, **kwargs)
    except ReplayError as exc:
        clean_error(exc)
        if currently_in_test_context():
            event(f"{name}: {type(exc).__name__}")
        return exc
    if currently_in_test_context():
        event(f"{name}: ok")
    return result


# -- TOML: values and line mutations ----------------------------------------------------

# Values that once broke (or could break) a loader: huge and special numbers, wrong
# types, nesting deeper than the parser's recursion limit, strings with control chars.
NASTY_TOML_VALUES = [
    "0", "-1", "1", "-0.0", "nan", "-nan", "inf", "+inf", "-inf", "1e308", "-1e308",
    "1e-320", "0.5", "1.5", str(2**31), str(2**32), str(2**63), str(2**64 + 1),
    str(-(2**63) - 1), "1" + "0" * 400, "9" * 4300, "9" * 4400, "0x" + "f" * 4400,
    '"x"', '""', '"\\n\\r\\u0000"', "'raw'", "[]", "[1, 2]", '["a", 1]', "[nan]",
    "[1e400]", "[" + "1" * 400 + "]", "{}", "{ a = 1 }", "true", "false",
    "1979-05-27T07:32:00Z", "[" * 3000 + "]" * 3000, "{a=" * 1000 + "1" + "}" * 1000,
    '"hbm"', '"dram"', '"lru"', '"gpu"', '"pcie"', '"nvme"', '"sgd"', '"furthest"',
]  # fmt: skip

KEY_LINE = re.compile(r"^(\s*[A-Za-z0-9_.\"'-]+\s*=\s*)(.*)$")


def toml_float(x: float) -> str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def toml_string(s: str) -> str:
    return json.dumps(s).replace("\x7f", "\\u007f")


toml_values = st.one_of(
    st.sampled_from(NASTY_TOML_VALUES),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(toml_float),
    st.text(max_size=12).map(toml_string),
    st.text(max_size=12),  # raw text: mostly not TOML at all
)
toml_keys = st.one_of(
    st.sampled_from(["name", "extends", "device", "capacity_bytes", "rows", "tables", "x"]),
    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    st.text(max_size=8).map(toml_string),
)


@st.composite
def mutated_text(draw: st.DrawFn, bases: list[str]) -> str:
    """A valid TOML text with a few lines deleted, duplicated, swapped or rewritten."""
    lines = draw(st.sampled_from(bases)).splitlines()
    for _ in range(draw(st.integers(1, 5))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(
            st.sampled_from(
                [
                    "value",
                    "value",
                    "value",
                    "delete",
                    "duplicate",
                    "swap",
                    "key",
                    "header",
                    "rename",
                    "truncate",
                    "chars",
                ]
            )
        )
        if op == "value":
            matches = [k for k, line in enumerate(lines) if KEY_LINE.match(line)]
            if matches:
                k = draw(st.sampled_from(matches))
                head = KEY_LINE.match(lines[k]).group(1)  # type: ignore[union-attr]
                lines[k] = head + draw(toml_values)
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "key":
            lines.insert(i, f"{draw(toml_keys)} = {draw(toml_values)}")
        elif op == "header":
            name = ".".join(draw(st.lists(toml_keys, min_size=1, max_size=3)))
            lines.insert(i, draw(st.sampled_from(["[{}]", "[[{}]]"])).format(name))
        elif op == "rename":
            m = KEY_LINE.match(lines[i])
            if m:
                lines[i] = f"{draw(toml_keys)} = " + m.group(2)
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, max(len(lines[i]) - 1, 0)))]
        else:
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(st.text(max_size=4)) + lines[i][pos:]
    return "\n".join(lines) + "\n"


def dump_toml(data: dict[str, Any], prefix: str = "") -> str:
    """Plain data as TOML (tables as [a.b] sections), enough for the specs' dicts."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return toml_float(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return toml_string(str(v))

    scalars = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = "\n".join(scalars) + "\n"
    for k, v in data.items():
        if isinstance(v, dict):
            name = f"{prefix}.{k}" if prefix else k
            out += f"\n[{name}]\n" + dump_toml(v, name)
    return out


def system_data(spec: SystemSpec) -> dict[str, Any]:
    """`spec.to_dict()` less the keys at their defaults. to_dict writes every default, and
    some defaults are outside their own key's range (failures.mtbf_s = 0.0 for "no failure
    model", a tier's capacity_bytes = 0.0 when not given), which `system_from_dict`
    refuses when stated."""
    data = spec.to_dict()
    sections = {
        "lookup": spec.lookup, "policy": spec.policy, "compute": spec.compute,
        "model": spec.model, "checkpoint": spec.checkpoint, "failures": spec.failures,
    }  # fmt: skip
    named = [(data["tiers"], t) for t in spec.tiers] + [(data["links"], lk) for lk in spec.links]
    for body, default in [(data[k], type(v)) for k, v in sections.items()] + [
        (group[item.name], type(item)) for group, item in named
    ]:
        for f in dataclasses.fields(default):
            if (
                f.name in body
                and f.default is not dataclasses.MISSING
                and body[f.name] == f.default
            ):
                del body[f.name]
    return data


def _system_bases() -> list[str]:
    bases = [p.read_text() for p in sorted(PRESET_DIR.glob("*.toml"))]
    for name in ("hbm-lru", "chunk", "pcie-ndp", "fastpersist-8"):
        bases.append(dump_toml(system_data(resolve_system(name))))
    return bases


def _workload_bases() -> list[str]:
    bases = [(ROOT / "traces" / "example.toml").read_text()]
    bases += [spec_to_toml(PRESETS[name]) for name in ("tiny", "criteo-mlperf-dcnv2")]
    return bases


SYSTEM_BASES = _system_bases()
WORKLOAD_BASES = _workload_bases()


def round_trips(spec: SystemSpec) -> bool:
    """A valid spec comes back from its plain data."""
    return system_from_dict(system_data(spec)) == spec


def check_system(path: Path, sets: list[str] | None = None) -> None:
    result = outcome(resolve_system_with_origin, path, sets)
    if not isinstance(result, ReplayError):
        assert round_trips(result[0])


def check_workload(path: Path) -> None:
    spec = outcome(resolve_workload, path)
    if isinstance(spec, ReplayError):
        return
    again = path.with_name("again.toml")
    again.write_text(spec_to_toml(spec))
    assert load_spec(again) == spec  # a valid spec round-trips through its TOML


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        yield Path(tmp)


def test_presets_round_trip() -> None:
    """The bases are valid (so mutations start from valid files)."""
    with scratch() as tmp:
        for i, text in enumerate(SYSTEM_BASES):
            (tmp / f"s{i}.toml").write_text(text)
            resolve_system(tmp / f"s{i}.toml")
        for i, text in enumerate(WORKLOAD_BASES):
            (tmp / f"w{i}.toml").write_text(text)
            resolve_workload(tmp / f"w{i}.toml")


@fuzz(100)
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_toml_random_bytes(raw: bytes) -> None:
    with scratch() as tmp:
        path = tmp / "random.toml"
        path.write_bytes(raw)
        check_system(path)
        check_workload(path)


@fuzz(300)
@given(text=mutated_text(SYSTEM_BASES))
def test_system_toml_mutations(text: str) -> None:
    with scratch() as tmp:
        path = tmp / "system.toml"
        path.write_text(text)
        check_system(path)


@fuzz(250)
@given(text=mutated_text(WORKLOAD_BASES))
def test_workload_toml_mutations(text: str) -> None:
    with scratch() as tmp:
        path = tmp / "workload.toml"
        path.write_text(text)
        check_workload(path)


def _flat_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k, v in data.items():
        name = f"{prefix}{k}"
        keys.append(name)
        if isinstance(v, dict):
            keys += _flat_keys(v, name + ".")
    return keys


SET_KEYS = sorted(
    {
        k
        for name in ("hbm-lru", "chunk", "fastpersist-8")
        for k in _flat_keys(resolve_system(name).to_dict())
    }
)
set_items = st.one_of(
    st.builds(
        lambda key, value: f"{key}={value}",
        st.one_of(
            st.sampled_from(SET_KEYS),
            st.builds(lambda a, b: f"{a}.{b}", st.sampled_from(SET_KEYS), toml_keys),
            st.text(max_size=10),
        ),
        toml_values,
    ),
    st.text(max_size=20),
)


@fuzz(300)
@given(
    base=st.sampled_from(SYSTEM_PRESETS),
    sets=st.lists(set_items, min_size=1, max_size=4),
)
def test_system_set_overrides(base: str, sets: list[str]) -> None:
    result = outcome(resolve_system_with_origin, base, sets)
    if not isinstance(result, ReplayError):
        assert round_trips(result[0])


@fuzz(100)
@given(name=st.one_of(st.text(max_size=40), st.sampled_from(["x" * 300, "a\0b", "/", ".", ""])))
def test_system_names(name: str) -> None:
    """`--system NAME`: a preset, a TOML file, or a clean error (even for odd names)."""
    outcome(resolve_system_with_origin, name)


@pytest.mark.parametrize(
    "value",
    [
        "9" * 4400,
        "0x" + "f" * 4400,
        "[" * 3000 + "]" * 3000,
        "{a=" * 1000 + "1" + "}" * 1000,
        "1" + "0" * 400,
    ],
    ids=["4400-digits", "17600-bit-hex", "deep-arrays", "deep-tables", "1e400-as-int"],
)
def test_toml_values_beyond_the_parser(value: str) -> None:
    """Regressions: a 4400-digit integer (ValueError in the parser), a hex integer too
    long to print (ValueError in the message that shows it), deep nesting (RecursionError)
    and an integer beyond any float in a float field (OverflowError) were not ConfigErrors."""
    with scratch() as tmp:
        system = tmp / "s.toml"
        system.write_text(f'extends = "hbm-lru"\n[policy]\ncapacity_bytes = {value}\n')
        with pytest.raises(ConfigError, match=r"s\.toml"):
            resolve_system(system)
        workload = tmp / "w.toml"
        workload.write_text(f'[[tables]]\nname = "a"\nrows = 10\nalpha = {value}\n')
        with pytest.raises(ConfigError, match=r"w\.toml"):
            resolve_workload(workload)
    with pytest.raises(ConfigError, match="capacity_bytes"):
        resolve_system("hbm-lru", [f"policy.capacity_bytes={value}"])


@pytest.mark.parametrize("name", ["x" * 300, "x" * 300 + ".toml", "a\0b", "a\0b.toml"])
def test_system_odd_names(name: str) -> None:
    """Regression: a name too long for a file name was an OSError, a NUL a ValueError."""
    assert isinstance(outcome(resolve_system, name), ConfigError)


def test_workload_names_with_control_characters_round_trip() -> None:
    """Regression: spec_to_toml wrote a newline or a control character in a name as is,
    which is not valid TOML."""
    spec = dataclasses.replace(PRESETS["tiny"], name='a\nb\x7f\x00"\\ é', source="\t")
    with scratch() as tmp:
        (tmp / "w.toml").write_text(spec_to_toml(spec))
        assert load_spec(tmp / "w.toml") == spec


def test_odd_names_in_messages_stay_one_line() -> None:
    with scratch() as tmp:
        path = tmp / "s.toml"
        path.write_text('[tiers."a\\nb"]\ncapacity_bytes = -1\n')
        error = outcome(resolve_system, path)
        assert isinstance(error, ReplayError) and "capacity_bytes" in str(error)
    error = outcome(resolve_system, "hbm-lru", ["name.x\ny=1"])
    assert isinstance(error, ReplayError)


# -- Criteo TSV ingester --------------------------------------------------------------------


def good_lines(rng: random.Random, n: int) -> list[bytes]:
    lines = []
    for _ in range(n):
        label = rng.choice(["0", "1"])
        ints = [rng.choice(["", str(rng.randint(-5, 10**6))]) for _ in range(13)]
        cats = [
            rng.choice(["", f"{rng.getrandbits(32):08x}", f"{rng.randint(0, 9):x}"])
            for _ in range(26)
        ]
        lines.append("\t".join([label, *ints, *cats]).encode())
    return lines


TSV_OPS = [
    "drop_tab", "insert_tab", "flip", "insert", "truncate", "huge_int", "bad_hex", "crlf",
    "no_final_newline", "nul", "dup_line", "blank_line", "lone_cr", "long_line", "empty",
]  # fmt: skip


def mutate_tsv(rng: random.Random, data: bytes, ops: list[str]) -> bytes:
    buf = bytearray(data)
    for op in ops:
        pos = rng.randint(0, len(buf))
        if op == "drop_tab":
            tabs = [i for i, c in enumerate(buf) if c == 9]
            if tabs:
                del buf[rng.choice(tabs)]
        elif op == "insert_tab":
            buf[pos:pos] = b"\t" * rng.randint(1, 3)
        elif op == "flip" and buf:
            for _ in range(rng.randint(1, 5)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == "insert":
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == "truncate":
            del buf[pos:]
        elif op == "huge_int":
            number = rng.choice(["9" * rng.randint(20, 5000), "-" + "1" * 30, "+", "-", "1e5"])
            buf[pos:pos] = number.encode()
        elif op == "bad_hex":
            buf[pos:pos] = rng.choice([b"fffffffff", b"0x1", b"g", b"-1", b" 1"])
        elif op == "crlf":
            buf = bytearray(bytes(buf).replace(b"\n", b"\r\n"))
        elif op == "no_final_newline":
            while buf and buf[-1:] in (b"\n", b"\r"):
                del buf[-1]
        elif op == "nul":
            buf[pos:pos] = b"\0"
        elif op == "dup_line":
            buf[pos:pos] = bytes(buf[: rng.randint(0, 400)])
        elif op == "blank_line":
            buf[pos:pos] = b"\n"
        elif op == "lone_cr":
            buf[pos:pos] = b"\r"
        elif op == "long_line":
            buf[pos:pos] = b"1" * (MAX_LINE_BYTES + rng.randint(1, 100))
        elif op == "empty":
            buf = bytearray()
    return bytes(buf)


def expected_ingest(datas: list[bytes], skip: bool, rule: dict[str, Any]) -> Any:
    """The reference's rows and bad-line count, or its InputError."""
    lines = [x for data in datas for x in split_lines_reference(data)]
    try:
        return ingest_reference_rows(lines, skip_bad_lines=skip, **rule)
    except ReplayError as exc:
        return exc


@fuzz(150)
@given(
    seed=st.integers(0, 2**32 - 1),
    lines=st.integers(1, 12),
    ops=st.lists(st.sampled_from(TSV_OPS), max_size=3),
    container=st.sampled_from(
        [
            "plain",
            "plain",
            "plain",
            "plain",
            "plain",
            "gzip",
            "gzip",
            "gzip-corrupt",
            "gzip-truncated",
            "gz-name-plain",
            "random",
            "random-gz",
            "magic",
        ]
    ),
    split=st.booleans(),
    skip=st.sampled_from([True, True, False]),
    rule=st.sampled_from(
        [
            {"dictionary": True},
            {"max_ind_range": 97},
            {"max_ind_range": 1},
            {"max_ind_range": MAX_IND_RANGE},
        ]
    ),
    batch_size=st.sampled_from([1, 3, 64]),
    block=st.sampled_from([64, 1000, 1 << 16]),
)
def test_ingest_fuzz(
    seed: int,
    lines: int,
    ops: list[str],
    container: str,
    split: bool,
    skip: bool,
    rule: dict[str, Any],
    batch_size: int,
    block: int,
) -> None:
    rng = random.Random(seed)
    if block < 1 << 16:  # over-long lines parse slowly through tiny blocks; no news there
        ops = [op for op in ops if op != "long_line"]
    data = b"".join(line + b"\n" for line in good_lines(rng, lines))
    data = mutate_tsv(rng, data, ops)
    if container in ("random", "random-gz"):
        data = rng.randbytes(rng.randint(0, 600))
    cut = rng.randint(0, len(data)) if split else len(data)
    datas = [data[:cut], data[cut:]] if split else [data]
    with scratch() as tmp:
        files = []
        for i, chunk in enumerate(datas):
            raw = chunk
            name = f"day{i}.tsv"
            if container.startswith("gzip"):
                raw = gzip.compress(chunk, mtime=0)
                name += ".gz"
                if container == "gzip-corrupt" and len(raw) > 12:
                    raw = bytearray(raw)
                    for _ in range(rng.randint(1, 4)):
                        raw[rng.randrange(10, len(raw))] ^= 1 << rng.randrange(8)
                    raw = bytes(raw)
                elif container == "gzip-truncated":
                    raw = raw[: rng.randint(0, len(raw) - 1)]
            elif container in ("gz-name-plain", "random-gz"):
                name += ".gz"
            elif container == "magic":
                raw = b"\x1f\x8b" + chunk
            files.append(tmp / name)
            files[-1].write_bytes(raw)
        out = tmp / "trace"
        result = outcome(
            ingest,
            files,
            out,
            batch_size=batch_size,
            skip_bad_lines=skip,
            block_bytes=block,
            workers=1 + seed % 2,
            **rule,
        )
        if isinstance(result, ReplayError):
            assert not out.exists() and not (tmp / ".trace.partial").exists()
        else:
            trace = open_trace(result.path)
            trace.verify()
            look = trace.lookups()
            assert len(look) == result.samples * 26 == result.lookups
        if container in ("plain", "gzip") and not data.startswith(b"\x1f\x8b"):
            want = expected_ingest(datas, skip, rule)
            if isinstance(want, ReplayError) or len(want[0]) == 0:
                assert isinstance(result, ReplayError)
            else:
                assert not isinstance(result, ReplayError), result
                rows, bad = want
                assert (result.samples, result.bad_lines) == (len(rows), bad)
                for got, ref in zip(
                    (look.batch, look.table, look.row),
                    reference_lookups(rows, batch_size),
                    strict=True,
                ):
                    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "name", ["x" * 300, "a\0b", "/" * 5000 + "x", ""], ids=["long", "nul", "slashes", "empty"]
)
def test_ingest_odd_input_names(name: str) -> None:
    """Regression: a file name too long for the OS was an OSError, not an InputError."""
    with scratch() as tmp:
        error = outcome(ingest, [name], tmp / "trace", max_ind_range=5)
        assert isinstance(error, ReplayError)
        assert not (tmp / "trace").exists()


# -- trace reader ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two valid traces: `generate`'s (one file, one row group per kind) and a small one
    of two files with several row groups each (statistics, merges across row groups)."""
    root = tmp_path_factory.mktemp("fuzz-traces")
    assert main(["generate", "--preset", "tiny", "--batches", "4", "--batch-size", "8",
                 "--out", str(root / "generated")]) == 0  # fmt: skip
    rng = np.random.default_rng(0)
    batches = 12
    batch = np.repeat(np.arange(batches), 10)
    table = np.tile(np.repeat([0, 1], 5), batches)
    row = np.where(table == 0, rng.integers(0, 7, len(batch)), rng.integers(0, 1000, len(batch)))
    with mock.patch.object(trace_format, "ROW_GROUP_TARGET_LOOKUPS", 20):
        small = write_trace_from_arrays(
            root / "groups",
            tables=[("a", 7), ("b", 1000)],
            batch=batch,
            table=table,
            row=row,
            batch_size=5,
        )
    assert len(list((small / "lookups").glob("*.parquet"))) == 2
    assert pq.ParquetFile(small / "lookups" / "part-00000.parquet").num_row_groups > 1
    return [root / "generated", small]


def read_everything(path: Path) -> None:
    """Open, stream, verify and inspect a trace: each step ends in data or a ReplayError."""
    trace = outcome(open_trace, path)
    if isinstance(trace, ReplayError):
        return
    repr(trace)

    def iter_lookups() -> list[int]:
        return [len(c) for c in trace.iter_lookups(min_lookups=7)]

    def iter_updates() -> list[int]:
        return [len(c) for c in trace.iter_updates(min_rows=5)]

    def iter_update_rows() -> list[int]:
        return [len(c) for c in trace.iter_updates(with_count=False, use_threads=False)]

    def batch_range() -> Any:
        return trace.lookups(1, 3)

    def inspect() -> Any:
        return inspect_trace(trace, curve_points=8, min_lookups=16)

    steps = [iter_lookups, iter_updates, iter_update_rows, batch_range, trace.verify]
    if sum(int(t["rows"]) for t in trace.manifest["tables"]) <= 1 << 20:
        steps.append(inspect)  # inspect allocates per row of the manifest's tables
    for step in steps:
        got = outcome(step)
        if isinstance(got, list):
            assert all(n > 0 for n in got)


def test_base_traces_read(base_traces: list[Path]) -> None:
    for path in base_traces:
        trace = open_trace(path)
        trace.verify()
        assert len(trace.lookups()) == trace.num_lookups
        inspect_trace(trace)


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(
        [
            -1,
            0,
            1,
            2**16,
            2**32,
            2**63,
            2**64,
            10**30,
            1e308,
            0.5,
            "",
            "1",
            "uint64",
            "uint8",
            "lookups/part-00000.parquet",
        ]
    ),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

NASTY_PATHS = [
    "../x.parquet", "../../etc/passwd", "/etc/passwd", "/dev/zero", "lookups/../../x",
    "manifest.json", "updates/part-00000.parquet", "lookups/part-00001.parquet", "lookups",
    "", ".", "./lookups/part-00000.parquet", "lookups//part-00000.parquet",
    "lookups/part-00000.parquet/", "a\0b", "x" * 300, "x/" * 3000, "\\..\\x", "~/x",
    "lookups/../lookups/part-00000.parquet", "outside-link.parquet", "loop",
]  # fmt: skip


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


@st.composite
def manifest_mutation(draw: st.DrawFn, manifest: dict[str, Any]) -> bytes:
    op = draw(
        st.sampled_from(
            [
                "set",
                "set",
                "set",
                "delete",
                "path",
                "path",
                "version",
                "numbers",
                "tables",
                "text",
                "bytes",
                "deep",
                "huge",
            ]
        )
    )
    m = json.loads(json.dumps(manifest))
    if op == "bytes":
        return draw(st.binary(max_size=400))
    if op == "deep":
        return draw(st.sampled_from([b"[" * 100_000, b'{"a":' * 100_000, b"[]" * 10]))
    if op == "huge":
        m["batches"] = 0  # replaced by a 5000-digit number below
        return json.dumps(m).replace('"batches": 0', '"batches": ' + "9" * 5000).encode()
    if op == "text":
        text = bytearray(json.dumps(m, indent=1).encode())
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(text) - 1))
            text[pos] = draw(st.integers(0, 255))
        return bytes(text)
    for _ in range(draw(st.integers(1, 3))):
        if op in ("set", "delete"):
            paths = [p for p in _paths(m) if p]
            path = draw(st.sampled_from(paths))
            m = _set(m, path, draw(json_values), delete=op == "delete")
        elif op == "path":
            kind = draw(st.sampled_from(["lookups", "updates"]))
            m["files"][kind][0]["path"] = draw(st.sampled_from(NASTY_PATHS))
        elif op == "version":
            m["format_version"] = draw(st.sampled_from([0, 2, -1, "1", 1.0, True, None, 2**64]))
        elif op == "numbers":
            entries = m["files"][draw(st.sampled_from(["lookups", "updates"]))]
            entry = draw(st.sampled_from([m, *m["tables"], *entries]))
            key = draw(
                st.sampled_from(["batches", "rows", "batch_start", "batch_stop", "batch_size"])
            )
            entry[key] = draw(st.sampled_from([-1, 0, 1, 3, 2**32, 2**63, 2**64, 10**30, 2.0]))
        elif op == "tables":
            m["tables"] = draw(
                st.one_of(
                    st.just([]),
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": st.text(max_size=4),
                                "rows": st.sampled_from([1, 2**32, 2**63, 2**64]),
                            }
                        ),
                        min_size=1,
                        max_size=3,
                    ),
                    st.just(m["tables"][:1]),
                    st.just([*m["tables"], {"name": "extra", "rows": 5}]),
                )
            )
    return json.dumps(m).encode()


def _copy_trace(base: Path, tmp: Path) -> Path:
    path = tmp / "trace"
    shutil.copytree(base, path)
    outside = tmp / "outside.parquet"
    shutil.copy(base / "lookups" / "part-00000.parquet", outside)
    os.symlink(outside, path / "outside-link.parquet")
    os.symlink(path / "loop", path / "loop")
    return path


@fuzz(250)
@given(which=st.integers(0, 1), data=st.data())
def test_trace_manifest_fuzz(base_traces: list[Path], which: int, data: st.DataObject) -> None:
    base = base_traces[which]
    manifest = json.loads((base / "manifest.json").read_text())
    raw = data.draw(manifest_mutation(manifest))
    with scratch() as tmp:
        path = _copy_trace(base, tmp)
        (path / "manifest.json").write_bytes(raw)
        read_everything(path)


@pytest.mark.parametrize("layout", [5, "pieces", [1, 2], True])
def test_trace_manifest_layout_not_a_table(base_traces: list[Path], layout: object) -> None:
    # a layout that is no table: no pieces, never an AttributeError (found by the fuzz)
    manifest = json.loads((base_traces[0] / "manifest.json").read_text())
    manifest["layout"] = layout
    with scratch() as tmp:
        path = _copy_trace(base_traces[0], tmp)
        (path / "manifest.json").write_text(json.dumps(manifest))
        read_everything(path)


def _other_parquet(kind: str, rng: random.Random) -> pa.Table:
    names = ["batch", "table", "row"] + (["count"] if kind == "updates" else [])
    choice = rng.randrange(5)
    n = rng.randint(0, 30)
    if choice == 0:  # same names, other types
        return pa.table({name: pa.array(np.arange(n, dtype=np.float64)) for name in names})
    if choice == 1:
        return pa.table({name: pa.array([str(i) for i in range(n)]) for name in names})
    if choice == 2:  # nullable, with nulls
        return pa.table(
            {
                name: pa.array([None if i % 3 else i for i in range(n)], pa.uint32())
                for name in names
            }
        )
    if choice == 3:  # signed and wide
        return pa.table({name: pa.array(np.arange(n, dtype=np.int64) - 5) for name in names})
    return pa.table({"x": pa.array(np.arange(n))})


PARQUET_OPS = [
    "flip", "flip", "flip_footer", "flip_footer", "overwrite", "truncate", "random",
    "empty", "append", "other", "swap",
]  # fmt: skip


@fuzz(300)
@given(
    which=st.integers(0, 1),
    seed=st.integers(0, 2**32 - 1),
    ops=st.lists(st.sampled_from(PARQUET_OPS), min_size=1, max_size=3),
    kind=st.sampled_from(["lookups", "updates"]),
)
def test_trace_parquet_fuzz(
    base_traces: list[Path], which: int, seed: int, ops: list[str], kind: str
) -> None:
    rng = random.Random(seed)
    with scratch() as tmp:
        path = _copy_trace(base_traces[which], tmp)
        parts = sorted((path / kind).glob("*.parquet"))
        part = rng.choice(parts)
        for op in ops:
            buf = bytearray(part.read_bytes())
            if op == "flip" and buf:
                for _ in range(rng.randint(1, 8)):
                    buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            elif op == "flip_footer" and len(buf) > 8:
                for _ in range(rng.randint(1, 4)):
                    buf[rng.randrange(max(len(buf) - 300, 0), len(buf) - 8)] = rng.randrange(256)
            elif op == "overwrite" and buf:
                start = rng.randrange(len(buf))
                stop = min(len(buf), start + rng.randint(1, 64))
                buf[start:stop] = rng.randbytes(stop - start)
            elif op == "truncate":
                del buf[rng.randint(0, len(buf)) :]
            elif op == "random":
                buf = bytearray(rng.randbytes(rng.randint(0, 2000)))
            elif op == "empty":
                buf = bytearray()
            elif op == "append":
                buf += rng.randbytes(rng.randint(1, 100))
            elif op == "other":
                pq.write_table(_other_parquet(kind, rng), part)
                continue
            elif op == "swap":
                other = "updates" if kind == "lookups" else "lookups"
                buf = bytearray((path / other / part.name).read_bytes())
            part.write_bytes(bytes(buf))
        read_everything(path)


def test_parquet_corruption_is_a_trace_error(base_traces: list[Path]) -> None:
    """Regression: wrong column types and nulls read as garbage (or ValueError) before."""
    rng = random.Random(0)
    for kind in ("lookups", "updates"):
        for _ in range(5):
            with scratch() as tmp:
                path = _copy_trace(base_traces[0], tmp)
                table = _other_parquet(kind, rng)
                if table.num_rows == 0 and "x" not in table.column_names:
                    continue
                pq.write_table(table, path / kind / "part-00000.parquet")
                trace = open_trace(path)
                with pytest.raises(TraceError, match=r"part-00000\.parquet"):
                    list(trace.iter_lookups() if kind == "lookups" else trace.iter_updates())


def test_nulls_in_a_part_are_a_trace_error(base_traces: list[Path]) -> None:
    """The right column types, but nullable and holding nulls (no trace writer does it)."""
    with scratch() as tmp:
        path = _copy_trace(base_traces[0], tmp)
        part = path / "lookups" / "part-00000.parquet"
        table = pq.read_table(part)
        nulls = pa.table(
            {
                "batch": table["batch"],
                "table": table["table"],
                "row": pa.array([None, *table["row"].to_pylist()[1:]], pa.uint32()),
            }
        )
        pq.write_table(nulls, part)
        with pytest.raises(TraceError, match="null values"):
            open_trace(path).lookups()


CHILD = """
import sys
from replay.errors import TraceError
from replay.analysis.stats import inspect_trace
from replay.trace import open_trace
trace = open_trace(sys.argv[1])
for read in (lambda: trace.lookups(1, 3), trace.lookups, lambda: inspect_trace(trace)):
    try:
        read()
        print("read")
    except TraceError as exc:
        print("TraceError", exc)
"""


def test_damaged_column_type_in_the_footer(base_traces: list[Path]) -> None:
    """Regression: pyarrow (26) aborts the process (an uncaught C++ ParquetException,
    "ColumnMetaData type does not match ColumnDescriptor physical type") when the column
    chunk metadata of such a footer is touched, as the reader did for the row groups'
    batch statistics. Reading the row group itself fails cleanly. In a child process, so
    that an abort fails this test instead of ending the test run."""
    with scratch() as tmp:
        path = _copy_trace(base_traces[0], tmp)
        part = path / "lookups" / "part-00000.parquet"
        data = bytearray(part.read_bytes())
        footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        at = data.index(b"\x1c\x15\x02", footer)  # ColumnChunk.meta_data.type: INT32
        data[at + 2] = 0x68  # physical type 52, which does not exist
        part.write_bytes(bytes(data))
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        assert len(lines) == 3 and all(line.startswith("TraceError") for line in lines), lines


def test_batch_ranges_across_row_groups_and_files(base_traces: list[Path]) -> None:
    """Every batch range of a trace of several files and row groups reads exactly."""
    trace = open_trace(base_traces[1])
    everything = trace.lookups()
    updates = trace.updates()
    n = trace.num_batches
    for start in range(n + 1):
        for stop in range(start, n + 2):
            chunk = trace.lookups(start, stop)
            mask = (everything.batch >= start) & (everything.batch < stop)
            assert np.array_equal(chunk.batch, everything.batch[mask])
            assert np.array_equal(chunk.row, everything.row[mask])
            up = trace.updates(start, stop)
            umask = (updates.batch >= start) & (updates.batch < stop)
            assert np.array_equal(up.row, updates.row[umask])
            assert np.array_equal(up.count, updates.count[umask])


@pytest.mark.parametrize(
    "field, value",
    [
        ("batches", "9" * 5000),
        ("batches", str(2**64)),
        ("tables", '[{"name": "a", "rows": 18446744073709551616}]'),
    ],
    ids=["5000-digits", "2^64-batches", "2^64-rows"],
)
def test_manifest_numbers_beyond_int64(base_traces: list[Path], field: str, value: str) -> None:
    """Regression: a 5000-digit number was a ValueError, rows >= 2^63 an OverflowError."""
    with scratch() as tmp:
        path = _copy_trace(base_traces[0], tmp)
        manifest = json.loads((path / "manifest.json").read_text())
        manifest[field] = "@@"
        (path / "manifest.json").write_text(json.dumps(manifest).replace('"@@"', value))
        with pytest.raises(TraceError, match=r"manifest\.json"):
            open_trace(path)


# -- manifest paths through symlinks --------------------------------------------------------


def test_symlinked_part_outside_the_trace_is_refused(base_traces: list[Path]) -> None:
    with scratch() as tmp:
        path = tmp / "t"
        shutil.copytree(base_traces[0], path)
        part = path / "lookups" / "part-00000.parquet"
        outside = tmp / "elsewhere.parquet"
        part.rename(outside)
        os.symlink(outside, part)
        with pytest.raises(TraceError, match="leaves the trace folder"):
            open_trace(path)
        with pytest.raises(TraceError, match="leaves the trace folder"):
            safe_member(path, "lookups/part-00000.parquet")


def test_symlinked_folder_outside_the_trace_is_refused(base_traces: list[Path]) -> None:
    with scratch() as tmp:
        path = tmp / "t"
        shutil.copytree(base_traces[0], path)
        (path / "lookups").rename(tmp / "lookups-elsewhere")
        os.symlink(tmp / "lookups-elsewhere", path / "lookups")
        with pytest.raises(TraceError, match="leaves the trace folder"):
            open_trace(path)


def test_symlinks_inside_the_trace_are_fine(base_traces: list[Path]) -> None:
    with scratch() as tmp:
        real = tmp / "real"
        shutil.copytree(base_traces[0], real)
        part = real / "lookups" / "part-00000.parquet"
        (real / "store").mkdir()
        part.rename(real / "store" / part.name)
        os.symlink(Path("..") / "store" / part.name, part)  # relative, inside the trace
        os.symlink(real, tmp / "link")  # the trace folder itself through a symlink
        for path in (real, tmp / "link"):
            trace = open_trace(path)
            trace.verify()
            assert len(trace.lookups()) == trace.num_lookups


def test_symlink_loop_is_a_trace_error(base_traces: list[Path]) -> None:
    with scratch() as tmp:
        path = tmp / "t"
        shutil.copytree(base_traces[0], path)
        part = path / "lookups" / "part-00000.parquet"
        part.unlink()
        os.symlink(part, part)
        with pytest.raises(TraceError):
            open_trace(path)
