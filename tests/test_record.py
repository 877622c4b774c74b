"""`replay.record` and `replay record merge`: a model fed exactly the ids of a generated
trace records that trace's lookups and update sets, batch by batch (plain PyTorch
`EmbeddingBag`s, a TorchRec `EmbeddingBagCollection` with a shared table, a 2-process
`DistributedModelParallel` merged); accumulation and irregular steps against the slow
reference; interrupts leave a valid shorter trace or nothing; bad input is one line.
Full size (Criteo Kaggle's 26 tables, batch 2,048, 200 batches) and the overhead and
memory at batch 65,536 are under `bench`."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _dmp_harness import launch_ranks

import replay
from replay.cli import main
from replay.errors import InputError, OutputError, ReplayError
from replay.trace import record_writer
from replay.trace.reader import Trace, open_trace
from replay.trace.updates import update_sets_reference

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_record_worker.py"


def _generated(tmp: Path, preset: str = "tiny", batches: int = 6, seed: int = 3) -> Trace:
    return open_trace(replay.generate(preset, tmp / "generated", batches=batches, seed=seed))


def _batch_ids(trace: Trace, b: int) -> list[np.ndarray]:
    """Batch b's ids per table, in trace order (int64, as a model takes them)."""
    chunk = trace.lookups(b, b + 1)
    return [chunk.row[chunk.table == t].astype(np.int64) for t in range(len(trace.table_rows))]


def _offsets(n: int, bags: int) -> np.ndarray:
    return (np.arange(bags) * n) // bags


