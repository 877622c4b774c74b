"""`replay export torchrec-plan PLAN_DIR --out FILE.json`: a cluster plan's sharding as
TorchRec's `ShardingPlan`, in the JSON form `replay.torchrec_sharding_plan` loads
(`replay/system/torchrec_plan.py`). A plan TorchRec's training path would not execute as
planned (`torchrec_executable: false` in its `sharding.json`) is refused in one line.

`replay export tbe-config --workload W --out FILE.json`: a workload as FBGEMM's
`TBEDataConfig` (`replay.workload.tbe_config`), which FBGEMM's TBE benchmarks generate
requests from. Each file is written whole or not at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from replay.cli.app import app, shown

export_app = typer.Typer(
    help="Write a plan's answers in another tool's format.", no_args_is_help=True
)
app.add_typer(export_app, name="export")


@export_app.command("torchrec-plan")
def export_torchrec_plan_command(
    plan_dir: Annotated[
        Path,
        typer.Argument(
            metavar="PLAN_DIR",
            help="A cluster plan or run folder (its sharding.json), or a sharding.json.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="FILE", help="The JSON file to write."),
    ],
    module: Annotated[
        str,
        typer.Option(
            metavar="PATH",
            help="The module path of the EmbeddingBagCollection in the model that "
            "DistributedModelParallel shards (e.g. sparse_arch.embedding_bag_collection; "
            "default: the model is the collection).",
        ),
    ] = "",
    device: Annotated[
        str,
        typer.Option(metavar="DEVICE", help="The compute device of the shards' placements."),
    ] = "cuda",
    kernel: Annotated[
        str,
        typer.Option(
            metavar="KERNEL",
            help="TorchRec's compute kernel of the sharded tables (data-parallel ones: dense).",
        ),
    ] = "fused",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing FILE.")] = False,
) -> None:
    """Write the plan's sharding as TorchRec's ShardingPlan (JSON) for DistributedModelParallel."""
    from replay.errors import OutputError
    from replay.system.torchrec_plan import (
        SHARDING_FILE,
        placement_of,
        torchrec_plan_document,
    )

    source = plan_dir / SHARDING_FILE if plan_dir.is_dir() else plan_dir
    if out.resolve() in (source.resolve(), plan_dir.resolve()):
        raise OutputError(f"{out}: is the input {source}; write the output elsewhere")
    _check_out_file(out, force)
    placement = placement_of(plan_dir)
    document = torchrec_plan_document(
        placement, compute_device=device, module_path=module, compute_kernel=kernel
    )
    _write_json(out, document, make_folders=False)
    types: dict[str, int] = {}
    for e in placement.plan.tables:
        types[e.type] = types.get(e.type, 0) + 1
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(types.items()))
    typer.echo(
        f"wrote {shown(out, markup=False)}: TorchRec's ShardingPlan of {len(placement.tables)} "
        f"tables ({kinds}) on {placement.world} GPUs ({placement.nodes} nodes x "
        f"{placement.gpus_per_node}), module {module or '(the model)'!r}; load it with "
        f"replay.torchrec_sharding_plan({str(out)!r})"
    )


@export_app.command("tbe-config")
def export_tbe_config_command(
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            metavar="PRESET_OR_SPEC",
            help="The workload preset or TOML spec to write.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="FILE", help="The JSON file to write."),
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing FILE.")] = False,
) -> None:
    """Write a workload as FBGEMM's TBEDataConfig (JSON), for FBGEMM's TBE benchmarks."""
    from replay.workload.generator import resolve_workload
    from replay.workload.tbe_config import export_notes, tbe_config_from_spec

    _check_out_file(out, force)
    spec = resolve_workload(workload)
    document = tbe_config_from_spec(spec)
    _write_json(out, document, make_folders=True)
    typer.echo(
        f"wrote {shown(out, markup=False)}: FBGEMM's TBEDataConfig of {spec.name!r}, "
        f"{document['T']} features on {len(spec.tables)} tables, batch {spec.batch_size}; "
        "load it with fbgemm_gpu.tbe.bench.TBEDataConfig.from_json(open(FILE).read())"
    )
    for note in export_notes(spec):
        typer.echo(f"note: {shown(note, markup=False)}")


def _check_out_file(out: Path, force: bool) -> None:
    """An output FILE that may be written: not a folder, not there unless `force`, and
    never anything but a regular file replaced (a FIFO, a device, a socket)."""
    from replay.errors import OutputError

    if out.is_dir():
        raise OutputError(f"{out}: is a folder, not a file")
    if (out.exists() or out.is_symlink()) and not force:
        raise OutputError(f"{out}: already exists (use --force to replace it)")
    if out.exists() and not out.is_file():  # a FIFO, a device, a socket: never replaced
        raise OutputError(f"{out}: is not a regular file; write the output elsewhere")


def _write_json(out: Path, document: object, *, make_folders: bool) -> None:
    """`document` as JSON in `out`, whole or not at all (a temporary name, then renamed);
    with `make_folders`, the missing folders above it too, removed again if it fails."""
    from replay.errors import OutputError

    made = []  # the folders this command creates, innermost first: removed if it fails
    folder = out.parent
    while make_folders and not (folder.exists() or folder.is_symlink()):
        made.append(folder)
        folder = folder.parent
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        for each in reversed(made):
            each.mkdir()
        tmp.write_text(json.dumps(document, indent=2) + "\n")
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        for each in made:
            if each.exists():
                each.rmdir()
        raise OutputError(f"{out}: cannot write ({exc.strerror or exc})") from None
