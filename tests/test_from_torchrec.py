"""`replay.workload_from_torchrec` and `replay fit --torchrec-configs`: a spec with the
model's own tables, rows, dimension and features (features sharing a table), the skew
from a preset or a fitted trace; read from the real TorchRec's modules (torchrec 1.8.0)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import replay
from replay.cli import main
from replay.errors import ConfigError
from replay.workload.from_torchrec import spec_from_torchrec
from replay.workload.presets import get_preset
from replay.workload.spec import load_spec, spec_from_dict, spec_to_toml

with warnings.catch_warnings():  # fbgemm-gpu's imports warn about its own module names
    warnings.simplefilter("ignore")
    import torchrec
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig

TABLES = [
    EmbeddingBagConfig(name="C1", num_embeddings=1460, embedding_dim=16, feature_names=["c1"]),
    EmbeddingBagConfig(
        name="t_item", num_embeddings=50_000, embedding_dim=16, feature_names=["item", "history"]
    ),
    EmbeddingBagConfig(
        name="t_user", num_embeddings=200_000, embedding_dim=16, feature_names=["user"]
    ),
]


def test_an_ebc_gives_its_tables_and_features() -> None:
    ebc = torchrec.EmbeddingBagCollection(tables=TABLES, device="meta")
    spec = replay.workload_from_torchrec(
        ebc, batch_size=512, pooling={"history": 20}, skew="criteo-terabyte"
    )
    assert [(t.name, t.rows) for t in spec.tables] == [
        ("C1", 1460), ("t_item", 50_000), ("t_user", 200_000)
    ]  # fmt: skip
    item = spec.tables[1]
    assert item.features == ("item", "history") and item.feature_pooling == (1, 20)
    assert item.pooling == 21 and spec.lookups_per_batch == 512 * 23
    assert spec.batch_size == 512 and spec.embedding_dim == 16
    # C1 takes criteo-terabyte's own C1 (its hot value), the others its typical table
    c1 = get_preset("criteo-terabyte").tables[0]
    assert spec.tables[0].hot_shares == c1.hot_shares and spec.tables[0].alpha == c1.alpha
    assert spec.tables[2].hot_shares == ()
    # the TOML round trip keeps the features, and a plan reads it
    assert load_spec_text(spec_to_toml(spec)) == spec


def load_spec_text(text: str):
    import tomllib

    return spec_from_dict(tomllib.loads(text))


def test_an_embedding_collection_and_plain_dicts() -> None:
    ec = torchrec.EmbeddingCollection(
        tables=[
            EmbeddingConfig(
                name="seq", num_embeddings=1000, embedding_dim=32, feature_names=["a", "b"]
            )
        ],
        device="meta",
    )
    spec = replay.workload_from_torchrec(ec, batch_size=64, pooling=2.5, skew="tiny")
    assert spec.tables[0].pooling == 5 and spec.tables[0].feature_pooling == (3, 2)
    dicts = [
        {
            "name": "x",
            "num_embeddings": 10,
            "embedding_dim": 4,
            "feature_names": ["f"],
            "pooling_factors": [3],
        },
        {"name": "y", "num_embeddings": 20, "embedding_dim": 12, "feature_names": ["g"]},
    ]
    spec, notes = spec_from_torchrec(dicts, batch_size=8, skew="tiny")
    assert [t.pooling for t in spec.tables] == [3, 1]
    assert spec.embedding_dim == 9  # rows-weighted: (10 x 4 + 20 x 12) / 30, noted
    assert any("rows-weighted" in n for n in notes)


@pytest.mark.parametrize(
    ("configs", "pooling", "message"),
    [
        ([{"name": "x", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"]}],
         {"g": 2}, "feature 'g' names no table"),
        ([{"name": "x", "num_embeddings": 10, "embedding_dim": 4, "feature_names": []}],
         None, "needs at least one feature"),
        ([{"name": "x", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"]},
          {"name": "y", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"]}],
         None, "feature 'f' is in 'x' and table 'y'"),
        ([{"num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"]}],
         None, "needs a table name"),
        ([{"name": "x", "num_embeddings": 0, "embedding_dim": 4, "feature_names": ["f"]}],
         None, "num_embeddings"),
    ],
)  # fmt: skip
def test_bad_configs_are_one_line(configs: list, pooling: dict | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        replay.workload_from_torchrec(configs, batch_size=8, pooling=pooling, skew="tiny")


def test_the_cli_reads_a_json_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "model.json"
    configs.write_text(json.dumps({
        "tables": [{"name": t.name, "num_embeddings": t.num_embeddings,
                    "embedding_dim": t.embedding_dim, "feature_names": t.feature_names}
                   for t in TABLES],
        "pooling": {"history": 20},
    }))  # fmt: skip
    out = tmp_path / "model.toml"
    argv = ["fit", "--torchrec-configs", str(configs), "--batch-size", "256", "--skew",
            "criteo-kaggle", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    spec = load_spec(out)
    assert spec.tables[1].features == ("item", "history") and spec.tables[1].pooling == 21
    assert out.read_text().startswith("# TorchRec configs (3 tables)")
    # a feature naming no table: one line, exit 2, nothing written
    capsys.readouterr()
    configs.write_text(json.dumps({"tables": json.loads(configs.read_text())["tables"],
                                   "pooling": {"clicks": 2}}))  # fmt: skip
    again = tmp_path / "again.toml"
    assert main([*argv[:-1], str(again)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replay: error: ") and len(err.splitlines()) == 1
    assert "feature 'clicks' names no table" in err and not again.exists()


def test_the_skew_from_a_recorded_trace(tmp_path: Path) -> None:
    """A trace whose tables carry the model's names lends each table its own fit, and
    `replay plan --workload` takes the spec."""
    trace = tmp_path / "trace"
    assert main(["generate", "--preset", "tiny", "--batches", "12", "--batch-size", "32",
                 "--workers", "1", "--out", str(trace)]) == 0  # fmt: skip
    from replay.trace.reader import open_trace
    from replay.workload.fit import fit_trace

    fitted = fit_trace(open_trace(trace))
    configs = [
        {
            "name": t.name,
            "num_embeddings": t.rows,
            "embedding_dim": 8,
            "feature_names": [f"{t.name}_id"],
        }
        for t in get_preset("tiny").tables
    ]
    spec = replay.workload_from_torchrec(configs, batch_size=32, skew=fitted)
    for table, fit in zip(spec.tables, fitted.spec.tables, strict=True):
        assert (table.alpha, table.reuse, table.pooling) == (fit.alpha, fit.reuse, fit.pooling)
    # the command line's route: TRACE and --torchrec-configs (the trace's batch size)
    listed = tmp_path / "model.json"
    listed.write_text(json.dumps(configs))
    path = tmp_path / "model.toml"
    assert main(["fit", str(trace), "--torchrec-configs", str(listed), "--out", str(path)]) == 0
    from_cli = load_spec(path)
    assert [t.alpha for t in from_cli.tables] == [t.alpha for t in spec.tables]
    assert from_cli.batch_size == 32 and from_cli.tables[0].features == ("user_id",)
    out = tmp_path / "plan"
    assert main(["plan", "--workload", str(path), "--batches", "4", "--system", "hbm-lru",
                 "--cache-budget", "64KiB", "--cluster-mtbf", "6h", "--time-per-batch", "1s",
                 "--out", str(out)]) == 0  # fmt: skip
    assert (out / "plan.json").exists() or any(out.iterdir())
