"""The tutorial's claims (docs/tutorial.md), each checked in its direction against the
outputs of the tutorial's own commands (tests/test_readme.py runs them, at its smaller
sizes, then calls `check_tutorial_claims` in the folder they ran in). A sentence of the
page that this file checks is quoted beside its check: change both together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _run(folder: Path, system: str) -> dict[str, Any]:
    return _json(folder / "runs" / "my-model" / system / "summary.json")


def _hit(summary: dict[str, Any]) -> float:
    return float(summary["policy"]["hit_ratio"])


def _time_per_batch(summary: dict[str, Any]) -> float:
    return float(summary["time_s"]) / int(summary["batches"])


def check_tutorial_claims(folder: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "tutorial.md").read_text()
    page = " ".join(text.split())  # the sentences, whatever their line breaks
    lru, tbe, lfu, dram = (_run(folder, s) for s in ("my-gpu", "hbm-tbe-lru", "hbm-lfu", "dram"))
    # "FBGEMM's set-associative TBE cache (`hbm-tbe-lru`) does as well as an ideal LRU"
    assert "does as well as an ideal LRU" in page
    assert abs(_hit(tbe) - _hit(lru)) <= 0.01, (_hit(tbe), _hit(lru))
    # "LFU hits slightly more than LRU"
    assert "LFU hits slightly more than LRU" in page
    assert _hit(lfu) >= _hit(lru), (_hit(lfu), _hit(lru))
    # "keeping every table in host DRAM (`dram`) is slower per batch"
    assert "is slower per batch" in page
    assert _time_per_batch(dram) > _time_per_batch(lru)

    # the plan: 0.9 within the 128 MiB budget, 0.95 beyond it; the budget hits between
    plan = _json(folder / "plans" / "my-model" / "plan.json")
    cache = plan["cache"]
    needs = cache["bytes_for_hit"]["lru"]
    budget = float(cache["budget_bytes"])
    assert "the 128 MiB budget hits about 94%" in page
    assert needs["0.9"] is not None and needs["0.9"] < budget
    assert needs["0.95"] is None or needs["0.95"] > budget
    assert 0.9 <= cache["hit_at_budget"]["lru"] < 0.95

    # the cluster: "the worst GPU holds a shard of the 40 M-row `user_id` table ... the
    # 200-row `country` table's GPU hits more than the mean"
    cluster = _json(folder / "plans" / "my-cluster" / "plan.json")["cluster"]
    sharding = _json(folder / "plans" / "my-cluster" / "sharding.json")
    ranks = {t["table"]: set(t["ranks"]) for t in sharding["tables"]}
    hit = cluster["hit_at_budget"]
    assert "the worst GPUs hold shards of the 40 M-row `user_id` table" in page
    assert hit["worst_gpu"] in ranks["user_id"], (hit, ranks)
    per_gpu = {g["rank"]: g["hit_at_budget"] for g in cluster["per_gpu"]}
    assert "its GPU hits more than the mean" in page
    assert all(per_gpu[r] > hit["mean"] for r in ranks["country"]), (per_gpu, ranks)
    # the user table's GPUs are the least-hit: each below the mean
    assert all(per_gpu[r] < hit["mean"] for r in ranks["user_id"]), (per_gpu, ranks)


__all__ = ["check_tutorial_claims"]
