"""The checkpoint-strategy plug-in interface, its registry and the shared timeline rules.

A strategy decides when checkpoints start, what they write, when they are durable and
how long training stalls (DESIGN section 6). It works in two steps:

1. `observe(batch_range, base_times)` during the replay, for strategies that need the
   update rows (`needs_updates`): they count distinct (table, row) pairs updated per
   interval in numba kernels (`replay.checkpoint.dirty`).
2. `run(timing)` after the first accounting pass, with each batch's failure-free time
   without checkpoints (`Timing`). It walks the checkpoints in order and returns a
   `CheckpointResult`: the stall per batch, the traffic per tier, one row per checkpoint
   (`checkpoints.parquet`) and the recovery points the failure model rolls back to.

Timeline conventions (all times on the failure-free timeline, seconds from the start):
- batch b runs base_b (compute + exposed embedding + other), plus the checkpoint stall
  attributed to it (`stall_s[b]`); batch b+1 starts when batch b (with its stall) ends.
- a checkpoint "after batch b" holds the state after b's optimizer step; it becomes
  ready at the end of b's base time plus any stall b already had before it.
- a recovery point is (durable_s, resume_s, restore_s): once durable, a failure can roll
  back to it; training resumes at the position where batch b+1 started (resume_s) and
  pays restart + restore (`failures.restart_s` + bytes read over the target's read
  bandwidth + its read latency).

State size (DESIGN section 6): Σ rows × (4 × dim + optimizer bytes per row) + 4 bytes per
dense parameter + the data-reader position (`READER_POSITION_BYTES`).

The path a checkpoint's bytes take (its traffic, added to the tiers' and links' bytes and
so to their energy) follows where the tables live (`tables_on_device`):
- on the training device (a cache's fast tier beside the GPU, or a static tier that is
  the device's): the state leaves the device, over `checkpoint.link` when one is set (d2h
  bytes), is staged in the snapshot tier (written there, read back by the persist) and
  written to the target; a synchronous write (Check-N-Run's `synchronous`) skips the
  staging for increments, as before. The device-side read of the copy is not counted.
- on the host side (a static tier across the lookup link, or pooled on the host or near
  memory: host DRAM, persistent memory, an SSD): the writer reads the rows in place from
  the tier that holds them (`home_tier_name`; a full checkpoint reads the whole table
  region sequentially, Σ rows × state bytes; an increment reads its scattered rows, each
  a whole number of the tier's accesses, as TrainingCXL's undo log does), stages them in
  a host-side volatile tier only when training goes on meanwhile (not `synchronous`), and
  writes the target. No device memory is touched and no link is crossed (the dense
  parameters' few MB aside, which `checkpoint.link` counts when set).
The default snapshot tier (`snapshot_tier_name`) is the first volatile tier that is not
the cache's and not the device's own memory (`TierSpec.on_device`): a snapshot is a copy
in host memory.

Write bandwidth of a checkpoint (`write_bw`): the target tier's write bandwidth, or
`drives` × `drive_write_bw_bytes_per_s` when drives are given; capped by `writers` ×
`writer_bw_bytes_per_s` when a per-writer cap is given, and by the link's d2h bandwidth
when `checkpoint.link` is set. A write of n bytes takes n / write_bw + the target's write
latency (one access: checkpoint writes are large and sequential).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from replay._registry import Registry
from replay.checkpoint.points import RecoveryPoints
from replay.checkpoint.ssd_store import Flush, cache_flush, ssd_backed
from replay.errors import ConfigError

if TYPE_CHECKING:
    from replay.system.spec import CheckpointSpec, SystemSpec, TierSpec
    from replay.trace.stream import BatchRange

NS = 1e-9
READER_POSITION_BYTES = 8  # one int64 sample offset per data reader
KINDS = ("full", "incremental", "log")


@dataclass(frozen=True)
class CheckpointContext:
    """What a strategy needs to know about the model and the system."""

    system: SystemSpec
    total_rows: int  # Σ rows over tables
    table_rows: np.ndarray  # int64 rows per table
    num_batches: int
    embedding_dim: int
    row_state_bytes: int  # 4 × dim + optimizer bytes per row
    dense_bytes: int  # 4 × dense parameters

    @property
    def spec(self) -> CheckpointSpec:
        return self.system.checkpoint

    @property
    def embedding_bytes(self) -> int:
        return self.total_rows * self.row_state_bytes

    @property
    def state_bytes(self) -> int:
        """Full state: embeddings with optimizer state, dense parameters, reader position."""
        return self.embedding_bytes + self.dense_bytes + READER_POSITION_BYTES

    def target(self) -> TierSpec:
        strategy = STRATEGIES[self.spec.strategy]
        return self.system.tier(strategy.target_name(self.system))

    def write_bw(self) -> float:
        ck = self.spec
        tier = self.target()
        bw = (
            ck.drives * ck.drive_write_bw_bytes_per_s
            if ck.drives > 0 and ck.drive_write_bw_bytes_per_s > 0
            else tier.write_bw_bytes_per_s
        )
        if ck.writer_bw_bytes_per_s > 0:
            bw = min(bw, ck.writers * ck.writer_bw_bytes_per_s)
        if ck.link:
            bw = min(bw, self.system.link(ck.link).d2h_bw_bytes_per_s)
        return bw

    def write_s(self, nbytes: float) -> float:
        """Seconds to write nbytes to the target (0 for nothing)."""
        if nbytes <= 0:
            return 0.0
        return nbytes / self.write_bw() + self.target().write_latency_ns * NS

    def read_s(self, nbytes: float) -> float:
        """Seconds to read nbytes back from the target at restore."""
        if nbytes <= 0:
            return 0.0
        tier = self.target()
        bw = tier.read_bw_bytes_per_s
        if self.spec.link:
            bw = min(bw, self.system.link(self.spec.link).h2d_bw_bytes_per_s)
        return nbytes / bw + tier.read_latency_ns * NS

    def restore_s(self, nbytes: float) -> float:
        return self.system.failures.restart_s + self.read_s(nbytes)

    @property
    def on_device(self) -> bool:
        """Whether the tables live on the training device (`tables_on_device`)."""
        return tables_on_device(self.system)

    def home_read_bytes(self, rows: int, *, full: bool) -> int:
        """Bytes a writer reading `rows` in place from the home tier moves there: the whole
        region sequentially for a full checkpoint, whole accesses per row otherwise."""
        if full:
            return rows * self.row_state_bytes
        granule = self.system.tier(home_tier_name(self.system)).access_bytes
        return rows * (-(-self.row_state_bytes // granule) * granule)

    def snapshot_tier(self) -> TierSpec:
        return self.system.tier(snapshot_tier_name(self.system))

    def flush(self) -> Flush | None:
        """An SSD-backed table's cache flush before each checkpoint (None: no flush)."""
        return cache_flush(self.system, self.total_rows, self.row_state_bytes)

    def snapshot_s(self, nbytes: float) -> float:
        """Seconds to copy nbytes into host memory (the snapshot), over checkpoint.link."""
        if nbytes <= 0:
            return 0.0
        tier = self.snapshot_tier()
        bw = tier.write_bw_bytes_per_s
        if self.spec.link:
            bw = min(bw, self.system.link(self.spec.link).d2h_bw_bytes_per_s)
        return nbytes / bw + tier.write_latency_ns * NS


