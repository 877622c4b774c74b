"""Every generic figure of `replay report` (DESIGN section 8): `generic_figures(results,
out_dir)` draws each figure the loaded result folders support, section by section, and
returns their `FigureOut`s (name, title, caption with the computed facts to read,
section) in report order:

- workload (`figures_workload`): ``workload_skew.png``, ``workload_reuse.png``,
  ``workload_distinct.png``, ``workload_touched.png``;
- hierarchy (`figures_hierarchy`): ``hierarchy_hits.png``, ``hierarchy_traffic.png``,
  ``mrc.png``;
- cluster (`figures_cluster`): ``cluster_<run>.png`` for each cluster run;
- time and energy (`figures_time`): ``time_<group>.png`` then ``energy_<group>.png``
  for the runs given alone (group "runs") and each comparison (its folder name);
- checkpoints (`figures_checkpoints`): ``checkpoint_bytes.png``;
- sweeps (`figures_sweeps`): ``sweep_<folder>.png`` for every sweep; a sweep over
  `policy.chunk_rows` of the `chunk` policy gets PatrickStar's chunk-size figure under
  that name instead (hit ratio, link bytes and time per batch against the chunk size,
  beside the row caches of the same budget; section "hierarchy").

A figure whose data is absent is skipped. What they share (how a figure is drawn and
written, the colours, the names of runs) is in `replay.report.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from replay.report.figures import (
    FigureOut,
    _sanitise,
    _unique,
    display_names,
    sweep_figure_names,
    system_colors,
)
from replay.report.figures_checkpoints import _checkpoint_bytes
from replay.report.figures_cluster import cluster_figures
from replay.report.figures_hierarchy import _hierarchy_hits, _hierarchy_traffic, _mrc
from replay.report.figures_sweeps import _chunk_figure, _sweep_figure, is_chunk_sweep
from replay.report.figures_time import _energy_figure, _time_figure
from replay.report.figures_workload import (
    _workload_distinct,
    _workload_reuse,
    _workload_skew,
    _workload_touched,
)
from replay.report.load import Results, RunData


def generic_figures(
    results: Results, out_dir: Path, *, skip_sweeps: frozenset[str] = frozenset()
) -> list[FigureOut]:
    """Draw every figure the results support into out_dir (which exists); skip figures
    with no data, and the sweeps named in `skip_sweeps` (folder names: the sensitivity
    studies, which the report shows as their own figures). Returns them in report order
    (workload, hierarchy, cluster, time, energy, checkpoints, sweeps)."""
    out = Path(out_dir)
    runs = results.all_runs()
    colors = system_colors([r.label for r in runs])
    names = display_names(results)
    figures: list[FigureOut | None] = []
    workload = results.workload()
    if workload is not None:
        figures.append(_workload_skew(workload, out))
        figures.append(_workload_reuse(workload, out))
    first = next((r for r in runs if r.batches.height > 0), None)
    if first is not None:
        figures.append(_workload_distinct(first, out))
    if workload is not None:
        figures.append(_workload_touched(workload, out))
    figures.append(_hierarchy_hits(runs, colors, names, out))
    figures.append(_hierarchy_traffic(runs, names, out))
    figures.append(_mrc(results, colors, names, out))
    figures.extend(cluster_figures(runs, names, out))

    used: set[str] = set()
    groups: list[tuple[str, Sequence[RunData]]] = []
    if results.runs:
        groups.append((_unique("runs", used), results.runs))
    for compare in results.compares:
        groups.append((_unique(_sanitise(compare.path.name), used), compare.runs))
    figures.extend(_time_figure(group, members, out) for group, members in groups)
    figures.extend(_energy_figure(group, members, out) for group, members in groups)
    figures.append(_checkpoint_bytes(runs, colors, names, out))

    for sweep, name in zip(results.sweeps, sweep_figure_names(results.sweeps), strict=True):
        if sweep.path.name in skip_sweeps:
            continue  # a figure written is a figure shown: these are drawn as sensitivity
        if is_chunk_sweep(sweep):
            figures.append(_chunk_figure(sweep, name, results, colors, out))
        else:
            figures.append(_sweep_figure(sweep, name, out))
    return [f for f in figures if f is not None]


__all__ = ["generic_figures"]
