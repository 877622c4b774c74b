"""`replay presets --show NAME`: a preset as TOML one can copy, edit and pass back.

A system preset is written with every field resolved (its devices' numbers, its
`extends` merged, every default stated), so `--system FILE.toml` reads back the same
spec; the comments of the files it comes from (the preset's own, those it extends, the
devices.toml and clusters.toml entries it names) are kept beside the keys they annotate.
A cluster preset is a `[cluster]` table to paste into a system file; a workload preset is
`spec_to_toml`'s text for `--spec` (hot values included).
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from replay.errors import ConfigError, did_you_mean
from replay.workload.spec import toml_value

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*=\s*(.*)$")

# (table path, key or "" for the table itself) -> (comment lines above, trailing comment)
Comments = dict[tuple[str, str], tuple[list[str], str]]


def _trailing(rest: str) -> str:
    """The comment after a key's value (`# ...` outside a string), or ""."""
    in_string = None
    for i, c in enumerate(rest):
        if in_string:
            if c == "\\" and in_string == '"':
                continue
            if c == in_string:
                in_string = None
        elif c in "\"'":
            in_string = c
        elif c == "#":
            return rest[i + 1 :].strip()
    return ""


def file_comments(path: Path, rename: dict[str, str] | None = None) -> Comments:
    """The comments of a TOML file by the key or table they stand above or beside;
    `rename` maps a table path of the file to the one it becomes in the output."""
    rename = rename or {}
    out: Comments = {}
    table, above = "", []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if not stripped.lstrip("# ").startswith("---"):  # a file's section rule
                above.append(stripped[1:].strip())
            continue
        if not stripped:
            if table == "":
                above = []  # a file's header block stays with no key
            continue
        header = _HEADER.match(line)
        if header:
            table = rename.get(header.group(1), header.group(1))
            if above:
                out[(table, "")] = (above, "")
        else:
            key = _KEY.match(line)
            if key:
                trailing = _trailing(key.group(2))
                if above or trailing:
                    out[(table, key.group(1))] = (above, trailing)
        above = []
    return out


def _comment_lines(lines: list[str]) -> list[str]:
    return [f"# {c}".rstrip() for c in lines]


def write_tables(data: dict[str, Any], comments: Comments, where: str = "") -> list[str]:
    """`data` as TOML lines: plain keys first, then each nested table under its header,
    each line with its comments."""
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            continue
        above, trailing = comments.get((where, key), ([], ""))
        lines.extend(_comment_lines(above))
        text = f"{key} = {toml_value(value)}"
        lines.append(f"{text:<39} # {trailing}" if trailing else text)
    for key, value in data.items():
        if not isinstance(value, dict):
            continue
        path = f"{where}.{key}" if where else key
        if any(not isinstance(v, dict) for v in value.values()) or not value:
            lines.append("")
            lines.extend(_comment_lines(comments.get((path, ""), ([], ""))[0]))
            lines.append(f"[{path}]")
        lines.extend(write_tables(value, comments, path))
    return lines


def _preset_chain(name: str) -> list[str]:
    """The preset and those it extends, the base first."""
    from replay.system.presets import preset_data

    chain = [name]
    while True:
        parent = preset_data(chain[-1]).get("extends")
        if not isinstance(parent, str) or parent in chain:
            return chain[::-1]
        chain.append(parent)


