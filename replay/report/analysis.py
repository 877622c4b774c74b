"""The numbers of a report, computed from loaded result folders only (pure, no I/O).

Each function finds the runs it needs by what they are (system name, checkpoint strategy,
policy), not by folder names, and returns JSON-ready dicts (they go into the report's
`summary.json` as they are):

- `time_terms`: a run's mean time per batch split into compute, memory access, link
  transfers (bytes, latency and per-copy software cost), read-after-write stall,
  checkpoint stall and other. The exposed embedding time is memory + link + RAW stall
  (`replay.engine.account`); the link part is min(Σ link time, exposed − RAW).
  "Steady state" leaves out batch 0, which pays the one-time costs of a short trace (the
  initial full checkpoint that the first increment waits for, cold caches); long runs
  amortize them, so the paper comparisons use the steady state.
- `ladder`: TrainingCXL's steps in order, each with the terms that changed.
- `fastpersist`: write time per checkpoint (durable − start, from checkpoints.parquet)
  and its speedup over `torch-save`, and whether per-batch checkpointing is free: write
  time ≤ forward + backward (the compute time per batch).
- `check_n_run`: write bandwidth (bytes per checkpoint after the initial full one, at a
  common interval) and capacity (the most bytes retained) against `sync-full` at the
  same interval, per increment mode and bit width.
- `checkfreq`, `caches` (PatrickStar's chunks against row caches), `sensitivity` (two
  sweeps of one grid on different systems: the second against the first per point).
- `failures`: each run with a failure model, and whether its interval is near enough
  its Young/Daly optimum for its goodput to mean anything.
- `claims`: DESIGN section 7's published claims beside what the model computes.

Artifacts of a short trace are not results: a figure derived from fewer than
`MIN_CHECKPOINTS` checkpoints, from a failure study whose interval lies outside
`YOUNG_DALY_BAND` times its Young/Daly interval, or from an intermittent increment that
never reaches its full refresh in the replayed span carries a `needs` text (what it
would take) instead of being reported; `None` where it is a result.

Ratios are written by `fmt_ratio`: a percentage up to 100%, a multiple (×) above, so no
report says "621,167%".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from replay._units import format_duration
from replay.report.blocks import rate_text
from replay.report.claims_cluster import patrickstar_claim
from replay.report.cluster import cluster_rows
from replay.report.document import fmt_multiple, fmt_ratio, fmt_saving
from replay.report.load import Results, RunData, SweepData
from replay.report.plan_section import planned_checkfreq
from replay.report.run_terms import col as _col
from replay.report.run_terms import energy_per_batch, steady_batches, time_terms
from replay.report.run_terms import fraction as _fraction
from replay.report.run_terms import ratio as _ratio
from replay.report.run_terms import unique as _unique

LADDER = ("ssd", "pmem-host", "pcie-ndp", "cxl-d", "cxl-b", "cxl")
TERMS = ("compute", "memory", "link", "raw_stall", "checkpoint", "other")
TERM_PHRASES = {
    "compute": "dense compute",
    "memory": "embedding reads and writes at the memory",
    "link": "copies and synchronizations over the link",
    "raw_stall": "read-after-write stalls",
    "checkpoint": "checkpoint and logging on the critical path",
    "other": "other time",
}
# what each step of the ladder changes (DESIGN section 7's table)
LADDER_CHANGES = {
    "pmem-host": "embeddings move from NVMe pages into host persistent memory",
    "pcie-ndp": "lookup and pooling move beside the memory on a PCIe device, and the "
    "update log is kept in the device after the batch instead of a synchronous "
    "write to storage",
    "cxl-d": "the device becomes coherent over CXL: no host-driven copies or synchronizations",
    "cxl-b": "batch-aware undo logging runs beside the GPU's dense compute; only the "
    "excess stalls (logging moved off the critical path)",
    "cxl": "relaxed lookup removes the read-after-write stalls, and dense parameters are "
    "logged every K batches",
}
PAPER = {
    "trainingcxl_speedup": 5.2,
    "trainingcxl_energy_saving": 0.76,
    "cxl_d_vs_pcie": 0.23,
    "cxl_vs_cxl_b": 0.14,
    "consecutive_reuse": 0.80,
    "fastpersist_speedup": 116.0,
    "checknrun_bandwidth": (6.0, 17.0),
    "checknrun_capacity": (2.5, 8.0),
    "checkfreq_overhead": 0.035,
}


MIN_CHECKPOINTS = 3  # a stall share, a bandwidth or a goodput from fewer is no result
YOUNG_DALY_BAND = (0.25, 4.0)  # a failure study's interval / its Young/Daly interval
FASTPERSIST_OVERHEAD = 0.01  # the overhead under which checkpointing counts as negligible


# -- TrainingCXL ----------------------------------------------------------------------------


def _ladder_runs(results: Results) -> list[RunData]:
    """The ladder's runs: the comparison with the most ladder systems (ties: the first),
    else runs given alone; in ladder order."""
    candidates: list[list[RunData]] = [
        [r for r in c.runs if r.system in LADDER] for c in results.compares
    ]
    candidates.append([r for r in results.runs if r.system in LADDER])
    best = max(candidates, key=len, default=[])
    by_name = {r.system: r for r in reversed(best)}
    return [by_name[name] for name in LADDER if name in by_name]


def _explain(prev: dict[str, float], cur: dict[str, float]) -> list[dict[str, Any]]:
    """The terms that changed between two steps, largest first (|Δ| ≥ 1% of before)."""
    changes = []
    for term in TERMS:
        delta = cur[term] - prev[term]
        if abs(delta) >= 0.01 * prev["total"]:
            changes.append({"term": term, "phrase": TERM_PHRASES[term], "delta_s": delta})
    changes.sort(key=lambda c: c["delta_s"])
    return changes


def ladder(results: Results) -> dict[str, Any] | None:
    runs = _ladder_runs(results)
    if len(runs) < 2:
        return None
    steps: list[dict[str, Any]] = []
    prev_terms: dict[str, float] | None = None
    for run in runs:
        terms = time_terms(run)
        step: dict[str, Any] = {
            "system": run.system,
            "time_s": float(run.summary["time_s"]),
            "energy_j": float(run.summary["energy_j"]),
            "batch_time_s": terms["total"],
            "batch_energy_j": energy_per_batch(run),
            "terms_s": {t: terms[t] for t in TERMS},
            "raw_lookups": int(_col(run.batches, "raw_lookups").sum()),
            "change": LADDER_CHANGES.get(run.system, ""),
        }
        if prev_terms is not None:
            step["speedup_over_previous"] = _ratio(prev_terms["total"], terms["total"])
            step["time_saved_fraction"] = 1 - terms["total"] / prev_terms["total"]
            step["no_slower"] = terms["total"] <= prev_terms["total"] * (1 + 1e-12)
            step["changes"] = _explain(prev_terms, terms)
        steps.append(step)
        prev_terms = terms
    out: dict[str, Any] = {"steps": steps, "monotone": all(s.get("no_slower", True) for s in steps)}
    by = {s["system"]: s for s in steps}
    if "pmem-host" in by and "cxl" in by:
        base, best = by["pmem-host"], by["cxl"]
        out["cxl_over_pmem_host"] = {
            "speedup": _ratio(base["batch_time_s"], best["batch_time_s"]),
            "energy_saving": 1 - best["batch_energy_j"] / base["batch_energy_j"],
            "speedup_whole_trace": _ratio(base["time_s"], best["time_s"]),
            "energy_saving_whole_trace": 1 - best["energy_j"] / base["energy_j"],
        }
    if "pcie-ndp" in by and "cxl-d" in by:
        out["cxl_d_vs_pcie_time_saved"] = by["cxl-d"]["time_saved_fraction"]
    if "cxl-b" in by and "cxl" in by:
        out["cxl_vs_cxl_b_time_saved"] = 1 - by["cxl"]["batch_time_s"] / by["cxl-b"]["batch_time_s"]
    return out


# -- checkpoints ----------------------------------------------------------------------------


def _checkpoint_spec(run: RunData) -> dict[str, Any]:
    return dict(run.spec.get("checkpoint", {}))


def write_times(run: RunData) -> pl.Series:
    """Seconds from start to durable of each checkpoint written during training."""
    ck = run.checkpoints
    if ck.is_empty():
        return pl.Series("write_s", [], dtype=pl.Float64)
    return (ck["durable_s"] - ck["start_s"]).alias("write_s")


def checkpoints_taken(run: RunData) -> int:
    """Checkpoints written during training (the initial full one, before batch 0, left
    out)."""
    ck = run.checkpoints
    if ck.is_empty() or "batch" not in ck.columns:
        return 0
    return int((ck["batch"] >= 0).sum())


def _interval_batches(run: RunData) -> int | None:
    """The run's checkpoint interval in batches: as used, as set, or CheckFreq's rule."""
    ck = run.summary.get("checkpoint") or {}
    for value in (
        ck.get("interval_batches_used"),
        _checkpoint_spec(run).get("interval_batches"),
        ck.get("rule_interval_batches"),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            return math.ceil(value)
    return None


def needs_checkpoints(run: RunData) -> str | None:
    """None when the run took at least MIN_CHECKPOINTS checkpoints, else what it needs."""
    taken = checkpoints_taken(run)
    if taken >= MIN_CHECKPOINTS:
        return None
    text = f"needs ≥ {MIN_CHECKPOINTS} checkpoints (this run took {taken})"
    interval = _interval_batches(run)
    if interval:
        text += (
            f": a trace of ≥ {MIN_CHECKPOINTS * interval:,} batches at its interval of "
            f"{interval:,} batches"
        )
    return text + ", or see the plan section"


def _fastpersist_row(run: RunData, base_write_s: float | None) -> dict[str, Any]:
    spec = _checkpoint_spec(run)
    writes = write_times(run)
    write_s = float(writes.mean()) if len(writes) else math.nan
    terms = time_terms(run)
    compute_s = terms["compute"]
    # the training time of a batch, without the checkpoint stall: what an interval of k
    # batches spreads one checkpoint's write over
    train_s = terms["total"] - terms["checkpoint"]
    nbytes = float(run.checkpoints["bytes"].mean()) if len(writes) else math.nan
    interval = (
        max(1, math.ceil(write_s / (FASTPERSIST_OVERHEAD * train_s)))
        if train_s > 0 and math.isfinite(write_s)
        else None
    )
    return {
        "label": run.label,
        "system": run.system,
        "strategy": run.strategy,
        "writers": int(spec.get("writers", 1)),
        "drives": int(spec.get("drives", 0)),
        "drive_write_bw_bytes_per_s": float(spec.get("drive_write_bw_bytes_per_s", 0.0)),
        "interval_batches": int(spec.get("interval_batches", 0)),
        "bytes_per_checkpoint": nbytes,
        "write_s": write_s,
        "write_bw_bytes_per_s": nbytes / write_s if write_s > 0 else None,
        "speedup": None if base_write_s is None else _ratio(base_write_s, write_s),
        "overhead": float(run.summary["checkpoint"].get("overhead", 0.0)),
        "compute_s": compute_s,
        "train_s": train_s,
        "write_over_compute": _ratio(write_s, compute_s),
        "free_per_batch": bool(write_s <= compute_s),
        # one checkpoint every this many batches keeps its write under 1% of the training
        # time (the write time bounds the stall from above)
        "interval_1pct_batches": interval,
        "interval_1pct_s": None if interval is None else interval * train_s,
        "checkpoints": checkpoints_taken(run),
        "needs": needs_checkpoints(run),
    }


def fastpersist(results: Results) -> dict[str, Any] | None:
    runs = _unique(results.all_runs())
    fast = [r for r in runs if r.strategy == "fastpersist" and not r.checkpoints.is_empty()]
    if not fast:
        return None
    named = [r for r in runs if r.system == "torch-save" and not r.checkpoints.is_empty()]
    sync = named or [
        r
        for r in runs
        if r.strategy == "sync-full"
        and _checkpoint_spec(r).get("writers", 1) == 1
        and not r.checkpoints.is_empty()
    ]
    base = _fastpersist_row(sync[0], None) if sync else None
    base_write = base["write_s"] if base and base["needs"] is None else None
    rows = [_fastpersist_row(r, base_write) for r in fast]
    shown = [r for r in rows if r["needs"] is None]
    speedups = [r["speedup"] for r in shown if r["speedup"] is not None]
    best = max(shown or rows, key=lambda r: r["speedup"] or 0.0)
    return {
        "baseline": base,
        "runs": rows,
        "max_speedup": max(speedups) if speedups else None,
        "best": best["label"],
        "per_batch_free": best["free_per_batch"],
        "per_batch_write_s": best["write_s"],
        "compute_s": best["compute_s"],
        "write_over_compute": best["write_over_compute"],
        "interval_1pct_batches": best["interval_1pct_batches"],
        "interval_1pct_s": best["interval_1pct_s"],
        # the aggregate write rate per-batch checkpoints would need to be free
        "needed_write_bw_bytes_per_s": _ratio(best["bytes_per_checkpoint"], best["compute_s"]),
    }


def _steady_bytes_per_checkpoint(run: RunData) -> float:
    ck = run.checkpoints
    after = ck.filter(pl.col("batch") >= 0) if not ck.is_empty() else ck
    return float(after["bytes"].mean()) if after.height else math.nan


def needs_refresh(run: RunData) -> str | None:
    """None unless `run` is an intermittent increment that wrote no full checkpoint after
    the initial one in the replayed span (it then equals one-shot): what it would need."""
    spec = _checkpoint_spec(run)
    if spec.get("increment") != "intermittent":
        return None
    ck = run.checkpoints
    if ck.is_empty() or not {"kind", "batch", "rows"} <= set(ck.columns):
        return None
    if ck.filter((pl.col("kind") == "full") & (pl.col("batch") >= 0)).height:
        return None
    full = ck.filter(pl.col("kind") == "full")
    incr = ck.filter(pl.col("kind") == "incremental").sort("batch")
    threshold = float(spec.get("full_threshold_fraction", 0.5))
    text = (
        f"needs a span in which an increment exceeds {fmt_ratio(threshold)} of the rows "
        "(its full refresh; until then it is one-shot)"
    )
    if full.height and incr.height:
        total = float(full["rows"].max())
        last = incr.row(-1, named=True)
        share = last["rows"] / total if total else 0.0
        text += f": the largest increment here held {fmt_ratio(share)}"
        if share > 0:
            # increments grow more slowly than linearly: a lower bound
            want = math.ceil((int(last["batch"]) + 1) * threshold / share)
            text += f", so a trace of more than {want:,} batches"
    return text + ", or see the plan section"


def check_n_run(results: Results) -> dict[str, Any] | None:
    runs = _unique(results.all_runs())
    cnr = [
        r
        for r in runs
        if r.strategy == "check-n-run"
        and not _checkpoint_spec(r).get("synchronous", False)
        and not r.checkpoints.is_empty()
    ]
    bases = [r for r in runs if r.strategy == "sync-full" and not r.checkpoints.is_empty()]
    if not cnr or not bases:
        return None
    rows = []
    seen: set[tuple[Any, ...]] = set()
    for run in cnr:
        spec = _checkpoint_spec(run)
        interval = (spec.get("interval_batches", 0), spec.get("interval_s", 0.0))
        # one row per configuration (a sweep over something else repeats them)
        config = (spec.get("increment"), spec.get("quantize_bits"), *interval)
        if config in seen:
            continue
        seen.add(config)
        same = [
            b
            for b in bases
            if (
                _checkpoint_spec(b).get("interval_batches", 0),
                _checkpoint_spec(b).get("interval_s", 0.0),
            )
            == interval
        ]
        if not same:
            continue
        base = same[0]
        needs = needs_checkpoints(run) or needs_refresh(run)
        if needs is None and needs_checkpoints(base):
            needs = f"its baseline {base.label} {needs_checkpoints(base)}"
        base_bytes = _steady_bytes_per_checkpoint(base)
        own_bytes = _steady_bytes_per_checkpoint(run)
        base_kept = float(base.summary["checkpoint"]["max_bytes_retained"])
        own_kept = float(run.summary["checkpoint"]["max_bytes_retained"])
        rows.append(
            {
                "label": run.label,
                "increment": str(spec.get("increment", "")),
                "quantize_bits": int(spec.get("quantize_bits", 0)),
                "interval_batches": int(interval[0]),
                "baseline": base.label,
                "bytes_per_checkpoint": own_bytes,
                "baseline_bytes_per_checkpoint": base_bytes,
                "bandwidth_reduction": _ratio(base_bytes, own_bytes),
                "max_bytes_retained": own_kept,
                "baseline_max_bytes_retained": base_kept,
                "capacity_reduction": _ratio(base_kept, own_kept),
                "overhead": float(run.summary["checkpoint"].get("overhead", 0.0)),
                "quantization_error": (run.summary["checkpoint"].get("quantization") or {}).get(
                    "relative_error_mean"
                ),
                "checkpoints": checkpoints_taken(run),
                "batches": int(run.summary["batches"]),
                "needs": needs,
            }
        )
    if not rows:
        return None
    shown = [r for r in rows if r["needs"] is None]
    bw = [r["bandwidth_reduction"] for r in shown if r["bandwidth_reduction"] is not None]
    cap = [r["capacity_reduction"] for r in shown if r["capacity_reduction"] is not None]
    return {
        "runs": rows,
        "shown": len(shown),
        "bandwidth_reduction_range": [min(bw), max(bw)] if bw else None,
        "capacity_reduction_range": [min(cap), max(cap)] if cap else None,
        "interval_batches": sorted({r["interval_batches"] for r in shown}),
        "span_batches": sorted({r["batches"] for r in shown}),
    }


def check_n_run_basis(cnr: dict[str, Any]) -> str:
    """The interval and span the reductions come from (they grow as the interval shrinks)."""
    keys = ("interval_batches", "span_batches")
    spans = [", ".join(f"{v:,}" for v in cnr.get(k) or []) or "its own" for k in keys]
    return f"at an interval of {spans[0]} batches over a {spans[1]}-batch trace"


def checkfreq(results: Results) -> dict[str, Any] | None:
    """CheckFreq at its own interval (runs without interval_batches or interval_s).

    `rule_overhead` is the steady-state stall share the rule aims at, t_snapshot /
    (k · t_iter), from the run's own figures. A run of fewer than MIN_CHECKPOINTS
    checkpoints measures nothing: its `needs` says how long a trace would.
    """
    runs = [
        r
        for r in _unique(results.all_runs())
        if r.strategy == "checkfreq"
        and not _checkpoint_spec(r).get("interval_batches")
        and not _checkpoint_spec(r).get("interval_s")
    ]
    if not runs:
        return None
    rows = []
    for r in runs:
        ck = r.summary["checkpoint"]
        k = ck.get("rule_interval_batches")
        t_snap, t_iter = ck.get("t_snapshot_s"), ck.get("t_iter_s")
        rule = t_snap / (k * t_iter) if k and t_snap is not None and t_iter else None
        rows.append(
            {
                "label": r.label,
                "overhead": float(ck["overhead"]),
                "count": int(ck["count"]),
                "rule_interval_batches": k,
                "rule_overhead": rule,
                "batches": int(r.summary["batches"]),
                "needs": needs_checkpoints(r),
            }
        )
    known = [r["overhead"] for r in rows if r["needs"] is None]
    return {"runs": rows, "max_overhead": max(known) if known else None}


# -- failures ------------------------------------------------------------------------------


def failures(results: Results) -> list[dict[str, Any]]:
    """Every run with a failure model; `needs` is None when its goodput is a result: the
    interval it checkpointed at lies within YOUNG_DALY_BAND of its Young/Daly interval
    and it took MIN_CHECKPOINTS checkpoints (a run without checkpoints needs neither)."""
    rows = []
    low, high = YOUNG_DALY_BAND
    for run in _unique(results.all_runs()):
        f = run.summary.get("failures")
        if not isinstance(f, dict):
            continue
        yd = f.get("young_daly_interval_s")
        used = f.get("interval_s_used")
        ratio = _ratio(float(used), float(yd)) if used is not None and yd else None
        needs = None
        if run.strategy != "none":
            if ratio is None or not low <= ratio <= high:
                needs = (
                    f"its interval, {_duration(used)}, is "
                    + ("not comparable to" if ratio is None else f"{ratio:.3g}×")
                    + f" its Young/Daly interval ({_duration(yd)}): needs an interval within "
                    f"{low:g}–{high:g}× that ({_duration(low * yd if yd else None)} to "
                    f"{_duration(high * yd if yd else None)}), or see the plan section"
                )
            else:
                needs = needs_checkpoints(run)
        rows.append(
            {
                "label": run.label,
                "strategy": run.strategy,
                "mtbf_s": float(f["mtbf_s"]),
                "goodput_mean": float(f["goodput_mean"]),
                "goodput_p5": float(f["goodput_p5"]),
                "lost_work_per_training_failure_s": float(f["lost_work_per_training_failure_s"]),
                "failures_during_restore_per_draw_mean": float(
                    f["failures_during_restore_per_draw_mean"]
                ),
                "young_daly_interval_s": yd,
                "interval_s_used": used,
                "interval_over_young_daly": ratio,
                "needs": needs,
            }
        )
    return rows


def _duration(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else format_duration(seconds)


# -- placement ------------------------------------------------------------------------------


def caches(results: Results) -> dict[str, Any] | None:
    """PatrickStar's chunk placement against row caches of one comparison (the first
    comparison holding a `chunk` run and at least one other cache)."""
    for compare in results.compares:
        policies = {r.summary["policy"]["name"] for r in compare.runs}
        if "chunk" in policies and len(policies & {"lru", "belady", "lfu", "hot"}) >= 1:
            rows = []
            for run in compare.runs:
                pol = run.summary["policy"]
                batches = max(int(run.summary["batches"]), 1)
                link_bytes = sum(
                    int(v.get("h2d_bytes", 0)) + int(v.get("d2h_bytes", 0))
                    for v in run.summary["links"].values()
                )
                rows.append(
                    {
                        "system": run.system,
                        "policy": pol["name"],
                        "capacity_rows": int(pol.get("capacity_units", 0))
                        * int(pol.get("unit_rows", 1)),
                        "hit_ratio": _fraction(pol["hit_ratio"]),
                        "amplification": float(pol.get("amplification", 1.0)),
                        "link_bytes_per_batch": link_bytes / batches,
                        "batch_time_s": time_terms(run)["total"],
                    }
                )
            return {"compare": compare.path.name, "runs": rows}
    return None


# -- sensitivity ----------------------------------------------------------------------------


def _grid_signature(sweep: SweepData) -> str:
    return repr(sorted((k, repr(v)) for k, v in sweep.document.get("grid", {}).items()))


def sensitivity(results: Results) -> list[dict[str, Any]]:
    """Pairs of sweeps over one grid on two systems: the second against the first."""
    studies = []
    sweeps = results.sweeps
    for i, first in enumerate(sweeps):
        for second in sweeps[i + 1 :]:
            if _grid_signature(first) != _grid_signature(second):
                continue
            a, b = first.runs[0].system, second.runs[0].system
            if a == b:
                continue
            pair = (first, second)
            if a in LADDER and b in LADDER and LADDER.index(b) < LADDER.index(a):
                pair, (a, b) = (second, first), (b, a)  # the earlier step is the baseline
            points = []
            for ra, rb in zip(pair[0].runs, pair[1].runs, strict=False):
                ta, tb = time_terms(ra)["total"], time_terms(rb)["total"]
                ea, eb = energy_per_batch(ra), energy_per_batch(rb)
                points.append(
                    {
                        "values": ra.values,
                        "speedup": _ratio(ta, tb),
                        "energy_saving": 1 - eb / ea if ea > 0 else None,
                    }
                )
            studies.append(
                {
                    "baseline": a,
                    "system": b,
                    "keys": list(first.keys),
                    "folders": [pair[0].path.name, pair[1].path.name],
                    "points": points,
                }
            )
    return studies


# -- the claims table -------------------------------------------------------------------------


def _fmt_pct(x: float | None) -> str:
    return fmt_ratio(x, 2)


def _fmt_x(x: float | None) -> str:
    return fmt_multiple(x)


def _spec_value(runs: Sequence[RunData], system: str, *path: str) -> str:
    """A field of `system`'s spec as text (`%g`), or "n/a" when that run is missing."""
    for run in runs:
        if run.system == system:
            value: Any = run.spec
            for key in path:
                value = value.get(key, {}) if isinstance(value, dict) else {}
            if isinstance(value, int | float) and not isinstance(value, bool):
                return f"{value:g}"
            return "n/a" if value in ({}, None) else str(value)
    return "n/a"