def target_tier_name(system: SystemSpec) -> str:
    """checkpoint.target, or the system's first persistent tier ("" when it has none)."""
    if system.checkpoint.target:
        return system.checkpoint.target
    return next((t.name for t in system.tiers if t.persistent), "")


def snapshot_tier_name(system: SystemSpec) -> str:
    """checkpoint.snapshot_tier, or the first volatile tier that is neither the cache's nor
    the training device's own memory (a snapshot is a copy in host memory)."""
    if system.checkpoint.snapshot_tier:
        return system.checkpoint.snapshot_tier
    fast = system.policy.fast_tier
    return next(
        (t.name for t in system.tiers if not t.persistent and not t.on_device and t.name != fast),
        "",
    )


def home_tier_name(system: SystemSpec) -> str:
    """The tier that holds every row: the static tier, a cache's backing tier, or the
    store of an SSD-backed table (`replay.checkpoint.ssd_store`)."""
    p = system.policy
    if ssd_backed(system):
        return p.store_tier
    return p.tier if p.name == "static" else p.backing_tier


def tables_on_device(system: SystemSpec) -> bool:
    """Whether the embedding state a checkpoint copies lives on the training device.

    A cache's newest rows are in its fast tier beside the GPU (a dirty row there is newer
    than the backing tier's copy), so its state leaves the device. A static tier is the
    device's when it is marked `on_device`, or when GPU lookups reach it over no link
    (`replay.engine.account`: then the tier is beside the GPU). Any other static tier is
    on the host side (host DRAM or persistent memory, an SSD, a near-memory device), and
    so is an SSD-backed table's store, read after the caches are flushed into it."""
    p = system.policy
    if ssd_backed(system):
        return False
    if p.name != "static":
        return True
    tier = system.tier(p.tier)
    return tier.on_device or (system.lookup.location == "gpu" and not system.lookup.link)