def _keys_set(data: dict[str, Any], where: str = "") -> list[tuple[str, str]]:
    """(table path, key) of every value a preset file sets, as `Comments` keys them."""
    out: list[tuple[str, str]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            out.extend(_keys_set(value, f"{where}.{key}" if where else key))
        else:
            out.append((where, key))
    return out


def system_toml(name: str) -> str:
    """A system preset as TOML that `--system FILE.toml` reads back as the same spec."""
    from replay.engine.systems import resolve_system
    from replay.system.presets import CLUSTERS_FILE, PRESET_DIR, preset_data

    devices_file = PRESET_DIR.parent / "devices.toml"
    data = resolve_system(name).to_dict()
    comments: Comments = {}
    for preset in _preset_chain(name):
        raw = preset_data(preset)
        # a key this file sets replaces the one it extends, and so does its comment: the
        # base's "a 256 MiB cache budget" does not stand above a child's capacity of 0
        for key in _keys_set(raw):
            comments.pop(key, None)
        for kind in ("tiers", "links"):
            for part, entry in (raw.get(kind) or {}).items():
                if isinstance(entry, dict) and isinstance(entry.get("device"), str):
                    # another device: none of the old device's comments stand
                    for key in [k for k in comments if k[0] == f"{kind}.{part}"]:
                        del comments[key]
                    rename = {f"{kind}.{entry['device']}": f"{kind}.{part}"}
                    comments.update(
                        {k: v for k, v in file_comments(devices_file, rename).items()
                         if k[0] == f"{kind}.{part}"}
                    )  # fmt: skip
        cluster = raw.get("cluster")
        if isinstance(cluster, dict) and isinstance(cluster.get("preset"), str):
            comments.update(_cluster_comments(cluster["preset"], CLUSTERS_FILE))
        own = file_comments(PRESET_DIR / f"{preset}.toml")
        if ("", "extends") in own and ("", "name") not in own:
            # the file's header stands above `extends`, which the resolved spec drops
            own[("", "name")] = own.pop(("", "extends"))
        comments.update(own)
    failures = data.get("failures", {})
    if failures.get("mtbf_s") == 0.0:  # 0 is off: the file leaves the key out
        del failures["mtbf_s"]
        above = comments.get(("failures", ""), ([], ""))[0]
        note = "mtbf_s: off (no failures) unless given, e.g. mtbf_s = 21600.0 (6 h)"
        comments[("failures", "")] = ([*above, note], "")
    header = [
        f"system preset {name}, every field resolved (devices, extends, defaults);",
        "edit and pass back with --system FILE.toml",
    ]
    return "\n".join([*_comment_lines(header), *write_tables(data, comments)]) + "\n"


def _cluster_comments(name: str, path: Path) -> Comments:
    return {
        ("cluster", k[1]): v
        for k, v in file_comments(path, {name: "cluster"}).items()
        if k[0] == "cluster"
    }


def cluster_toml(name: str) -> str:
    """A cluster preset as a `[cluster]` table, every field given, for a system file."""
    from replay.system.presets import CLUSTERS_FILE, _clusters
    from replay.system.spec import build_cluster

    description = _clusters()[name].get("description", "")
    data = {"cluster": asdict(build_cluster({"preset": name}))}
    header = [
        f"cluster preset {name}: {description}",
        "paste into a system file (or --set cluster.preset=NAME); cluster.nodes is the job's",
    ]
    lines = write_tables(data, _cluster_comments(name, CLUSTERS_FILE))
    return "\n".join([*_comment_lines(header), *lines]) + "\n"


def workload_toml(name: str) -> str:
    """A workload preset as the TOML `--spec` reads back (hot values included)."""
    from replay.workload.presets import (
        DATASET_SAMPLES,
        DATASET_SAMPLES_SOURCE,
        META_2021_FILE,
        get_preset,
    )
    from replay.workload.spec import spec_to_toml

    spec = get_preset(name)
    header = [f"workload preset {name}: edit and pass back with --spec FILE.toml"]
    if name == "meta-2021":  # its file's own header: where the numbers come from
        header += ["", *file_comments_header(META_2021_FILE)]
    if name in DATASET_SAMPLES:
        header += [
            f"samples in one epoch, {DATASET_SAMPLES_SOURCE[name]}; for replay plan --epochs:",
            f"dataset_samples = {DATASET_SAMPLES[name]}",
        ]
    return "\n".join(_comment_lines(header)) + "\n" + spec_to_toml(spec)


def file_comments_header(path: Path) -> list[str]:
    """The comment block a TOML file opens with."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return lines


def preset_toml(name: str) -> str:
    """The TOML of a workload, system or cluster preset by name (in that order)."""
    from replay.system.presets import SYSTEM_PRESETS, cluster_presets
    from replay.workload.presets import PRESETS

    if name in PRESETS:
        return workload_toml(name)
    if name in SYSTEM_PRESETS:
        return system_toml(name)
    if name in cluster_presets():
        return cluster_toml(name)
    raise ConfigError(
        f"--show: unknown preset {name!r}"
        f"{did_you_mean(name, [*PRESETS, *SYSTEM_PRESETS, *cluster_presets()])} (workload: "
        f"{', '.join(PRESETS)}; system: "
        f"{', '.join(SYSTEM_PRESETS)}; cluster: {', '.join(cluster_presets())})"
    )
