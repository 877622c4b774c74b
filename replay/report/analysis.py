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
- `fastpersist`, `check_n_run`, `checkfreq`, `failures`: the checkpoint schemes' and
  failure studies' numbers (`replay.report.checkpoint_analysis`, re-exported here).
- `caches` (PatrickStar's chunks against row caches), `sensitivity` (two sweeps of one
  grid on different systems: the second against the first per point).
- `claims`: DESIGN section 7's published claims beside what the model computes.

Artifacts of a short trace are not results: a figure from fewer than `MIN_CHECKPOINTS`
checkpoints, or another the replayed span cannot support, carries a `needs` text (what
it would take) instead of being reported; `None` where it is a result.

Ratios are written by `fmt_ratio`: a percentage up to 100%, a multiple (×) above, so no
report says "621,167%".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replay._units import format_number
from replay.report.blocks import rate_text
from replay.report.checkpoint_analysis import (
    FASTPERSIST_OVERHEAD,
    MIN_CHECKPOINTS,
    YOUNG_DALY_BAND,
    check_n_run,
    check_n_run_basis,
    checkfreq,
    checkpoints_taken,
    duration_text,
    failures,
    fastpersist,
    needs_checkpoints,
    needs_refresh,
    write_times,
)
from replay.report.claims_cluster import patrickstar_claim
from replay.report.cluster import cluster_rows
from replay.report.document import fmt_multiple, fmt_ratio, fmt_saving
from replay.report.load import Results, RunData, SweepData
from replay.report.plan_section import planned_checkfreq
from replay.report.run_terms import col as _col
from replay.report.run_terms import energy_per_batch, steady_batches, time_terms
from replay.report.run_terms import fraction as _fraction
from replay.report.run_terms import ratio as _ratio

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
PAPER: dict[str, Any] = {
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
    changes: list[dict[str, Any]] = []
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


_US = (1e3, " µs")  # of a field in ns
_TFLOPS = (1e12, " TFLOP/s")  # of a field in FLOP/s


def _spec_value(
    runs: Sequence[RunData], system: str, *path: str, unit: tuple[float, str] = (1.0, "")
) -> str:
    """A field of `system`'s spec as text, in `unit` (a divisor and its name: the field's
    own unit by default), or "n/a" when that run is missing."""
    for run in runs:
        if run.system == system:
            value: Any = run.spec
            for key in path:
                value = value.get(key, {}) if isinstance(value, dict) else {}
            if isinstance(value, int | float) and not isinstance(value, bool):
                return f"{format_number(value / unit[0], 4)}{unit[1]}"
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
                f"{_spec_value(runs, 'pmem-host', 'links', 'pcie', 'transfer_cost_ns', unit=_US)} "
                "per table and direction; persistent memory latency/bandwidth from the "
                "paper's DRAM ratios; dense compute at "
                f"{_spec_value(runs, 'cxl', 'compute', 'flops_per_s', unit=_TFLOPS)}; "
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
            f"{format_number(lo)}–{fmt_multiple(hi)} less write bandwidth and "
            f"{format_number(clo)}–{fmt_multiple(chi)} less capacity "
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
        f"{duration_text(fp['per_batch_write_s'])} to write against "
        f"{duration_text(fp['compute_s'])} of forward + backward per batch "
        f"({fmt_ratio(fp.get('write_over_compute'))} of it)"
    )
    k = fp.get("interval_1pct_batches")
    if k:
        text += (
            f"; the overhead falls under {fmt_ratio(FASTPERSIST_OVERHEAD)} at one checkpoint "
            f"every {k:,} batches ({duration_text(fp['interval_1pct_s'])} of training)"
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
    "check_n_run_basis",
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
    "write_times",
]