def _assumed(runs: Sequence[RunData], systems: tuple[str, ...], text: str) -> str:
    """A claim's assumptions, read from the specs of the runs of `systems`; where one of
    them is not among the results its values are unknown, so the row says which runs
    would give them rather than printing `n/a ns`."""
    have = {run.system for run in runs}
    missing = [name for name in systems if name not in have]
    if not missing:
        return text
    return (
        f"the specs of {' and '.join(systems)} (no run of {' or '.join(missing)} among the "
        "results, so their values are not shown)"
    )


def claims(results: Results, sections: dict[str, Any]) -> list[dict[str, str]]:
    """One row per published claim: the claim, its source, the model's figure (or why
    there is none) and the assumptions behind the figure."""
    rows: list[dict[str, str]] = []
    lad = sections.get("ladder")
    runs = _ladder_runs(results)
    if lad and "cxl_over_pmem_host" in lad:
        head = lad["cxl_over_pmem_host"]
        model = (
            f"{_fmt_x(head['speedup'])} faster and {fmt_saving(head['energy_saving'])} "
            "energy per batch (steady state)"
        )
    else:
        model = "not computed: give a comparison with pmem-host and cxl"
    rows.append(
        {
            "claim": "5.2× training performance and 76% energy saved against a "
            "persistent-memory recommendation system",
            "source": "TrainingCXL abstract",
            "model": model,
            "assumptions": _assumed(
                runs,
                ("pmem-host", "cxl"),
                "host copy + synchronization "
                f"{_spec_value(runs, 'pmem-host', 'links', 'pcie', 'transfer_cost_ns')} ns "
                "per table and direction; persistent memory latency/bandwidth from the "
                "paper's DRAM ratios; dense compute at "
                f"{_spec_value(runs, 'cxl', 'compute', 'flops_per_s')} FLOP/s; "
                "device power figures are ours (devices.toml)",
            ),
        }
    )
    if lad and ("cxl_d_vs_pcie_time_saved" in lad or "cxl_vs_cxl_b_time_saved" in lad):
        model = (
            f"CXL-D {_fmt_pct(lad.get('cxl_d_vs_pcie_time_saved'))} less than PCIe; "
            f"CXL {_fmt_pct(lad.get('cxl_vs_cxl_b_time_saved'))} less than CXL-B"
        )
    else:
        model = "not computed: give a comparison with the ladder's systems"
    rows.append(
        {
            "claim": "CXL-D 23% less training time than PCIe; CXL 14% less than CXL-B",
            "source": "TrainingCXL evaluation",
            "model": model,
            "assumptions": _assumed(
                runs,
                ("cxl-b", "cxl"),
                "persistent-memory write-to-read turnaround "
                f"{_spec_value(runs, 'cxl-b', 'tiers', 'pmem', 'write_to_read_ns')} ns "
                "(ASSUMPTION: the media write latency); CXL hop "
                f"{_spec_value(runs, 'cxl', 'links', 'cxl', 'latency_ns')} ns; dense "
                f"logging every {_spec_value(runs, 'cxl', 'checkpoint', 'dense_interval_batches')}"
                " batches in cxl (ASSUMPTION)",
            ),
        }
    )
    work = results.workload()
    rows.append(
        {
            "claim": "about 80% of embedding vectors are trained in consecutive batches",
            "source": "cited by TrainingCXL",
            "model": (
                f"{_fmt_pct(work['consecutive_reuse_mean'])} of a batch's distinct rows "
                "were also in the batch before (mean over batches, this trace)"
                if work
                else "not computed: no workload.json in the results"
            ),
            "assumptions": "measured on the trace; synthetic traces set it with the spec's reuse",
        }
    )
    fp = sections.get("fastpersist")
    if fp and fp.get("max_speedup") is not None:
        model = (
            f"up to {_fmt_x(fp['max_speedup'])} faster writes than torch-save ({fp['best']}); "
            + (fastpersist_per_batch(fp))
        )
    elif fp:
        needs = [r["needs"] for r in fp["runs"] if r["needs"]]
        base_needs = (fp.get("baseline") or {}).get("needs")
        model = "not shown: " + (base_needs or (needs[0] if needs else "no torch-save run"))
    else:
        model = "not computed: give torch-save and fastpersist runs"
    base = (fp or {}).get("baseline") or {}
    rows.append(
        {
            "claim": "checkpoints up to 116× faster than the baseline; per-iteration "
            "checkpointing with negligible overhead",
            "source": "FastPersist abstract",
            "model": model,
            "assumptions": (
                "torch.save writes at "
                f"{rate_text(base.get('write_bw_bytes_per_s'))} from one writer (ASSUMPTION); "
                "drives at their published aggregate rate; the paper's 116× is across many "
                "nodes writing in parallel, the model counts one node"
            ),
        }
    )
    cnr = sections.get("check_n_run")
    if cnr and cnr.get("bandwidth_reduction_range"):
        lo, hi = cnr["bandwidth_reduction_range"]
        clo, chi = cnr["capacity_reduction_range"]
        model = (
            f"{lo:.3g}–{hi:.3g}× less write bandwidth and {clo:.3g}–{chi:.3g}× less capacity "
            f"over {cnr['shown']} increment modes and bit widths, {check_n_run_basis(cnr)}"
        )
        hidden = len(cnr["runs"]) - cnr["shown"]
        if hidden:
            model += f" ({hidden} more not shown: artifacts of the short trace)"
    elif cnr:
        model = "not shown: " + next(r["needs"] for r in cnr["runs"] if r["needs"])
    else:
        model = "not computed: give check-n-run runs and a sync-full run at one interval"
    rows.append(
        {
            "claim": "6–17× less checkpoint write bandwidth and 2.5–8× less capacity",
            "source": "Check-N-Run abstract",
            "model": model,
            "assumptions": "rows updated per interval come from the trace; quantized rows "
            "carry an fp32 minimum and scale; the initial full checkpoint is left out of "
            "the bandwidth; capacity is the most bytes a restore needs at once",
        }
    )
    cf = sections.get("checkfreq")
    rows.append(
        {
            "claim": "runtime overhead of frequent checkpoints bounded within 3.5%",
            "source": "CheckFreq abstract",
            # no replayed run at CheckFreq's interval: the plan's stall share, said so
            "model": (planned_checkfreq(results.plans) if cf is None else None)
            or _checkfreq_text(cf),
            "assumptions": "snapshot to host memory, then persist in the background; "
            "interval chosen by CheckFreq's rule for the overhead budget",
        }
    )
    patrickstar = patrickstar_claim(results.all_runs())
    if patrickstar is not None:  # a chunk system on a cluster
        rows.append(patrickstar)
    return rows


