"""`replay plan`'s training length in the user's terms: `--duration`, `--samples` or
`--epochs` instead of `--batches` (one of them), recorded in plan.json's `horizon.given`;
and the workload spec's optional `dataset_samples`, which leaves a spec without it as it
was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.cli import main
from replay.cli.plan import _training_length
from replay.errors import ConfigError
from replay.workload.presets import DATASET_SAMPLES, PRESETS, get_preset
from replay.workload.spec import load_spec, spec_from_dict, spec_to_toml

_PLAN = ["plan", "--system", "hbm-lru", "--cache-budget", "1MiB", "--cluster-mtbf", "6h"]


def _length(workload: str | None = "tiny", **options: object) -> tuple[object, object]:
    given: dict[str, object] = {
        "batches": None, "duration": None, "samples": None, "epochs": None,
        "dataset_samples": None, "step_s": None, "batch_size": None,
    }  # fmt: skip
    given.update(options)
    return _training_length(None, workload, **given)  # type: ignore[arg-type]


def test_each_length_gives_its_batches() -> None:
    assert _length() == (None, None)
    assert _length(batches=7) == (7, {"batches": 7})
    # tiny: 64 samples a batch; a partial batch is a batch
    assert _length(samples=640) == (10, {"samples": 640})
    assert _length(samples=641) == (11, {"samples": 641})
    assert _length(samples=641, batch_size=641) == (1, {"samples": 641})
    # 5 days at 50 ms: exactly 8,640,000 batches, not one more for a float's rounding
    assert _length(duration="5d", step_s=0.05) == (8_640_000, {"duration_s": 432_000.0})
    assert _length(duration="30min", step_s=0.7) == (2572, {"duration_s": 1800.0})
    assert _length(epochs=0.5, dataset_samples=1000) == (8, {"epochs": 0.5})
    # ceil, however small the length: one batch, never "0 batches" (a float's rounding
    # of a whole number is that number, but 0 is no length)
    assert _length(epochs=1e-30, dataset_samples=1000) == (1, {"epochs": 1e-30})
    assert _length("criteo-kaggle", epochs=1e-30) == (1, {"epochs": 1e-30})
    assert _length(duration="1ms", step_s=1e9) == (1, {"duration_s": 0.001})


def test_epochs_of_the_criteo_presets() -> None:
    assert DATASET_SAMPLES == {"criteo-kaggle": 45_840_617, "criteo-terabyte": 4_373_472_329}
    # one epoch of Criteo Terabyte at 2,048 samples a batch: ceil(4,373,472,329 / 2,048)
    assert _length("criteo-terabyte", epochs=1.0) == (2_135_485, {"epochs": 1.0})
    assert _length("criteo-kaggle", epochs=2.0, batch_size=128) == (716_260, {"epochs": 2.0})
    # --dataset-samples wins over the preset's
    assert _length("criteo-kaggle", epochs=1.0, dataset_samples=1280)[0] == 10


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batches": 3, "samples": 10}, "not --batches and --samples"),
        ({"duration": "5d", "epochs": 1.0}, "not --duration and --epochs"),
        ({"duration": "5d"}, "give --time-per-batch DURATION"),
        ({"epochs": 1.0}, "give --dataset-samples N"),
        ({"dataset_samples": 10}, "--dataset-samples applies only with --epochs"),
        ({"epochs": 0.0, "dataset_samples": 10}, "--epochs: 0 must be"),
        ({"duration": "0s", "step_s": 1.0}, "must be a finite number of seconds above 0"),
        ({"samples": 10**15}, "out of range"),
    ],
)
def test_refused_in_one_line(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _length(**options)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_trace_is_fixed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--samples applies only with --workload"):
        _training_length(
            tmp_path, None, batches=None, duration=None, samples=10, epochs=None,
            dataset_samples=None, step_s=None, batch_size=None,
        )  # fmt: skip


def test_the_cli_records_the_length_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    args = [*_PLAN, "--workload", "tiny", "--time-per-batch", "50ms", "--draws", "20"]
    assert main([*args, "--duration", "1s", "-o", str(out)]) == 0
    horizon = json.loads((out / "plan.json").read_text())["horizon"]
    assert horizon["given"] == {"duration_s": 1.0} and horizon["batches"] == 20
    capsys.readouterr()
    assert main([*args, "--samples", "100", "--batches", "2", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "not --batches and --samples" in err and len(err.splitlines()) == 1


def test_dataset_samples_in_a_spec(tmp_path: Path) -> None:
    # absent: the presets' plain data, hence their manifests and digests, are unchanged
    for spec in PRESETS.values():
        assert "dataset_samples" not in spec.to_dict()
        assert "dataset_samples" not in spec_to_toml(spec)
    spec = get_preset("tiny")
    data = {**spec.to_dict(), "dataset_samples": 6400}
    given = spec_from_dict(data)
    assert given.dataset_samples == 6400 and given.to_dict() == data
    path = tmp_path / "spec.toml"
    path.write_text(spec_to_toml(given))
    assert load_spec(path) == given
    assert _length(str(path), epochs=2.0) == (200, {"epochs": 2.0})
    with pytest.raises(ConfigError, match="dataset_samples: 0 is out of range"):
        spec_from_dict({**data, "dataset_samples": 0})


def test_a_step_of_embedding_work_alone_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a system without a compute model: its steady state is the embedding part of a step,
    # so a plan in its terms would describe a run that does not exist (refused up front)
    bare = tmp_path / "bare.toml"
    bare.write_text('extends = "hbm-lru"\nname = "bare"\n\n[compute]\nflops_per_sample = 0.0\n')
    args = ["plan", "--system", str(bare), "--cache-budget", "1MiB", "--cluster-mtbf", "6h"]
    args += ["--workload", "tiny", "--batches", "20", "--draws", "20"]
    out = tmp_path / "plan"
    assert main([*args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bare has no compute model" in err and "--time-per-batch" in err
    assert len(err.splitlines()) == 1 and not out.exists()
    # the user's step time answers it; so does a system that models its dense compute
    assert main([*args, "--time-per-batch", "50ms", "-o", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["horizon"]["time_per_batch_from"] == "--time-per-batch"
    assert main([*_PLAN, "--workload", "tiny", "--batches", "20", "--draws", "20",
                 "-o", str(tmp_path / "dense")]) == 0  # fmt: skip
