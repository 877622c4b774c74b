"""The files of `replay mrc --out DIR`: `mrc.parquet` (cache_rows, miss_ratio), `mrc.json`
(the curve and how it was made) and `mrc.png`, built in a partial folder and renamed into
place together (`replay._output.atomic_folder`). `replay quickstart` writes its curve
with them too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay._output import atomic_folder
from replay._schema_stamp import stamp

if TYPE_CHECKING:
    from replay.analysis.mrc import MrcResult

# what --force may replace: these files and nothing else (`replay._output.Owned`)
OUTPUT_FILES = frozenset({"mrc.parquet", "mrc.json", "mrc.png"})


def write_outputs(result: MrcResult, document: dict[str, Any], out: Path, force: bool) -> None:
    """Build the three files beside `out`, then move them into place in one rename."""
    # checked again inside: the folder may have changed during the run
    with atomic_folder(out, force=force, owned=OUTPUT_FILES, what="`replay mrc` output") as tmp:
        _write_parquet(result, tmp / "mrc.parquet")
        (tmp / "mrc.json").write_text(json.dumps(stamp("mrc", document), indent=2) + "\n")
        _write_png(result, tmp / "mrc.png", document.get("trace", ""))


def _write_parquet(result: MrcResult, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from replay import _arrow

    table = _arrow.table(
        {"cache_rows": result.sizes, "miss_ratio": result.miss_ratios},
        pa.schema([("cache_rows", pa.int64()), ("miss_ratio", pa.float64())]),
    )
    pq.write_table(table, path)


def _write_png(result: MrcResult, path: Path, trace: str) -> None:
    # the object API with the Agg canvas: no pyplot global state, no display needed
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x, y = result.sizes, result.miss_ratios
    ax.plot(x, y, marker=".", color="tab:blue", label="LRU miss ratio")
    if result.exact:
        how = "exact (stack distances)"
    else:
        how = f"SHARDS, sample rate {result.sample_rate:.4g}"
        err = result.point_errors
        ax.fill_between(
            x, (y - err).clip(0, 1), (y + err).clip(0, 1), color="tab:blue", alpha=0.15,
            label="expected error (about 95%)",
        )  # fmt: skip
    ax.set_xscale("log")
    top = float((y + result.point_errors).max(initial=0.0))
    ax.set_ylim(0.0, min(1.0, top * 1.05 + 0.01))
    ax.set_xlabel("cache size (rows)")
    ax.set_ylabel("miss ratio")
    # the trace's path is drawn as written: no mathtext for a `$` in a folder name
    ax.set_title(f"LRU miss-ratio curve, {how}\n{trace}", fontsize=10, parse_math=False)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    fig.savefig(path, dpi=120)


# -- human-readable output ----------------------------------------------------------------


__all__ = ["OUTPUT_FILES", "write_outputs"]