@dataclass(frozen=True)
class Timing:
    """Per-batch times of the first accounting pass (no checkpoint), seconds."""

    base_s: np.ndarray  # compute + exposed embedding + other
    compute_s: np.ndarray
    forward_backward_s: np.ndarray  # base minus the optimizer step

    @property
    def num_batches(self) -> int:
        return len(self.base_s)


@dataclass
class CheckpointLog:
    """Rows of `checkpoints.parquet`, appended in order, plus per-batch traffic."""

    num_batches: int
    rows_: dict[str, list[Any]] = field(init=False)
    stall_s: np.ndarray = field(init=False)
    tier_write_bytes: dict[str, np.ndarray] = field(default_factory=dict)
    tier_read_bytes: dict[str, np.ndarray] = field(default_factory=dict)
    link_d2h_bytes: dict[str, np.ndarray] = field(default_factory=dict)

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "index",
        "kind",
        "batch",
        "rows",
        "bytes",
        "dense_bytes",
        "start_s",
        "durable_s",
        "stall_s",
        "restore_bytes",
        "retained_bytes",
    )

    def __post_init__(self) -> None:
        self.rows_ = {c: [] for c in self.COLUMNS}
        self.stall_s = np.zeros(self.num_batches)

    def add(self, **values: Any) -> None:
        assert values["kind"] in KINDS
        values["index"] = len(self.rows_["index"])
        for c in self.COLUMNS:
            self.rows_[c].append(values[c])

    def traffic(self, kind: str, name: str, batch: int, nbytes: float) -> None:
        """Checkpoint bytes moved at a tier ("write"/"read") or over a link ("d2h")."""
        table = {
            "write": self.tier_write_bytes,
            "read": self.tier_read_bytes,
            "d2h": self.link_d2h_bytes,
        }[kind]
        if name not in table:
            table[name] = np.zeros(self.num_batches, dtype=np.int64)
        table[name][min(max(batch, 0), self.num_batches - 1)] += int(nbytes)

    def columns(self) -> dict[str, np.ndarray]:
        dtypes = {"kind": object, "start_s": np.float64, "durable_s": np.float64}
        dtypes["stall_s"] = np.float64
        out = {}
        for c in self.COLUMNS:
            out[c] = np.asarray(self.rows_[c], dtype=dtypes.get(c, np.int64))
        return out


@dataclass(frozen=True)
class CheckpointResult:
    """What a strategy computed for one run."""

    log: CheckpointLog
    points: RecoveryPoints
    scratch_restore_s: float  # restart with nothing durable: from the start
    summary: dict[str, Any]  # strategy-specific extras for summary.json's checkpoint object

    @property
    def stall_s(self) -> np.ndarray:
        return self.log.stall_s


def points_from(durable: list[float], resume: list[float], restore: list[float]) -> RecoveryPoints:
    """Recovery points in durable order (stable: equal durable times keep their order)."""
    if not durable:
        return RecoveryPoints.empty()
    d = np.asarray(durable, dtype=np.float64)
    order = np.argsort(d, kind="stable")
    resume_arr = np.asarray(resume, dtype=np.float64)[order]
    # a later-durable point never resumes earlier than one before it
    return RecoveryPoints(
        durable_s=d[order],
        resume_s=np.maximum.accumulate(resume_arr),
        restore_s=np.asarray(restore, dtype=np.float64)[order],
    )


