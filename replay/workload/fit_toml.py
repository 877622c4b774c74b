"""The TOML that `replay fit` writes: the fitted spec with the fit's diagnostics.

`spec_with_diagnostics` renders a `replay.workload.fit.FitResult` as `spec_to_toml` text
(so `load_spec` reads it back unchanged) with comment lines: a header saying what was
fitted, from what sample and by which method, then above each table its rows and their
source, the exponent with its interval and note, the hot-value tests (each rank's
observed share and likelihood ratio, `replay.workload.fit_stats.hot_values_test`), reuse,
drift, the misfit and each matched statistic, sample -> fitted. Comments carry no
numbers the spec needs: deleting them changes nothing that is generated.
"""

from __future__ import annotations

import json

from replay.workload.fit import MAX_MISFIT, FitResult, TableFit
from replay.workload.fit_stats import HOT_CRITICAL, STATISTICS
from replay.workload.spec import spec_to_toml


def _hot_line(table: TableFit) -> str:
    """The hot-value tests of one table, rank by rank, and what the spec keeps."""
    tests = "; ".join(
        f"rank {i + 1} takes {share:.4f} (likelihood ratio {lr:.1f})"
        for i, (share, lr) in enumerate(table.hot_tests)
    )
    if not table.hot_shares:
        return f"hot values: none stands out (critical {HOT_CRITICAL}): {tests or 'no rank tested'}"
    kept = ", ".join(f"{s:.4f}" for s in table.hot_shares)
    ranks = (
        "rank 1 keeps" if len(table.hot_shares) == 1 else f"ranks 1-{len(table.hot_shares)} keep"
    )
    return (
        f"hot values: {ranks} the observed shares [{kept}] (rank {len(table.hot_shares)} is "
        f"the largest whose likelihood ratio is above {HOT_CRITICAL}): {tests}"
    )


def _comment(text: str) -> str:
    """A TOML comment line: control characters (a newline in a name) escaped."""
    return "# " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def spec_with_diagnostics(result: FitResult, version: str) -> str:
    """The fitted spec as TOML (`spec_to_toml`, so `load_spec` reads it back), with the
    fit's diagnostics as comments: a header, then one block above each table."""
    header = [
        f"replay {version} fit of {result.trace}",
        f"sample: {result.batches:,} batches from batch {result.first_batch:,}, "
        f"{result.lookups:,} lookups, {len(result.tables)} tables",
        f"overall (lookup-weighted): reuse {result.reuse:.4f}, drift {result.drift:.4g}",
        "model: bounded power law per table (with hot values where the top rows stand "
        "out), reuse window 1 batch, drift period 1 batch",
        "method: indirect inference against the generator "
        f"({result.simulations} simulated traces, {result.steps} Levenberg-Marquardt steps);"
        " see replay/workload/fit.py",
        "generate a trace N times longer: replay generate --spec THIS.toml --batches N*"
        f"{result.batches} --out DIR",
        *result.notes,
    ]
    blocks = spec_to_toml(result.spec).split("\n[[tables]]\n")
    out = ["\n".join(_comment(line) for line in header), blocks[0]]
    for table, block in zip(result.tables, blocks[1:], strict=True):
        ci = (
            f"[{table.alpha_ci[0]:.3f}, {table.alpha_ci[1]:.3f}]"
            if table.alpha_ci is not None
            else "none"
        )
        mle = "none" if table.alpha_mle is None else f"{table.alpha_mle:.4f}"
        lines = [
            f"table {json.dumps(table.name, ensure_ascii=False)}: {table.lookups:,} lookups, "
            f"{table.distinct_rows:,} distinct rows; rows {table.rows:,} ({table.rows_source}; "
            f"declared {table.declared_rows:,})",
            f"alpha {table.alpha_spec:.4f}, 95% CI {ci}: {table.alpha_note}; "
            f"plain MLE over the ranked frequencies {mle}",
            _hot_line(table),
            f"reuse {table.reuse:.4f}, drift {table.drift:.4g}; misfit {table.misfit:.3g}"
            f" ({'converged' if table.misfit <= MAX_MISFIT else 'NOT converged'})",
            "matched (sample -> fitted): "
            + ", ".join(
                f"{name} {o:.4g} -> {f:.4g}"
                for name, o, f in zip(STATISTICS, table.observed, table.fitted, strict=True)
            ),
        ]
        out.append("\n".join(_comment(line) for line in lines) + "\n[[tables]]\n" + block)
    return "\n\n".join(part.rstrip("\n") for part in out) + "\n"
