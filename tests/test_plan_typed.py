"""The plan assembled from typed stage results (`replay.plan.plan_document`): the document
is `PlanDocument` (plan.json's `Plan` and its torchrec part), valid against the published
schema; and each system is resolved once per plan, a resolution beyond that being a
variant of it (a cache of given rows with checkpointing off, a stateful rule's sets, the
one-GPU sets of a cluster, a cluster size), never the same spec again."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any, NotRequired, get_origin, get_type_hints

import pytest

import replay.engine.systems as engine_systems
from replay._schema_docs import validate
from replay._schema_plan import Plan, PlanDocument
from replay.cli import main
from replay.engine.systems import resolve_system
from replay.plan.plan import PlanRequest, make_plan
from replay.plan.plan_stages import prepare
from replay.plan.torchrec_shards import torchrec_document
from replay.plan.write import plan_json
from replay.workload.presets import get_preset
from replay.workload.spec import UpdateRule

CLUSTER = ("cluster.nodes=2", "cluster.gpus_per_node=2")


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Every system spec resolved while the test runs, by its origin and its data with the
    `--set`s applied: one key is one spec."""
    seen: Counter[tuple[str, str]] = Counter()
    build = engine_systems.system_from_dict

    def counted(data: Any, where: str = "system") -> Any:
        seen[(where, json.dumps(data, sort_keys=True, default=str))] += 1
        return build(data, where)

    monkeypatch.setattr(engine_systems, "system_from_dict", counted)
    return seen


def _request(systems: tuple[str, ...], rule: str = "sgd", **kw: Any) -> PlanRequest:
    spec = get_preset("tiny").with_overrides(batches=20)
    spec = dataclasses.replace(spec, update=UpdateRule(rule=rule))
    args: dict[str, Any] = {
        "source": spec, "systems": systems, "cache_budget_bytes": 1 << 20,
        "hit_targets": (0.5,), "mtbf_s": 6 * 3600, "sample_rate": 1.0, "draws": 20,
        "time_per_batch_s": 0.1,
    }  # fmt: skip
    args.update(kw)
    return PlanRequest(**args)


def _required(td: Any) -> set[str]:
    # from the hints: under `from __future__ import annotations` `__required_keys__`
    # counts a `NotRequired` key required
    hints = get_type_hints(td, include_extras=True)
    return {k for k, v in hints.items() if get_origin(v) is not NotRequired}


def _by_origin(seen: Counter[tuple[str, str]]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for (where, _), n in seen.items():
        out[where.removeprefix("preset ")] += n
    return dict(out)


def _data(seen: Counter[tuple[str, str]], origin: str) -> list[dict[str, Any]]:
    return [json.loads(d) for (where, d) in seen if where == f"preset {origin}"]


def test_a_plan_is_its_typed_document_and_resolves_each_system_once(
    resolutions: Counter[tuple[str, str]],
) -> None:
    request = _request(("hbm-lru", "hbm-tbe-lfu", "pmem-host"))
    # as `replay plan` does: every system resolved before any work, the plan takes them
    given = [resolve_system(name, list(request.sets)) for name in request.systems]
    document, _ = make_plan(request, resolved=given)
    # the typed document: plan.json's keys and its torchrec part (torchrec.json)
    assert _required(PlanDocument) == _required(Plan) | {"torchrec"}
    assert _required(PlanDocument) <= set(document) <= set(get_type_hints(PlanDocument))
    assert {"tolerance", "cluster", "claims"}.isdisjoint(document)  # one GPU: none of these
    validate("plan", plan_json(document), "plan.json")
    validate("torchrec", torchrec_document(dict(document)), "torchrec.json")
    # no spec resolved twice: each system once as given, the TBE system then once per
    # cache size its replays use (the policies' and the TBE curve's sizes, shared)
    assert max(resolutions.values()) == 1
    tbe = _data(resolutions, "hbm-tbe-lfu")
    sized = [d["policy"]["capacity_rows"] for d in tbe if "capacity_rows" in d["policy"]]
    assert len(tbe) == len(sized) + 1 and len(set(sized)) == len(sized) > 1
    assert all(d["checkpoint"]["strategy"] == "none" for d in tbe if "capacity_rows" in d["policy"])
    # hbm-lru checkpoints nothing: its steady state replays the spec as resolved; pmem-host
    # checkpoints (check-n-run): its steady state is a variant with checkpointing off
    assert _by_origin(resolutions) == {"hbm-lru": 1, "hbm-tbe-lfu": 1 + len(sized), "pmem-host": 2}
    pmem = sorted(d["checkpoint"]["strategy"] for d in _data(resolutions, "pmem-host"))
    assert pmem == ["check-n-run", "none"]


def test_the_command_resolves_each_system_once_before_any_work(
    resolutions: Counter[tuple[str, str]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main([
        "plan", "--workload", "tiny", "--batches", "20", "--system", "hbm-lru",
        "--system", "pmem-host", "--cache-budget", "1MiB", "--cluster-mtbf", "6h",
        "--time-per-batch", "100ms", "--dry-run", "--out", str(tmp_path / "plan"),
    ])  # fmt: skip
    assert code == 0 and "nothing written (--dry-run)" in capsys.readouterr().out
    # the first system (its cluster read for --nodes) is not resolved again for the plan
    assert _by_origin(resolutions) == {"hbm-lru": 1, "pmem-host": 1}


def test_a_stateful_rule_resolves_each_system_again_with_its_sets(
    resolutions: Counter[tuple[str, str]],
) -> None:
    setup = prepare(_request(("hbm-lru", "dram"), rule="rowwise-adagrad"))
    assert [x.model.optimizer for x in setup.local_systems] == ["rowwise-adagrad"] * 2
    assert setup.local_systems[0] is setup.base  # one GPU: the first system is the base
    # as given (to learn each system's optimizer), then with the rule's set: two specs each
    # (the later stages take these: the first test pins what they resolve)
    assert _by_origin(resolutions) == {"hbm-lru": 2, "dram": 2}
    assert max(resolutions.values()) == 1
    for origin in ("hbm-lru", "dram"):
        rules = {d["model"]["optimizer"] for d in _data(resolutions, origin)}
        assert rules == {"sgd", "rowwise-adagrad"}


def test_a_cluster_plan_resolves_its_system_and_the_one_gpu_variant_once(
    resolutions: Counter[tuple[str, str]],
) -> None:
    setup = prepare(_request(("hbm-lru",), sets=CLUSTER))
    assert setup.base.cluster is not None and setup.local_systems[0].cluster is None
    assert _by_origin(resolutions) == {"hbm-lru": 2}
    assert max(resolutions.values()) == 1


@pytest.mark.bench
def test_a_cluster_plan_resolves_only_variants_after_its_first_stage(
    resolutions: Counter[tuple[str, str]],
) -> None:
    make_plan(_request(("hbm-lru",), sets=CLUSTER, time_per_batch_s=None))
    # as given, the one-GPU variant, then the cluster replays' variants (a cache of each
    # GPU's rows, checkpointing off): the steady state, TorchRec's placement measured, and
    # the scaling's cluster sizes; torch-save's writer once, the checkpoints' baseline
    assert _by_origin(resolutions) == {"hbm-lru": 8, "torch-save": 1}
    assert max(resolutions.values()) == 1
