"""`replay.record`: the trace of a real PyTorch training job, from forward hooks.

    with replay.record(model, out="traces/mine", optimizer=opt) as rec:
        for batch in loader:
            loss = loss_fn(model(batch), ...)
            loss.backward()
            opt.step()

What is recorded, and the assumptions:

- **Tables.** Every `torch.nn.EmbeddingBag` and `torch.nn.Embedding` in `model` (a module
  used twice is one table: `named_modules` lists it once), and every TorchRec
  `EmbeddingBagCollection` / `EmbeddingCollection` and their sharded forms under
  `DistributedModelParallel` (any module holding TorchRec's `_embedding_bag_configs` or
  `_embedding_configs`): one table per config (`name`, `num_embeddings`, `embedding_dim`),
  the modules inside a collection not counted again. A plain module's table is named by
  its path in the model (`emb.3`); a TorchRec table by its config's name (prefixed with
  the collection's path where two collections use one name). A table whose weight does
  not require gradients is frozen (no updates).
- **Lookups.** A forward pre-hook copies each lookup's ids (`input` of a plain module,
  flattened; a `KeyedJaggedTensor`'s values per feature, weighted or not) in the order the
  module looks them up: TorchRec's collections go table by table and, inside a table,
  feature by feature in the config's `feature_names` order (TorchRec's own loop in
  `EmbeddingBagCollection.forward`), so two features sharing one table give one table's
  lookups, the first feature's first. A KJT feature that no table reads is refused
  (TorchRec would silently ignore it).
- **Batches.** A batch is one call of `model` with gradients enabled (evaluation under
  `torch.no_grad()` is not recorded); lookups outside such a call are ignored. A call that
  raises records nothing. Its size: the largest bag count of its lookups (`offsets`, the
  KJT's stride, or the first dimension of a 2-D input).
- **Steps.** With `optimizer`, each `optimizer.step()` (a step post-hook, or a wrapper of
  `step` for optimizers without hooks); without, each `rec.step()`. A step's update set is
  the union of the batches since the previous step (`replay.trace.record_writer`).
- **Ranks.** Under `torch.distributed`, each rank records the ids its own model's input
  holds (its part of the global batch, global row ids, before TorchRec's input
  distribution) and the manifest names the rank; `replay record merge` joins the ranks'
  traces (`replay.trace.record_merge`).
- **Cost.** On the training's thread: one copy of each lookup's ids (a GPU tensor is
  copied to the host, which waits for the GPU) and a queue put per batch; sorting, update
  sets, encoding and writing run on a writer thread (`replay.trace.record_writer`).

Interrupts: an exception (Ctrl-C's KeyboardInterrupt included) leaving the block keeps the
batches completed so far as a valid shorter trace and is raised again; an error of the
recording itself (an id outside its table, a KJT feature without a table) removes what
was written. torch is imported only
inside the functions here (the rest of replay does not need it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from replay.errors import InputError, ReplayError
from replay.trace.record_writer import Part, RecordedTable, RecordWriter

_CONFIG_ATTRS = ("_embedding_bag_configs", "_embedding_configs")


class _Collection:
    """A TorchRec collection: its features' tables (global indices) in TorchRec's order."""

    def __init__(self, path: str, features: dict[str, int], order: list[tuple[int, str]]) -> None:
        self.path = path
        self.features = features
        self.order = order  # (table, feature) in the order TorchRec looks them up


def _configs(module: Any) -> list[Any] | None:
    for attr in _CONFIG_ATTRS:
        configs = getattr(module, attr, None)
        if isinstance(configs, list | tuple) and configs:
            return list(configs)
    return None


def discover(model: Any) -> tuple[list[RecordedTable], list[tuple[Any, Any]]]:
    """The model's tables and, per hooked module, what its lookups mean: a table index
    for a plain module, a `_Collection` for a TorchRec one."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise InputError(f"replay.record needs a torch.nn.Module, not {type(model).__name__}")
    found: list[tuple[str, Any, list[Any] | None]] = []
    inside: list[str] = []
    for path, module in model.named_modules():
        if any(path == p or path.startswith(p + ".") or p == "" for p in inside):
            continue
        configs = _configs(module)
        if configs is not None:
            found.append((path, module, configs))
            inside.append(path)
        elif isinstance(module, torch.nn.EmbeddingBag | torch.nn.Embedding):
            found.append((path, module, None))
    if not found:
        raise InputError(
            f"{type(model).__name__}: no embedding modules to record (replay.record records "
            "torch.nn.EmbeddingBag, torch.nn.Embedding and TorchRec's embedding collections)"
        )
    names = [c.name for _, _, configs in found if configs is not None for c in configs]
    tables: list[RecordedTable] = []
    targets: list[tuple[Any, Any]] = []
    for path, module, configs in found:
        if configs is None:
            weight = module.weight
            tables.append(
                RecordedTable(
                    name=path or type(module).__name__,
                    rows=int(module.num_embeddings),
                    dim=int(module.embedding_dim),
                    frozen=not weight.requires_grad,
                )
            )
            targets.append((module, len(tables) - 1))
            continue
        features: dict[str, int] = {}
        order: list[tuple[int, str]] = []
        for config in configs:
            name = config.name if names.count(config.name) == 1 else f"{path}.{config.name}"
            tables.append(
                RecordedTable(
                    name=name,
                    rows=int(config.num_embeddings),
                    dim=int(config.embedding_dim),
                    frozen=_frozen(module, config.name),
                )
            )
            for feature in list(config.feature_names) or [config.name]:
                features[feature] = len(tables) - 1
                order.append((len(tables) - 1, feature))
        targets.append((module, _Collection(path, features, order)))
    return tables, targets