def _assert_same(recorded: Trace, generated: Trace, batches: int | None = None) -> None:
    """Lookups and update sets equal, batch by batch (all of them, in order)."""
    stop = generated.num_batches if batches is None else batches
    assert recorded.num_batches == stop
    for kind, names in (("lookups", ("batch", "table", "row")), ("updates", None)):
        a = getattr(recorded, kind)()
        b = getattr(generated, kind)(0, stop)
        for name in names or ("batch", "table", "row", "count"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (kind, name)


class Plain(torch.nn.Module):
    """A DLRM-style model: one EmbeddingBag per table, a dense layer on top."""

    def __init__(self, rows: list[int], dim: int = 4, sparse: bool = False) -> None:
        super().__init__()
        self.embs = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(r, dim, mode="sum", sparse=sparse) for r in rows
        )
        self.top = torch.nn.Linear(dim * len(rows), 1)

    def forward(self, ids: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        pooled = [e(x, o) for e, (x, o) in zip(self.embs, ids, strict=True)]
        return self.top(torch.cat(pooled, dim=1))


def _feed_plain(model: Plain, opt: Any, generated: Trace, batches: int) -> None:
    size = int(generated.manifest["batch_size"])
    for b in range(batches):
        ids = [
            (torch.from_numpy(a), torch.from_numpy(_offsets(len(a), size)))
            for a in _batch_ids(generated, b)
        ]
        out = model(ids).sum()
        if opt is not None:
            out.backward()
            opt.step()
            opt.zero_grad()


def test_a_plain_pytorch_model_records_the_generated_trace(tmp_path: Path) -> None:
    generated = _generated(tmp_path)
    model = Plain([int(r) for r in generated.table_rows])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with replay.record(model, out=tmp_path / "rec", optimizer=opt) as rec:
        _feed_plain(model, opt, generated, generated.num_batches)
        with torch.no_grad():  # evaluation is not training: not recorded
            _feed_plain(model, None, generated, 1)
    assert rec.path == tmp_path / "rec"
    recorded = open_trace(rec.path)
    recorded.verify()
    _assert_same(recorded, generated)
    manifest = recorded.manifest
    assert [(t["name"], t["rows"], t["dim"]) for t in manifest["tables"]] == [
        (f"embs.{i}", int(r), 4) for i, r in enumerate(generated.table_rows)
    ]
    assert manifest["batch_size"] == generated.manifest["batch_size"]
    assert manifest["workload"]["update"] == {"rule": "sgd", "accumulate_batches": 1}
    assert recorded.updates_are_lookups
    # the commands read it (docs/own_model.md's examples fit and plan a recorded trace)
    assert main(["inspect", str(rec.path), "--json"]) == 0
    assert main(["run", str(rec.path), "--system", "hbm-lru", "--out", str(tmp_path / "r")]) == 0


def test_a_torchrec_collection_with_a_shared_table_records_the_generated_trace(
    tmp_path: Path,
) -> None:
    """Table `item` is read by two features (the KJT lists them in the other order);
    the collection is weighted. Each feature gets half of the table's ids."""
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

    generated = _generated(tmp_path)
    names = generated.table_names
    features = {n: [f"{n}_a", f"{n}_b"] if n == "item" else [n] for n in names}
    configs = [
        EmbeddingBagConfig(
            name=n, embedding_dim=4, num_embeddings=int(r), feature_names=features[n]
        )
        for n, r in zip(names, generated.table_rows, strict=True)
    ]
    ebc = EmbeddingBagCollection(tables=configs, is_weighted=True)
    opt = torch.optim.SGD(ebc.parameters(), lr=0.01)
    size = int(generated.manifest["batch_size"])
    with replay.record(ebc, out=tmp_path / "rec", optimizer=opt) as rec:
        for b in range(generated.num_batches):
            keys, values, lengths = [], [], []
            for n, ids in zip(names, _batch_ids(generated, b), strict=True):
                parts = np.array_split(ids, len(features[n]))
                for feature, part in zip(features[n], parts, strict=True):
                    keys.append(feature)
                    values.append(part)
                    lengths.append(np.diff([*_offsets(len(part), size).tolist(), len(part)]))
            order = list(range(len(keys)))[::-1]
            cat = np.concatenate([values[i] for i in order])
            kjt = KeyedJaggedTensor.from_lengths_sync(
                keys=[keys[i] for i in order],
                values=torch.from_numpy(cat),
                lengths=torch.from_numpy(np.concatenate([lengths[i] for i in order])).int(),
                weights=torch.ones(len(cat)),
            )
            ebc(kjt).values().sum().backward()
            opt.step()
            opt.zero_grad()
    recorded = open_trace(rec.path)
    _assert_same(recorded, generated)
    assert [t["name"] for t in recorded.manifest["tables"]] == names


def test_embeddings_and_an_embedding_collection_and_an_exception_out_of_the_block(
    tmp_path: Path,
) -> None:
    """`nn.Embedding` (2-D input, a module called twice: one table) beside TorchRec's
    `EmbeddingCollection`; an exception of the training ends the block with the batches
    completed kept, the batch it interrupted not."""
    from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 4)
            self.ec = EmbeddingCollection(
                tables=[EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=30,
                                        feature_names=["f"])]
            )  # fmt: skip

        def forward(self, a: torch.Tensor, b: torch.Tensor, kjt: Any) -> torch.Tensor:
            out = self.emb(a).sum() + self.emb(b).sum()
            return out + self.ec(kjt)["f"].values().sum()

    model = Model()
    rng = np.random.default_rng(0)
    fed = []
    with pytest.raises(ZeroDivisionError), replay.record(model, out=tmp_path / "rec") as rec:
        for b in range(4):
            a, bb = rng.integers(0, 50, (3, 2)), rng.integers(0, 50, 5)
            f = rng.integers(0, 30, 7)
            kjt = KeyedJaggedTensor.from_lengths_sync(
                keys=["f"], values=torch.from_numpy(f), lengths=torch.tensor([3, 4])
            )
            if b == 3:
                model.emb.register_forward_hook(lambda *_: 1 / 0)
            model(torch.from_numpy(a), torch.from_numpy(bb), kjt).backward()
            rec.step()
            fed.append((np.concatenate([a.ravel(), bb]), f))
    recorded = open_trace(tmp_path / "rec")
    assert [(t["name"], t["rows"]) for t in recorded.manifest["tables"]] == [("emb", 50), ("t", 30)]
    assert recorded.num_batches == 3 and recorded.manifest["batch_size"] == 5
    look = recorded.lookups()
    for b, (emb_ids, ec_ids) in enumerate(fed):
        at = look.batch == b
        assert np.array_equal(look.row[at & (look.table == 0)], emb_ids)
        assert np.array_equal(look.row[at & (look.table == 1)], ec_ids)
    assert recorded.updates_are_lookups