def schedule(spec: CheckpointSpec, base_s: np.ndarray, default_every: int = 0) -> np.ndarray:
    """Batches after which a checkpoint is taken: every `interval_batches`, else whenever
    `interval_s` of failure-free training time has passed since the last one, else every
    `default_every` batches (0: none)."""
    nb = len(base_s)
    every = spec.interval_batches or (0 if spec.interval_s > 0 else default_every)
    if every > 0:
        return np.arange(every - 1, nb, every, dtype=np.int64)
    if spec.interval_s <= 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(base_s)
    out = []
    since = 0.0
    b = 0
    while b < nb:
        # first batch whose end is interval_s past the last checkpoint
        b = int(np.searchsorted(ends, since + spec.interval_s * (1 - 1e-12), side="left"))
        if b >= nb:
            break
        out.append(b)
        since = float(ends[b])
        b += 1
    return np.asarray(out, dtype=np.int64)


def schedule_in_range(
    spec: CheckpointSpec,
    batch_start: int,
    batches: int,
    base_s: Callable[[], np.ndarray],
    state: dict[str, float],
) -> np.ndarray:
    """The same rule as `schedule`, one batch range at a time (for the streaming kernels):
    offsets of the batches of [batch_start, batch_start + batches) after which a
    checkpoint is taken. `base_s` (the range's batch times) is only called for
    `interval_s`; `state` carries the time since the last checkpoint between ranges."""
    if spec.interval_batches > 0:
        k = spec.interval_batches
        b = np.arange(batch_start, batch_start + batches, dtype=np.int64)
        return b[(b + 1) % k == 0] - batch_start
    if spec.interval_s <= 0:
        return np.zeros(0, dtype=np.int64)
    out = []
    since = state.get("since_s", 0.0)
    for i, t in enumerate(base_s()):
        since += float(t)
        if since >= spec.interval_s * (1 - 1e-12):
            out.append(i)
            since = 0.0
    state["since_s"] = since
    return np.asarray(out, dtype=np.int64)


class CheckpointStrategy(ABC):
    """A checkpoint strategy. Subclasses register with `@register_strategy(name)`."""

    name: ClassVar[str]
    needs_updates: ClassVar[bool] = False  # observe() is called for every batch range
    #: documented per-key state in bytes (memory besides the batches in flight)
    state_bytes_per_key: ClassVar[float] = 0

    def __init__(self, ctx: CheckpointContext) -> None:
        self.ctx = ctx

    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        """Validate the strategy's knobs against the system (a persistent target)."""
        name = target_tier_name(system)
        if not name:
            raise ConfigError(
                f"{where}.target: strategy {system.checkpoint.strategy!r} needs a persistent "
                "tier to write to, and the system has none (add one, e.g. an nvme tier)"
            )
        if not system.tier(name).persistent:
            raise ConfigError(f"{where}.target: tier {name!r} is not persistent")

    @classmethod
    def target_name(cls, system: SystemSpec) -> str:
        """The tier checkpoints go to."""
        return target_tier_name(system)

    @classmethod
    def check_interval(cls, system: SystemSpec, where: str) -> None:
        ck = system.checkpoint
        if ck.interval_batches <= 0 and ck.interval_s <= 0:
            raise ConfigError(
                f"{where}.interval_batches: strategy {ck.strategy!r} needs "
                "interval_batches > 0 or interval_s > 0"
            )
        if ck.interval_batches > 0 and ck.interval_s > 0:
            raise ConfigError(f"{where}: give interval_batches or interval_s, not both")

    def observe(  # noqa: B027 - optional hook
        self, batch_range: BatchRange, base_s: Callable[[], np.ndarray]
    ) -> None:
        """Called in order for every batch range when `needs_updates`."""

    @abstractmethod
    def run(self, timing: Timing) -> CheckpointResult:
        """Walk the checkpoints on the failure-free timeline."""