def _frozen(module: Any, table: str) -> bool:
    """A TorchRec table whose weight does not require gradients (unsharded collections;
    a sharded one's tables count as trained: TorchRec's fused optimizers update weights
    that autograd does not track)."""
    if type(module).__name__ not in ("EmbeddingBagCollection", "EmbeddingCollection"):
        return False
    for attr in ("embedding_bags", "embeddings"):
        held: Any = getattr(module, attr, None)  # None, or torch's ModuleDict, untyped here
        try:
            return not held[table].weight.requires_grad
        except (TypeError, KeyError, AttributeError):
            continue
    return False


def _ids(tensor: Any) -> np.ndarray:
    """A copy of a tensor's ids as a flat numpy array (the model may reuse its buffer)."""
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    return np.array(data.reshape(-1).numpy(), copy=True)


class Recorder:
    """`replay.record(...)`: a context manager that records while its block runs."""

    def __init__(
        self,
        model: Any,
        out: str | Path,
        optimizer: Any = None,
        *,
        force: bool = False,
        name: str | None = None,
    ) -> None:
        self.model = model
        self.out = Path(out)
        self.optimizer = optimizer
        self.force = force
        self.name = name or "recorded"
        self.tables, self._targets = discover(model)
        self._writer: RecordWriter | None = None
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._parts: list[Part] | None = None  # the open batch's lookups
        self._samples = 0
        self._failure: BaseException | None = None
        self.path: Path | None = None

    # -- the context manager ------------------------------------------------------------

    def __enter__(self) -> Recorder:
        import torch.distributed as dist

        source: dict[str, Any] = {"kind": "record"}
        if dist.is_available() and dist.is_initialized():
            source.update(rank=int(dist.get_rank()), world_size=int(dist.get_world_size()))
        self._writer = RecordWriter(
            self.out, self.tables, created_by="record", source=source, force=self.force
        )
        try:
            self._install()
        except BaseException:
            self._uninstall()
            self._writer.abort()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._uninstall()
        writer = self._writer
        assert writer is not None
        if self._failure is not None or (exc is not None and exc is writer.error):
            writer.abort()  # the recording's own error: nothing half-written
            if exc is None and self._failure is not None:
                raise self._failure  # caught in the block, but the recording is broken
            return
        if exc is not None and writer.batches == 0:
            writer.abort()
            return
        self.path = writer.close(workload_name=self.name)

    # -- the training's side --------------------------------------------------------------

    def step(self) -> None:
        """Mark an optimizer step (when `record` was given no optimizer)."""
        if self._writer is None:
            raise RuntimeError("rec.step() outside the recording's `with` block")
        self._writer.step()

    @property
    def batches(self) -> int:
        """Batches recorded so far."""
        return 0 if self._writer is None else self._writer.batches

    def _install(self) -> None:
        import torch

        model = self.model
        forward = model.__dict__.get("forward")
        inner = model.forward
        # the model itself a collection or a table: its lookups are read inside the
        # batch its call opens (its pre-hooks run before its forward opens it)
        own: Callable[..., None] | None = None

        def recorded_forward(*args: Any, **kwargs: Any) -> Any:
            if self._parts is not None or not torch.is_grad_enabled():
                return inner(*args, **kwargs)  # a nested call, or evaluation
            self._parts, self._samples = [], 0
            try:
                if own is not None:
                    own(model, args, kwargs)
                result = inner(*args, **kwargs)
            except BaseException:
                self._parts = None
                raise
            parts, self._parts = self._parts, None
            assert self._writer is not None
            self._writer.add_batch(parts, self._samples)
            return result

        model.forward = recorded_forward
        self._restore.append(
            (lambda: model.__dict__.pop("forward", None))
            if forward is None
            else (lambda: setattr(model, "forward", forward))
        )
        for module, what in self._targets:
            hook = self._collection_hook(what) if isinstance(what, _Collection) else None
            if hook is None:
                hook = self._plain_hook(int(what))
            if module is model:
                own = hook
                continue
            self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        if self.optimizer is not None:
            self._hook_optimizer(self.optimizer)

    def _uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()

    def _hook_optimizer(self, optimizer: Any) -> None:
        register = getattr(optimizer, "register_step_post_hook", None)
        if callable(register) and _hooks_fire(optimizer):
            self._handles.append(register(lambda *_: self.step()))
            return
        step = optimizer.__dict__.get("step")
        inner = optimizer.step

        def recorded_step(*args: Any, **kwargs: Any) -> Any:
            result = inner(*args, **kwargs)
            self.step()
            return result

        optimizer.step = recorded_step
        self._restore.append(
            (lambda: optimizer.__dict__.pop("step", None))
            if step is None
            else (lambda: setattr(optimizer, "step", step))
        )

    def _fail(self, error: ReplayError) -> ReplayError:
        self._failure = error
        return error

    def _plain_hook(self, table: int) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._parts is None:
                return
            ids = args[0] if args else kwargs["input"]
            offsets = args[1] if len(args) > 1 else kwargs.get("offsets")
            if offsets is not None:
                bags = int(offsets.numel()) - int(bool(getattr(module, "include_last_offset", 0)))
            else:
                bags = int(ids.shape[0]) if ids.dim() >= 1 else 1
            self._samples = max(self._samples, bags)
            self._parts.append((table, _ids(ids)))

        return hook

    def _collection_hook(self, collection: _Collection) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._parts is None:
                return
            kjt = args[0] if args else next(iter(kwargs.values()), None)
            if kjt is None or not all(
                hasattr(kjt, a) for a in ("keys", "values", "length_per_key")
            ):
                raise self._fail(
                    InputError(
                        f"{collection.path or 'the model'}: its input is a "
                        f"{type(kjt).__name__}, not a KeyedJaggedTensor"
                    )
                )
            keys = list(kjt.keys())
            unknown = [k for k in keys if k not in collection.features]
            if unknown:
                raise self._fail(
                    InputError(
                        f"{collection.path or 'the model'}: KeyedJaggedTensor feature "
                        f"{unknown[0]!r} has no table (the tables' features: "
                        f"{', '.join(sorted(collection.features))})"
                    )
                )
            values = _ids(kjt.values())
            bounds = np.concatenate([[0], np.cumsum(kjt.length_per_key())]).astype(np.int64)
            at = {k: i for i, k in enumerate(keys)}
            self._samples = max(self._samples, int(kjt.stride()))
            for table, feature in collection.order:
                i = at.get(feature)
                if i is not None:
                    self._parts.append((table, values[bounds[i] : bounds[i + 1]]))

        return hook


def _hooks_fire(optimizer: Any) -> bool:
    """Whether `optimizer.step` runs torch's step hooks (a subclass of
    `torch.optim.Optimizer` whose `step` torch wrapped; TorchRec's keyed optimizers that
    skip `Optimizer.__init__` do not)."""
    import torch

    step = type(optimizer).step
    return isinstance(optimizer, torch.optim.Optimizer) and hasattr(step, "hooked")


def record(
    model: Any,
    out: str | Path,
    optimizer: Any = None,
    *,
    force: bool = False,
    name: str | None = None,
) -> Recorder:
    """Record the lookups and update sets of `model`'s training as a trace folder `out`.

    Use as `with replay.record(model, out="traces/mine", optimizer=opt) as rec:` around
    the training loop; without `optimizer`, call `rec.step()` after each optimizer step.
    `force` replaces an existing trace in `out`; `name` is the workload's name in the
    manifest. Raises `InputError` for a model without embedding modules and
    `OutputError` for an `out` that holds other files (when the block starts).
    """
    return Recorder(model, out, optimizer, force=force, name=name)