def fastpersist_per_batch(fp: dict[str, Any]) -> str:
    """Per-batch checkpointing, like with like: one checkpoint's write time against the
    forward + backward time of a batch, and the interval at which the overhead is under
    1%."""
    free = "free" if fp["per_batch_free"] else "not free"
    text = (
        f"per-batch checkpointing is {free} here: a checkpoint takes "
        f"{_duration(fp['per_batch_write_s'])} to write against "
        f"{_duration(fp['compute_s'])} of forward + backward per batch "
        f"({fmt_ratio(fp.get('write_over_compute'))} of it)"
    )
    k = fp.get("interval_1pct_batches")
    if k:
        text += (
            f"; the overhead falls under {fmt_ratio(FASTPERSIST_OVERHEAD)} at one checkpoint "
            f"every {k:,} batches ({_duration(fp['interval_1pct_s'])} of training)"
        )
    return text


def _checkfreq_text(cf: dict[str, Any] | None) -> str:
    if not cf:
        return "not computed: give a checkfreq run without an interval"
    if cf["max_overhead"] is None:
        return "not shown: " + str(cf["runs"][0]["needs"])
    return (
        f"{fmt_ratio(cf['max_overhead'])} stall overhead at CheckFreq's own interval "
        f"(measured over {min(r['count'] for r in cf['runs'] if r['needs'] is None):,} "
        "checkpoints or more)"
    )


def analyse(results: Results) -> dict[str, Any]:
    """Every section's numbers and the claims table."""
    sections: dict[str, Any] = {
        "ladder": ladder(results),
        "fastpersist": fastpersist(results),
        "check_n_run": check_n_run(results),
        "checkfreq": checkfreq(results),
        "caches": caches(results),
        "sensitivity": sensitivity(results),
        "failures": failures(results),
    }
    sections["claims"] = claims(results, sections)
    if rows := cluster_rows(results):  # only with a cluster run: one GPU's is unchanged
        sections["cluster"] = rows
    return sections


__all__ = [
    "LADDER",
    "MIN_CHECKPOINTS",
    "PAPER",
    "TERMS",
    "YOUNG_DALY_BAND",
    "analyse",
    "caches",
    "check_n_run",
    "checkfreq",
    "checkpoints_taken",
    "claims",
    "energy_per_batch",
    "failures",
    "fastpersist",
    "fastpersist_per_batch",
    "ladder",
    "needs_checkpoints",
    "needs_refresh",
    "sensitivity",
    "steady_batches",
    "time_terms",
]