class FullStateStrategy(CheckpointStrategy):
    """Writes the full state on the schedule; `overlap` picks the stall rule of
    `full_checkpoints` (sync-full: False, fastpersist: True)."""

    overlap: ClassVar[bool] = False

    @classmethod
    def check_spec(cls, system: SystemSpec, where: str) -> None:
        super().check_spec(system, where)
        cls.check_interval(system, where)

    def run(self, timing: Timing) -> CheckpointResult:
        batches = schedule(self.ctx.spec, timing.base_s)
        return full_checkpoints(self.ctx, timing, batches, overlap=self.overlap)


# the built-in strategies, each in the module `replay.checkpoint` imports on its first look-up
STRATEGIES: Registry[type[CheckpointStrategy]] = Registry(
    "checkpoint strategy",
    ("check-n-run", "checkfreq", "cpr", "fastpersist", "none", "sync-full", "trainingcxl"),
)


def register_strategy(
    name: str,
) -> Callable[[type[CheckpointStrategy]], type[CheckpointStrategy]]:
    """Class decorator: register a strategy under `name` (a duplicate name is an error)."""

    def deco(cls: type[CheckpointStrategy]) -> type[CheckpointStrategy]:
        STRATEGIES.register(name, cls)
        cls.name = name
        return cls

    return deco


def full_checkpoints(
    ctx: CheckpointContext,
    timing: Timing,
    batches: np.ndarray,
    *,
    overlap: bool,
) -> CheckpointResult:
    """Full-state writes after `batches`: synchronous (stall = the write) or overlapped
    with the next batch's forward and backward (stall = max(0, write − that))."""
    nb = timing.num_batches
    log = CheckpointLog(nb)
    nbytes = ctx.state_bytes
    t_write = ctx.write_s(nbytes)
    target = ctx.target().name
    restore = ctx.restore_s(nbytes)
    on_device = ctx.on_device
    home = home_tier_name(ctx.system)
    home_bytes = ctx.home_read_bytes(ctx.total_rows, full=True)
    flush = ctx.flush()
    t_flush = flush.seconds if flush is not None else 0.0
    ends = np.cumsum(timing.base_s)
    extra = 0.0  # stall of batches up to now
    durable, resume, restores = [], [], []
    prev_needed = 0
    for b in (int(x) for x in batches):
        start = float(ends[b]) + extra
        if t_flush and flush is not None:  # the caches' flush into the store: training waits
            log.stall_s[b] += t_flush
            extra += t_flush
            log_flush(log, ctx, b, flush)
            start += t_flush
        if overlap:
            nxt = b + 1
            window = float(timing.forward_backward_s[nxt]) if nxt < nb else 0.0
            stall = max(0.0, t_write - window)
            log.stall_s[min(nxt, nb - 1)] += stall
            # the stall lands in batch b+1 (before its optimizer step): b+1 starts now
            resume_at = start
        else:
            stall = t_write
            log.stall_s[b] += stall
            resume_at = start + stall
        extra += stall
        if not on_device:  # the writer reads the host-side tables in place
            log.traffic("read", home, b, home_bytes)
        log.traffic("write", target, b, nbytes)
        if ctx.spec.link:
            log.traffic("d2h", ctx.spec.link, b, nbytes if on_device else ctx.dense_bytes)
        log.add(
            kind="full",
            batch=b,
            rows=ctx.total_rows,
            bytes=nbytes,
            dense_bytes=ctx.dense_bytes,
            start_s=start,
            durable_s=start + t_write,
            stall_s=stall + t_flush,
            restore_bytes=nbytes,
            retained_bytes=prev_needed + nbytes,  # the previous one is kept until this is durable
        )
        prev_needed = nbytes
        durable.append(start + t_write)
        resume.append(resume_at)
        restores.append(restore)
    points = points_from(durable, resume, restores)
    return CheckpointResult(
        log,
        points,
        ctx.system.failures.restart_s,
        {"write_s": t_write, "write_bw_bytes_per_s": ctx.write_bw()},
    )


@dataclass(frozen=True)
class Planned:
    """One checkpoint of a snapshot-and-persist strategy, before timing."""

    batch: int  # -1: a baseline before batch 0
    kind: str
    rows: int
    nbytes: int
    restore_bytes: int  # what recovering from it reads (the full plus its chain)