def _rank_trace(out: Path, generated: Trace, rank: int, world: int, steps: set[int]) -> None:
    """What rank `rank` of `world` records when fed its slice of each generated batch
    (per table, the rank-th of `world` consecutive slices), as `replay.record` writes it."""
    tables = [
        record_writer.RecordedTable(n, int(r), 8)
        for n, r in zip(generated.table_names, generated.table_rows, strict=True)
    ]
    source = {"kind": "record", "rank": rank, "world_size": world}
    writer = record_writer.RecordWriter(out, tables, created_by="record", source=source)
    size = int(generated.manifest["batch_size"])
    for b in range(generated.num_batches):
        parts = []
        for t, ids in enumerate(_batch_ids(generated, b)):
            parts.append((t, np.array_split(ids, world)[rank]))
        writer.add_batch(parts, size // world)
        if b in steps:
            writer.step()
    writer.close()


def test_merge_joins_the_ranks_slices_into_the_generated_batches(tmp_path: Path) -> None:
    generated = _generated(tmp_path, batches=5)
    for r in range(3):
        _rank_trace(tmp_path / f"rank{r}", generated, r, 3, set(range(5)))
    out = tmp_path / "merged"
    dirs = [str(tmp_path / f"rank{r}") for r in (2, 0, 1)]  # any order
    assert main(["record", "merge", *dirs, "--out", str(out)]) == 0
    merged = open_trace(out)
    merged.verify()
    _assert_same(merged, generated)
    assert merged.manifest["batch_size"] == 3 * (int(generated.manifest["batch_size"]) // 3)
    assert [t["dim"] for t in merged.manifest["tables"]] == [8] * 4
    # bad folders: exit 2, one line, nothing written
    _rank_trace(tmp_path / "other", generated, 1, 3, {0, 2})  # other steps
    for bad in (
        dirs[:2],  # a rank missing
        [*dirs, dirs[0]],  # a rank twice
        [dirs[1], dirs[2], str(tmp_path / "other")],  # steps differ
        [*dirs[:2], str(tmp_path / "generated")],  # not recorded
        [*dirs[:2], str(tmp_path / "nothing")],  # no trace
    ):
        assert main(["record", "merge", *bad, "--out", str(tmp_path / "bad")]) == 2
        assert not (tmp_path / "bad").exists() and not (tmp_path / ".bad.partial").exists()
    assert main(["record", "merge", *dirs, "--out", dirs[0]]) == 2  # over an input


@pytest.mark.bench
def test_a_two_process_distributed_model_parallel_merges_into_the_generated_trace(
    tmp_path: Path,
) -> None:
    generated = _generated(tmp_path, batches=4)
    names = generated.table_names
    tables = [
        {"name": n, "rows": int(r), "dim": 4,
         "features": [f"{n}_a", f"{n}_b"] if n == "item" else [n]}
        for n, r in zip(names, generated.table_rows, strict=True)
    ]  # fmt: skip
    job = {"world": 2, "tables": tables, "batches": 4,
           "batch_size": int(generated.manifest["batch_size"])}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    np.savez(
        tmp_path / "batches.npz",
        **{f"b{b}_t{t}": a for b in range(4) for t, a in enumerate(_batch_ids(generated, b))},
    )
    codes, _, logs = launch_ranks(WORKER, tmp_path, 2, 2, timeout_s=300)
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    ranks = [open_trace(tmp_path / f"rank{r}") for r in range(2)]
    assert [t.manifest["source"]["rank"] for t in ranks] == [0, 1]
    assert ranks[0].manifest["batch_size"] == job["batch_size"] // 2
    out = tmp_path / "merged"
    assert main(["record", "merge", str(tmp_path / "rank1"), str(tmp_path / "rank0"),
                 "--out", str(out)]) == 0  # fmt: skip
    merged = open_trace(out)
    _assert_same(merged, generated)
    assert merged.manifest["batch_size"] == job["batch_size"]
    assert main(["inspect", str(out), "--json"]) == 0


def _record_steps(tmp: Path, generated: Trace, steps_after: set[int], frozen: int | None) -> Trace:
    model = Plain([int(r) for r in generated.table_rows])
    if frozen is not None:
        model.embs[frozen].weight.requires_grad_(False)
    with replay.record(model, out=tmp) as rec:
        size = int(generated.manifest["batch_size"])
        for b in range(generated.num_batches):
            ids = [
                (torch.from_numpy(a), torch.from_numpy(_offsets(len(a), size)))
                for a in _batch_ids(generated, b)
            ]
            model(ids).sum().backward()
            if b in steps_after:
                rec.step()
                rec.step()  # a second step with no batch between updates nothing
    return open_trace(tmp)


def _reference_updates(
    lookups: Any, rows: np.ndarray, steps: list[int], frozen: np.ndarray
) -> list[tuple[int, int, int, int]]:
    """Each step's window [previous step + 1, step] as one accumulation window."""
    out = []
    first = 0
    for step in steps:
        keep = (lookups.batch >= first) & (lookups.batch <= step)
        n = step - first + 1
        b = (lookups.batch[keep] - first).astype(np.uint32)
        _, ut, ur, uc = update_sets_reference(
            b, lookups.table[keep], lookups.row[keep], 0, n, rows, frozen, n
        )
        out += [(step, int(t), int(r), int(c)) for t, r, c in zip(ut, ur, uc, strict=True)]
        first = step + 1
    return out


@pytest.mark.parametrize("compact", [False, True])
def test_steps_every_few_batches_update_the_union_of_their_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compact: bool
) -> None:
    """Steps after batches 1, 2 and 5 of 7 (no step after the last): each lands on its
    batch with the distinct rows of the batches since the previous one; a frozen table
    has none. `compact`: the window folded into distinct rows as it grows (the path a
    long window takes) gives the same bytes."""
    if compact:
        monkeypatch.setattr(record_writer, "COMPACT_LOOKUPS", 100)
    generated = _generated(tmp_path, batches=7)
    recorded = _record_steps(tmp_path / "rec", generated, {1, 2, 5}, frozen=2)
    look = recorded.lookups()
    frozen = np.zeros(len(recorded.table_rows), dtype=bool)
    frozen[2] = True
    upd = recorded.updates()
    got = list(zip(*(a.tolist() for a in (upd.batch, upd.table, upd.row, upd.count)), strict=True))
    assert got == _reference_updates(look, recorded.table_rows, [1, 2, 5], frozen)
    assert recorded.manifest["source"]["steps"] == [[1, 2, 1], [5, 5, 1]]
    assert recorded.manifest["workload"]["update"] == {"rule": "recorded"}
    assert not recorded.updates_are_lookups
    assert main(["inspect", str(recorded.path), "--json"]) == 0


def test_regular_accumulation_is_declared_as_such(tmp_path: Path) -> None:
    generated = _generated(tmp_path, batches=7)
    recorded = _record_steps(tmp_path / "rec", generated, {1, 3, 5}, frozen=None)
    assert recorded.manifest["workload"]["update"] == {"rule": "sgd", "accumulate_batches": 2}
    upd = recorded.updates()
    ref = update_sets_reference(
        *(getattr(recorded.lookups(), k) for k in ("batch", "table", "row")),
        0, 7, recorded.table_rows, np.zeros(4, dtype=bool), 2,
    )  # fmt: skip
    for a, b in zip((upd.batch, upd.table, upd.row, upd.count), ref, strict=True):
        assert np.array_equal(a, b)


def test_step_runs_round_trip() -> None:
    for steps in ([], [0], [3, 4, 5, 9], [1, 3, 5, 6, 8, 10, 20]):
        runs = record_writer.step_runs(steps)
        assert record_writer.steps_from_runs(runs, "x") == steps


# -- bad input ---------------------------------------------------------------------------


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

    with pytest.raises(InputError, match="no embedding modules"):
        replay.record(torch.nn.Linear(3, 1), out=tmp_path / "a")
    # a folder holding other files
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.md").write_text("mine")
    model = Plain([10, 10])
    with pytest.raises(OutputError, match="not empty"), replay.record(model, out=tmp_path / "b"):
        pass
    with (
        pytest.raises(OutputError, match="holds other files"),
        replay.record(model, out=tmp_path / "b", force=True),
    ):
        pass
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["notes.md"]
    # a KJT feature with no table
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                   feature_names=["f"])]
    )  # fmt: skip
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["f", "g"], values=torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 1, 1, 0])
    )
    with (
        pytest.raises(InputError, match="feature 'g' has no table"),
        replay.record(ebc, out=tmp_path / "c"),
    ):
        ebc(kjt).values().sum().backward()
    # an id beyond its table (the model's own check comes later: EmbeddingBag's)
    with (
        pytest.raises((InputError, IndexError, RuntimeError)),
        replay.record(model, out=tmp_path / "d") as rec,
    ):
        model([(torch.tensor([1, 12]), torch.tensor([0])),
               (torch.tensor([1]), torch.tensor([0]))]).sum().backward()  # fmt: skip
        rec.step()
    # no batch at all
    with (
        pytest.raises(InputError, match="no batch was recorded"),
        replay.record(model, out=tmp_path / "e"),
    ):
        pass
    for name in "acde":
        assert not (tmp_path / name).exists()
        assert not (tmp_path / f".{name}.partial").exists()


