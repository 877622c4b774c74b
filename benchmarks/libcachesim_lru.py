"""libCacheSim's LRU on the key stream of a replay trace: a yardstick for `hbm-lru`.

Not part of the package and not run by the tests. libCacheSim (the C library, through its
PyPI binding `libcachesim`) is needed only by `run` and `verify`, so it can live in a
separate virtual environment; `export` and `compare` need the project (`replay`).

    export TRACE_DIR OUT.bin         flat keys offsets[table] + row, trace order, as
                                     little-endian uint64, one per request (8 B each),
                                     plus OUT.bin.json describing them
    run OUT.bin --capacity C         libCacheSim LRU holding C objects; prints JSON
    verify [--bin OUT.bin]           libCacheSim LRU miss counts == an OrderedDict LRU
    compare TRACE_DIR --capacity C   whole-process timings of `run` and of
                                     `replay run TRACE_DIR --system hbm-lru`

libCacheSim reads OUT.bin with its binary reader (`TraceType.BIN_TRACE`, format "<Q",
object id = field 1, no size field, so every object has size 1); the cache size is in
bytes, and with `consider_obj_metadata=False` (the default) and size-1 objects the LRU holds
exactly C objects (`verify` checks it). The miss count is read back from the miss ratio
that `c_process_trace` returns (round(ratio * requests): exact far beyond 2^40 requests).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_T0 = time.perf_counter()

KEY_FORMAT = "<Q"  # libCacheSim binary format string: one little-endian uint64 per request
KEY_BYTES = 8
SIDECAR_SUFFIX = ".json"


# -- export ---------------------------------------------------------------------------------
def _manifest_sha256(trace_dir: Path) -> str:
    return hashlib.sha256((trace_dir / "manifest.json").read_bytes()).hexdigest()


def _sidecar(out: Path) -> Path:
    return out.with_name(out.name + SIDECAR_SUFFIX)


def export(trace_dir: Path, out: Path) -> dict[str, Any]:
    """Write the flat key of every lookup, in trace order, as uint64 to `out` (the
    package's `replay.runs.bench_lcs.export_keys`), and its sidecar."""
    from replay.runs.bench_lcs import export_keys

    t0 = time.perf_counter()
    written = export_keys(trace_dir, out)
    meta = {
        "trace": str(trace_dir.resolve()),
        "manifest_sha256": _manifest_sha256(trace_dir),
        "requests": written.requests,
        "distinct_key_space": written.key_space_rows,
        "format": KEY_FORMAT,
        "key": "offsets[table] + row",
        "seconds": round(time.perf_counter() - t0, 3),
    }
    _sidecar(out).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def export_is_current(trace_dir: Path, out: Path) -> bool:
    """True when `out` holds the export of this trace (sidecar and size agree)."""
    try:
        meta = json.loads(_sidecar(out).read_text())
        size = out.stat().st_size
    except (OSError, ValueError):
        return False
    return (
        meta.get("manifest_sha256") == _manifest_sha256(trace_dir)
        and meta.get("format") == KEY_FORMAT
        and size == KEY_BYTES * int(meta.get("requests", -1))
    )


# -- libCacheSim ----------------------------------------------------------------------------
def _lcs_reader(lcs: Any, path: Path) -> Any:
    params = lcs.ReaderInitParam(binary_fmt_str=KEY_FORMAT, ignore_obj_size=True)
    params.obj_id_field = 1  # 1-based field index in the format string
    return lcs.TraceReader(str(path), lcs.TraceType.BIN_TRACE, params)


def _lcs_lru(lcs: Any, capacity: int) -> Any:
    # cache_size is in bytes; objects have size 1 and no metadata is charged, so the
    # cache holds exactly `capacity` objects
    return lcs.LRU(capacity, consider_obj_metadata=False)


def run_lcs(path: Path, capacity: int) -> dict[str, Any]:
    """Simulate libCacheSim's LRU of `capacity` objects over the key file `path`."""
    if capacity < 1:
        raise SystemExit("--capacity must be at least 1")
    t_import = time.perf_counter()
    import libcachesim as lcs

    t_setup = time.perf_counter()
    size = path.stat().st_size
    if size % KEY_BYTES:
        raise SystemExit(f"{path}: size {size} is not a multiple of {KEY_BYTES}")
    reader = _lcs_reader(lcs, path)
    requests = int(reader.get_num_of_req())
    if requests != size // KEY_BYTES:
        raise SystemExit(f"{path}: libCacheSim counts {requests} requests, file has {size // 8}")
    cache = _lcs_lru(lcs, capacity)
    t_sim = time.perf_counter()
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    t_end = time.perf_counter()
    misses = round(miss_ratio * requests)
    sim = t_end - t_sim
    return {
        "tool": "libcachesim",
        "version": str(lcs.__version__),
        "policy": "LRU",
        "capacity": capacity,
        "requests": requests,
        "misses": misses,
        "miss_ratio": misses / requests if requests else 0.0,
        "seconds": round(sim, 4),  # in-process simulation (c_process_trace) only
        "requests_per_s": round(requests / sim) if sim > 0 else None,
        "import_seconds": round(t_setup - t_import, 4),
        "setup_seconds": round(t_sim - t_setup, 4),
        "in_process_seconds": round(t_end - _T0, 4),  # from script import to the end
        "objects_cached": int(cache.get_n_obj()),
        "bytes_occupied": int(cache.get_occupied_byte()),
    }


# -- verification against a plain LRU -------------------------------------------------------
def ordered_dict_lru_misses(keys: Iterable[int], capacity: int) -> int:
    """Misses of an LRU holding `capacity` keys: insert on miss, evict least recent."""
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for key in keys:
        if key in cache:
            cache.move_to_end(key)
        else:
            misses += 1
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return misses


def verify(
    bin_path: Path | None, requests: int, distinct: int, capacities: Sequence[int], seed: int
) -> bool:
    """libCacheSim's LRU miss counts and occupancy against `ordered_dict_lru_misses`."""
    import libcachesim as lcs
    import numpy as np

    if bin_path is not None:
        keys = np.fromfile(bin_path, dtype="<u8", count=requests)
        source = f"first {len(keys):,} keys of {bin_path}"
    else:
        rng = np.random.default_rng(seed)
        rank = np.minimum(rng.zipf(1.2, requests) - 1, distinct - 1).astype(np.uint64)
        keys = rank * np.uint64(2_654_435_761) % np.uint64(1 << 40)  # rank 0 -> key 0
        source = f"{requests:,} synthetic zipf(1.2) keys over {distinct:,} ids"
    key_list = [int(k) for k in keys]
    n_distinct = len(set(key_list))
    print(f"stream: {source}, {n_distinct:,} distinct, max key {max(key_list):,}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.bin"
        keys.astype("<u8").tofile(path)
        reader = _lcs_reader(lcs, path)
        first = reader.read_one_req()
        if int(first.obj_id) != key_list[0] or int(first.obj_size) != 1:
            print(f"reader mismatch: first request {first.obj_id}/{first.obj_size}")
            ok = False
        for capacity in capacities:
            cache = _lcs_lru(lcs, capacity)
            miss_ratio, _ = cache.process_trace(reader)
            lcs_misses = round(miss_ratio * len(key_list))
            ref = ordered_dict_lru_misses(key_list, capacity)
            full = min(capacity, n_distinct)
            same = lcs_misses == ref and cache.get_n_obj() == full
            ok &= same
            # the off-by-one trap: would capacity C - 1 or C + 1 have been told apart?
            near = [
                ordered_dict_lru_misses(key_list, c)
                for c in (capacity - 1, capacity + 1)
                if 1 <= c <= n_distinct
            ]
            print(
                f"capacity {capacity:>9,}: libCacheSim {lcs_misses:>9,} misses, "
                f"OrderedDict {ref:>9,}, objects cached {cache.get_n_obj():,} "
                f"(bytes {cache.get_occupied_byte():,}); C±1 would give "
                f"{', '.join(f'{m:,}' for m in near) or '-'}  {'OK' if same else 'MISMATCH'}"
            )
    # the metadata trap, shown once: charging per-object metadata shrinks the object count
    small = [c for c in capacities if c < n_distinct]
    if small:
        cap = max(small)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "keys.bin"
            keys.astype("<u8").tofile(path)
            md = lcs.LRU(cap, consider_obj_metadata=True)
            md.process_trace(_lcs_reader(lcs, path))
        print(
            f"(with consider_obj_metadata=True a cache_size of {cap:,} would hold only "
            f"{md.get_n_obj():,} objects; not used here)"
        )
    print("verify:", "OK" if ok else "FAILED")
    return ok


# -- compare --------------------------------------------------------------------------------
def _default_bin(trace_dir: Path) -> Path:
    tag = hashlib.sha256(str(trace_dir.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"libcachesim-keys-{trace_dir.name}-{tag}.bin"


def _timed(cmd: Sequence[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def _replay_available(replay_cmd: Sequence[str]) -> str | None:
    """None when `replay run` exists, else why not."""
    try:
        proc = subprocess.run([*replay_cmd, "run", "--help"], capture_output=True, text=True)
    except OSError as exc:
        return f"{shlex.join(replay_cmd)}: cannot start ({exc})"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return f"`{shlex.join(replay_cmd)} run` is not available yet ({tail[0].strip()})"
    return None


def _stats(times: list[float], requests: int) -> dict[str, float]:
    best, med = min(times), statistics.median(times)
    return {
        "runs_s": [round(t, 3) for t in times],
        "min_s": best,
        "median_s": med,
        "mreq_per_s_min": requests / best / 1e6,
        "mreq_per_s_median": requests / med / 1e6,
    }


def compare(
    trace_dir: Path,
    capacities: Sequence[int],
    bin_path: Path,
    repeat: int,
    lcs_python: str,
    replay_cmd: Sequence[str],
    keep_out: Path | None,
    warm_up: bool = False,
    run_extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Interleaved whole-process timings. `warm_up` runs each command once, untimed,
    right before each timed run of it (both tools alike): on a VM whose balloon driver
    reports freed memory to the host (virtio-balloon free page reporting), the first
    memory-hungry process after a few idle seconds pays host page faults for its fresh
    memory, which the untimed run absorbs."""
    if not (trace_dir / "manifest.json").is_file():
        raise SystemExit(f"{trace_dir}: not a trace folder (no manifest.json)")
    probe = subprocess.run([lcs_python, "-c", "import libcachesim"], capture_output=True)
    if probe.returncode != 0:
        raise SystemExit(
            f"{lcs_python} cannot import libcachesim: install it (pip install libcachesim) "
            "or pass --lcs-python PATH_TO_A_PYTHON_THAT_HAS_IT"
        )
    if export_is_current(trace_dir, bin_path):
        print(f"using the existing export {bin_path}")
    else:
        meta = export(trace_dir, bin_path)
        print(
            f"exported {meta['requests']:,} keys to {bin_path} in {meta['seconds']:.1f} s "
            f"({meta['requests'] / max(meta['seconds'], 1e-9) / 1e6:.1f} M keys/s)"
        )
    requests = int(json.loads(_sidecar(bin_path).read_text())["requests"])
    why_not = _replay_available(replay_cmd)
    if why_not:
        print(f"NOTE: {why_not}; timing libCacheSim only", file=sys.stderr)

    results: dict[str, Any] = {
        "trace": str(trace_dir),
        "requests": requests,
        "warm_up": warm_up,
        "replay_run_args": list(run_extra),
        "rows": [],
    }
    for capacity in capacities:
        lcs_times: list[float] = []
        replay_times: list[float] = []
        lcs_runs: list[dict[str, Any]] = []
        replay_misses: list[int] = []
        lcs_cmd = [
            lcs_python,
            str(Path(__file__).resolve()),
            "run",
            str(bin_path),
            "--capacity",
            str(capacity),
        ]
        for _ in range(repeat):  # interleaved, so background load hits both alike
            if warm_up:
                _timed(lcs_cmd)
            seconds, proc = _timed(lcs_cmd)
            if proc.returncode != 0:
                raise SystemExit(f"libCacheSim run failed:\n{proc.stdout}{proc.stderr}")
            lcs_runs.append(json.loads(proc.stdout))
            lcs_times.append(seconds)
            if why_not:
                continue
            with tempfile.TemporaryDirectory(prefix="replay-hbm-lru-") as tmp:
                out = keep_out / f"hbm-lru-{capacity}" if keep_out else Path(tmp) / "run"
                run_cmd = [
                    *replay_cmd,
                    "run",
                    str(trace_dir),
                    "--system",
                    "hbm-lru",
                    "--set",
                    f"policy.capacity_rows={capacity}",
                    "--out",
                    str(out),
                    "--force",
                    *run_extra,
                ]
                if warm_up:
                    _timed(run_cmd)
                seconds, proc = _timed(run_cmd)
                if proc.returncode != 0:
                    raise SystemExit(
                        f"replay run failed (rc {proc.returncode}):\n{proc.stdout}{proc.stderr}"
                    )
                summary = json.loads((out / "summary.json").read_text())
                replay_misses.append(int(summary["policy"]["misses"]))
                replay_times.append(seconds)
        lcs_misses = {r["misses"] for r in lcs_runs}
        row: dict[str, Any] = {
            "capacity": capacity,
            "libcachesim": {
                **_stats(lcs_times, requests),
                "misses": lcs_runs[0]["misses"],
                "miss_ratio": lcs_runs[0]["miss_ratio"],
                "sim_seconds_min": min(r["seconds"] for r in lcs_runs),
                "version": lcs_runs[0]["version"],
                "consistent": len(lcs_misses) == 1,
            },
        }
        if replay_times:
            row["replay"] = {
                **_stats(replay_times, requests),
                "misses": replay_misses[0],
                "consistent": len(set(replay_misses)) == 1,
            }
            row["speed_ratio_min"] = (
                row["replay"]["mreq_per_s_min"] / row["libcachesim"]["mreq_per_s_min"]
            )
            row["misses_identical"] = lcs_misses == set(replay_misses)
        results["rows"].append(row)
    results["replay_unavailable"] = why_not
    _print_table(results, repeat)
    return results


def _print_table(results: dict[str, Any], repeat: int) -> None:
    print(
        f"\n{results['requests']:,} requests; whole-process wall time, {repeat} runs each"
        f"{', each after an untimed warm-up run' if results.get('warm_up') else ''} "
        "(M req/s from the min / the median run)"
    )
    head = (
        f"{'capacity':>10} {'tool':<12} {'misses':>12} {'miss ratio':>10} "
        f"{'min s':>7} {'median s':>8} {'M req/s':>15} {'sim-only':>9}"
    )
    print(head)
    print("-" * len(head))
    for row in results["rows"]:
        tools = [("libcachesim", row["libcachesim"])]
        if "replay" in row:
            tools.append(("replay", row["replay"]))
        for name, r in tools:
            sim = (
                f"{results['requests'] / r['sim_seconds_min'] / 1e6:8.2f}M"
                if "sim_seconds_min" in r
                else ""
            )
            ratio = r.get("miss_ratio", r["misses"] / results["requests"])
            print(
                f"{row['capacity']:>10,} {name:<12} {r['misses']:>12,} {ratio:>10.4f} "
                f"{r['min_s']:>7.2f} {r['median_s']:>8.2f} "
                f"{r['mreq_per_s_min']:>6.2f} / {r['mreq_per_s_median']:<6.2f} {sim:>9}"
            )
        if "replay" in row:
            print(
                f"{'':>10} replay's requests/s = {row['speed_ratio_min']:.2f}x libCacheSim's "
                "(min runs); misses "
                f"{'IDENTICAL' if row['misses_identical'] else 'DIFFER'}"
            )
    if results.get("replay_unavailable"):
        print(f"(replay not timed: {results['replay_unavailable']})")


# -- command line ---------------------------------------------------------------------------
def _default_replay_cmd() -> list[str]:
    # the `replay` of the environment running this script first: a PATH lookup can find
    # a pyenv shim (a shell script that costs tens of ms per start) or another install
    beside = Path(sys.executable).parent / "replay"
    if beside.exists():
        return [str(beside)]
    exe = shutil.which("replay")
    if exe:
        return [exe]
    return [sys.executable, "-m", "replay"]


def _default_lcs_python() -> str:
    if importlib.util.find_spec("libcachesim") is not None:
        return sys.executable
    venv = Path("/tmp/lcs-venv/bin/python")
    return str(venv) if venv.exists() else sys.executable


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="write a trace's flat keys as uint64 for libCacheSim")
    p.add_argument("trace_dir", type=Path)
    p.add_argument("out", type=Path)

    p = sub.add_parser("run", help="libCacheSim LRU over an exported key file; prints JSON")
    p.add_argument("bin", type=Path)
    p.add_argument("--capacity", type=int, required=True, help="cache size in objects (rows)")

    p = sub.add_parser("verify", help="libCacheSim LRU == an OrderedDict LRU, exactly")
    p.add_argument("--bin", type=Path, default=None, help="use the first keys of an export")
    p.add_argument("--requests", type=int, default=300_000)
    p.add_argument("--distinct", type=int, default=50_000, help="synthetic key ids")
    p.add_argument(
        "--capacity",
        type=int,
        action="append",
        default=None,
        help="repeatable (default: 1 2 3 100 1000 10000 and > distinct keys)",
    )
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("compare", help="time libCacheSim and `replay run` as whole processes")
    p.add_argument("trace_dir", type=Path)
    p.add_argument(
        "--capacity",
        type=int,
        action="append",
        required=True,
        help="cache size in rows; repeatable",
    )
    p.add_argument(
        "--bin",
        type=Path,
        default=None,
        help="key file (default: in the temp dir; reused while current)",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--lcs-python",
        default=None,
        help="python that has libcachesim (default: this one, else /tmp/lcs-venv)",
    )
    p.add_argument(
        "--replay",
        default=None,
        help="replay command line (default: `replay` on PATH, else python -m replay)",
    )
    p.add_argument("--keep-out", type=Path, default=None, help="keep replay's run folders here")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument(
        "--run-args",
        default="",
        help="more `replay run` options, e.g. '--no-inspect' (default: none)",
    )
    p.add_argument(
        "--warm-up",
        action="store_true",
        help="run each command once, untimed, right before each timed run of it",
    )

    args = parser.parse_args(argv)
    if args.command == "export":
        meta = export(args.trace_dir, args.out)
        print(json.dumps(meta))
    elif args.command == "run":
        print(json.dumps(run_lcs(args.bin, args.capacity)))
    elif args.command == "verify":
        caps = args.capacity or [1, 2, 3, 100, 1000, 10_000, 10 * args.distinct]
        return 0 if verify(args.bin, args.requests, args.distinct, caps, args.seed) else 1
    elif args.command == "compare":
        if args.repeat < 1:
            parser.error("--repeat must be at least 1")
        replay_cmd = shlex.split(args.replay) if args.replay else _default_replay_cmd()
        results = compare(
            args.trace_dir,
            args.capacity,
            args.bin or _default_bin(args.trace_dir),
            args.repeat,
            args.lcs_python or _default_lcs_python(),
            replay_cmd,
            args.keep_out,
            args.warm_up,
            shlex.split(args.run_args),
        )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