def snapshot_persist(
    ctx: CheckpointContext, timing: Timing, planned: list[Planned]
) -> CheckpointResult:
    """CheckFreq's two phases, also Check-N-Run's: training stalls while the checkpoint is
    copied into host memory (the snapshot, over checkpoint.link into the snapshot tier),
    then a background writer persists it to the target. The next snapshot cannot complete
    before the last persist has (one snapshot buffer): stall = max(t_snapshot, last
    persist end − ready). Durable when the persist ends. CheckFreq's rule for k is exactly
    the spacing that leaves only t_snapshot. A baseline (batch −1) is the initial state,
    snapshotted during job set-up (no training stall) and persisted as training starts.
    With `checkpoint.synchronous` there is no snapshot: training waits for the write."""
    nb = timing.num_batches
    log = CheckpointLog(nb)
    ends = np.cumsum(timing.base_s)
    target = ctx.target().name
    snap_tier = ctx.snapshot_tier().name
    extra = 0.0
    persist_end = 0.0
    prev_needed = 0
    durable, resume, restores = [], [], []
    synchronous = ctx.spec.synchronous
    on_device = ctx.on_device
    home = home_tier_name(ctx.system)
    flush = ctx.flush()
    for p in planned:
        if flush is not None and p.batch >= 0:  # the caches' flush into the store first
            log.stall_s[p.batch] += flush.seconds
            extra += flush.seconds
            log_flush(log, ctx, p.batch, flush)
        if p.batch < 0:
            ready = stall = 0.0
        elif synchronous:  # written straight to the target while training waits
            ready = float(ends[p.batch]) + extra
            stall = max(0.0, persist_end - ready) + ctx.write_s(p.nbytes)
        else:
            ready = float(ends[p.batch]) + extra
            stall = max(ctx.snapshot_s(p.nbytes), persist_end - ready)
        at = max(p.batch, 0)
        log.stall_s[at] += stall
        extra += stall
        snap_end = ready + stall
        written = synchronous and p.batch >= 0  # durable when the stall ends
        persist_end = snap_end if written else snap_end + ctx.write_s(p.nbytes)
        # staged in host memory unless the write is synchronous; a device's state always
        # leaves through it, the baseline's too. Host-side tables are read in place by a
        # synchronous writer: training waits (the baseline: it is taken at set-up)
        if not synchronous or (p.batch < 0 and on_device):
            log.traffic("write", snap_tier, at, p.nbytes)
            log.traffic("read", snap_tier, at, p.nbytes)
        if not on_device:
            log.traffic("read", home, at, ctx.home_read_bytes(p.rows, full=p.kind == "full"))
        log.traffic("write", target, at, p.nbytes)
        if ctx.spec.link:
            log.traffic("d2h", ctx.spec.link, at, p.nbytes if on_device else ctx.dense_bytes)
        log.add(
            kind=p.kind,
            batch=p.batch,
            rows=p.rows,
            bytes=p.nbytes,
            dense_bytes=ctx.dense_bytes,
            start_s=ready,
            durable_s=persist_end,
            stall_s=stall,
            restore_bytes=p.restore_bytes,
            # what the last durable one needs stays until this one is durable
            retained_bytes=prev_needed + p.nbytes,
        )
        prev_needed = p.restore_bytes
        durable.append(persist_end)
        resume.append(snap_end)
        restores.append(ctx.restore_s(p.restore_bytes))
    points = points_from(durable, resume, restores)
    extras = {
        "snapshot_tier": snap_tier,
        "write_bw_bytes_per_s": ctx.write_bw(),
    }
    return CheckpointResult(log, points, ctx.system.failures.restart_s, extras)


def log_flush(log: CheckpointLog, ctx: CheckpointContext, batch: int, flush: Flush) -> None:
    """The traffic of an SSD-backed table's cache flush (`replay.checkpoint.ssd_store`)."""
    p = ctx.system.policy
    log.traffic("write", p.store_tier, batch, flush.store_write_bytes)
    log.traffic("read", p.backing_tier, batch, flush.l2_read_bytes)
    if ctx.system.lookup.link:
        log.traffic("d2h", ctx.system.lookup.link, batch, flush.link_bytes)