def test_the_writer_refuses_ids_beyond_a_table(tmp_path: Path) -> None:
    tables = [record_writer.RecordedTable("t", 10, 4)]
    writer = record_writer.RecordWriter(
        tmp_path / "w", tables, created_by="record", source={"kind": "record"}
    )
    writer.add_batch([(0, np.array([1, 10]))], 1)
    with pytest.raises(InputError, match="row 10, outside its 10 rows"):
        writer.close()
    assert not (tmp_path / "w").exists() and not (tmp_path / ".w.partial").exists()
    writer = record_writer.RecordWriter(
        tmp_path / "w", tables, created_by="record", source={"kind": "record"}
    )
    writer.add_batch([(0, np.array([1, -1]))], 1)
    with pytest.raises(InputError, match="row -1, a negative id"):
        writer.close()
    assert isinstance(InputError("x"), ReplayError)


# -- interrupts --------------------------------------------------------------------------


def _plain_child(tmp: Path, generated: Trace, sleep_s: float) -> subprocess.Popen[str]:
    job = {"rows": [int(r) for r in generated.table_rows], "batches": generated.num_batches,
           "batch_size": int(generated.manifest["batch_size"]), "sleep_s": sleep_s}  # fmt: skip
    (tmp / "job.json").write_text(json.dumps(job))
    np.savez(
        tmp / "batches.npz",
        **{
            f"b{b}_t{t}": a
            for b in range(generated.num_batches)
            for t, a in enumerate(_batch_ids(generated, b))
        },
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, str(WORKER), "plain", str(tmp)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _stop_after(child: subprocess.Popen[str], batches: int, sig: int) -> int:
    """Signal the child once it printed `batches` batches; the batches it printed."""
    assert child.stdout is not None
    done = 0
    while done < batches:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else ""
        done += 1
    child.send_signal(sig)
    rest = child.communicate(timeout=60)[0]
    return done + rest.count("batch ")


def _interrupted(tmp: Path, generated: Trace, stop_at: int) -> None:
    done = _stop_after(_plain_child(tmp, generated, 0.05), stop_at, signal.SIGINT)
    recorded = open_trace(tmp / "trace")
    recorded.verify()
    # the batches completed: those printed, or one more (stopped between its forward
    # and its print)
    assert done <= recorded.num_batches <= done + 1
    _assert_same(recorded, generated, recorded.num_batches)
    assert not (tmp / ".trace.partial").exists()


def test_sigint_leaves_a_valid_shorter_trace(tmp_path: Path) -> None:
    generated = _generated(tmp_path, batches=40)
    _interrupted(tmp_path, generated, random.Random(5).randint(2, 20))


def test_sigkill_leaves_nothing_a_command_takes_for_a_trace(tmp_path: Path) -> None:
    generated = _generated(tmp_path, batches=40)
    _stop_after(_plain_child(tmp_path, generated, 0.05), 5, signal.SIGKILL)
    assert not (tmp_path / "trace").exists()
    for left in [tmp_path / "trace", *tmp_path.glob(".trace*")]:
        assert main(["inspect", str(left), "--json"]) == 2


@pytest.mark.bench
def test_sigint_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(11)
    generated = _generated(tmp_path, batches=60)
    for trial in range(6):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        _interrupted(folder, generated, rng.randint(1, 50))


# -- full size (bench) ---------------------------------------------------------------------


@pytest.mark.bench
def test_criteo_kaggle_200_batches_record_the_generated_trace(tmp_path: Path) -> None:
    """26 EmbeddingBag tables of Criteo Kaggle's sizes, batch 2,048, 200 batches of the
    criteo-kaggle preset (seed 7), sparse gradients (SGD)."""
    generated = open_trace(
        replay.generate("criteo-kaggle", tmp_path / "generated", batches=200, seed=7)
    )
    model = Plain([int(r) for r in generated.table_rows], dim=4, sparse=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with replay.record(model, out=tmp_path / "rec", optimizer=opt) as rec:
        _feed_plain(model, opt, generated, 200)
    _assert_same(open_trace(rec.path), generated)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.bench
def test_overhead_and_memory_at_batch_65536(tmp_path: Path) -> None:
    """The training step of the Criteo Kaggle model at batch 65,536 (sparse SGD), with and
    without recording, alternated; recording adds at most 15% to the median step, and the
    process's resident memory while recording exceeds its peak while training without
    recording by at most 256 MiB."""
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-kaggle")
    rows = [t.rows for t in spec.tables]
    size = 65_536
    rng = np.random.default_rng(0)
    batches = [
        [rng.integers(0, r, size=size) for r in rows] for _ in range(3)
    ]  # a few inputs, reused (the id draw is no part of the step)
    model = Plain(rows, dim=4, sparse=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(b: int) -> None:
        ids = [(torch.from_numpy(a), torch.from_numpy(np.arange(size))) for a in batches[b % 3]]
        model(ids).sum().backward()
        opt.step()
        opt.zero_grad()

    for b in range(3):
        step(b)
    plain, recorded, plain_rss, recorded_rss = [], [], [], []
    for rnd in range(3):
        t0 = time.perf_counter()
        for b in range(5):
            step(b)
            plain_rss.append(_rss_mib())
        plain.append((time.perf_counter() - t0) / 5)
        with replay.record(model, out=tmp_path / f"rec{rnd}", optimizer=opt):
            t0 = time.perf_counter()
            for b in range(5):
                step(b)
                recorded_rss.append(_rss_mib())
            recorded.append((time.perf_counter() - t0) / 5)
    overhead = np.median(recorded) / np.median(plain) - 1
    extra = max(recorded_rss) - max(plain_rss)
    print(f"step {np.median(plain):.3f} s, recorded {np.median(recorded):.3f} s "
          f"(+{overhead:.1%}), memory +{extra:.0f} MiB")  # fmt: skip
    assert overhead <= 0.15
    assert extra <= 256
