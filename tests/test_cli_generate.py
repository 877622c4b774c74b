"""CLI: presets, generate, bench; bad input gives one line, exit code 2, no output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replay.cli import main


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_presets_lists_every_workload(capsys) -> None:
    code, out, _ = run(["presets"], capsys)
    assert code == 0
    for name in ("criteo-kaggle", "criteo-terabyte", "criteo-mlperf-dcnv2", "tiny"):
        assert name in out
    assert "33,762,577" in out and "214 lookups/sample" in out


def test_generate_then_inspect(tmp_path: Path, capsys) -> None:
    out = tmp_path / "t"
    code, text, err = run(["generate", "--preset", "tiny", "--batches", "20", "--out", str(out)],
                          capsys)  # fmt: skip
    assert code == 0, err
    assert "7,680 lookups" in text
    code, text, err = run(["inspect", str(out), "--json"], capsys)
    assert code == 0, err
    assert json.loads(text)["lookups"] == 7680


def test_generate_from_spec_file_with_overrides(tmp_path: Path, capsys) -> None:
    spec = Path(__file__).parents[1] / "traces" / "example.toml"
    out = tmp_path / "e"
    args = [
        "generate",
        "--spec",
        str(spec),
        "--batches",
        "3",
        "--batch-size",
        "10",
        "--alpha",
        "1.2",
        "--reuse",
        "0",
        "--drift",
        "0",
        "--seed",
        "9",
        "--out",
        str(out),
    ]
    code, _, err = run(args, capsys)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["batches"] == 3 and manifest["batch_size"] == 10
    assert {t["alpha"] for t in manifest["workload"]["tables"]} == {1.2}
    assert {t["reuse"] for t in manifest["workload"]["tables"]} == {0.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "nope"], "unknown workload preset 'nope'"),
        (["--preset", "tiny", "--batches", "0"], "batches"),
        (["--preset", "tiny", "--batches", "-3"], "batches"),
        (["--preset", "tiny", "--batch-size", "0"], "--batch-size"),
        (["--preset", "tiny", "--alpha", "nan"], "finite"),
        (["--preset", "tiny", "--alpha", "-1"], "out of range"),
        (["--preset", "tiny", "--reuse", "1.5"], "out of range"),
        (["--preset", "tiny", "--workers", "0"], "workers"),
        (["--spec", "missing.toml"], "no such spec file"),
        (["--preset", "tiny", "--spec", "x.toml"], "exactly one"),
        ([], "--preset"),
        (["--preset", "tiny", "--batches", "many"], "--batches"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path: Path, capsys, args, message) -> None:
    out = tmp_path / "o"
    code, _, err = run(["generate", *args, "--out", str(out)], capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert not out.exists() and not (tmp_path / ".o.partial").exists()


def test_existing_output_needs_force(tmp_path: Path, capsys) -> None:
    out = tmp_path / "t"
    base = ["generate", "--preset", "tiny", "--batches", "5", "--out", str(out)]
    assert run(base, capsys)[0] == 0
    before = (out / "manifest.json").read_bytes()
    code, _, err = run(base, capsys)
    assert code == 2 and "--force" in err and err.count("\n") == 1
    assert (out / "manifest.json").read_bytes() == before
    assert run([*base, "--force", "--seed", "3"], capsys)[0] == 0
    assert (out / "manifest.json").read_bytes() != before
    # --resume on a finished trace with the same inputs is a no-op
    assert run([*base, "--seed", "3", "--resume"], capsys)[0] == 0


def test_unwritable_output(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = run(["generate", "--preset", "tiny", "--out", str(blocker / "t")], capsys)
    assert code == 2 and "cannot" in err
    code, _, err = run(["generate", "--preset", "tiny", "--out", str(blocker)], capsys)
    assert code == 2 and "not a folder" in err


def test_console_script_entry_point(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "replay", "generate", "--preset", "nope", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_bench_generate_json(capsys) -> None:
    code, out, err = run(["bench", "generate", "--preset", "tiny", "--batches", "20",
                          "--batch-size", "64", "--json"], capsys)  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["lookups"] == 20 * 64 * 6
    assert result["generate_lookups_per_s"] > 0 and result["write_only_lookups_per_s"] > 0
