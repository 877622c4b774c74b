"""Spatially sampled on-the-fly workloads: only the lookups of the rows SHARDS keeps.

`open_sampled_workload(spec, R)` reads like `GeneratedTrace(spec)` filtered by the SHARDS
rule (`replay.workload.sampler.shards_keeps`: a row is sampled when its flat key hashes
below T = round(R 2^24), so the rate is T / 2^24), but it generates only the sampled
lookups, so a whole training run costs about R times the full stream.

Exactness. Without reuse, the n_t = batch_size x pooling lookups of table t in a batch
are i.i.d. draws from the table's pmf p (rank by the bounded power law, then the keyed
permutation rank -> row). Filtering an i.i.d. sequence keeps each position independently
with probability S_t = sum of p over the sampled rows, and the kept positions' rows are
i.i.d. from p restricted to the sampled rows. So the filtered (batch, table) block has
exactly the law of

    K ~ Binomial(n_t, S_t), then K i.i.d. draws from p / S_t on the sampled rows,

emitted in draw order: i.i.d. draws are exchangeable, so this is also the law of the
order in which the filtered stream would meet them. Tables come in the full generator's
order within a batch; batches in order. Each (batch, table) block uses its own
counter-based stream `stream_key(root, batch, table, PURPOSE_SAMPLED)`, so batch b
depends only on (spec, seed, T, b), whatever the threads or the batch ranges read.

- S_t and the sampled rows are found once (`sampled_tables`): instead of mapping every
  rank to its row, every row of the table is tested with the SHARDS rule (one mix64),
  and only the sampled rows are mapped back to their rank by the inverse permutation
  (`sampler.unpermute_index`); the set and the weights are the same, at a fraction of
  the cost. The chunks of rows run in `threads` threads (numba releases the GIL).
  S_t = sum of k^-alpha over the sampled ranks / the generator's normaliser (the head
  sum plus the Euler-Maclaurin tail of `sampler.build_sampler_tables`); with a
  `rank_offset` q, (k + q)^-alpha in both. Hot values
  (`hot_shares` s_1..s_j) are ranks 1..j with their own weights: rank i's row weighs
  W_i = s_i / (1 - sum s) x R instead of i^-alpha, R the normaliser less the hot ranks'
  i^-alpha (`sampler.hot_weights`, the generator's own), and S_t is divided by R +
  sum W_i; without hot values no weight is replaced and the normaliser is Z.
- Rows: a Walker/Vose alias table over the sampled rows' weights (`sampler.build_alias`;
  Walker 1977, Vose 1991), one uniform picks the slot and another flips its coin.
- K: n_t and S_t are fixed for the whole run, so K is drawn from an alias table of the
  Binomial(n_t, S_t) pmf itself (Devroye, "Non-Uniform Random Variate Generation", 1986,
  III.4: table methods for a fixed discrete law), O(1) a draw whatever n_t S_t. The pmf
  is computed from its mode outwards by the ratio recurrence f(k+1) / f(k) =
  (n - k) / (k + 1) x S / (1 - S) in log space, and stops where f(k) < f(mode) 2^-64 /
  (n + 1): the pmf is unimodal, so the dropped tails weigh less than 2^-64 in all,
  below the 2^-53 resolution of the uniforms the whole generator draws with.
- Updates: the update set of an accumulation window is the distinct rows it looked up,
  so the sampled update set is the distinct sampled lookups: `update_sets` on the
  sampled lookups, as the full generator does (row groups hold whole windows).

Refused when R < 1 (`ConfigError`): reuse > 0 (a repeat copies an earlier lookup's row,
so whether a lookup is sampled is not independent of the other lookups), and drift > 0
(the sampled rows' mass and alias table change at every drift step: exact support would
rebuild them, O(sampled rows of the table), at each step; with the default period of one
batch that is per batch). At R = 1 every row is sampled and the stream *is* the full
generator's (same lookups, same order), so every option is accepted.

Memory: the sampled rows' tables (16 bytes per sampled row: 14 MB for criteo-terabyte at
R = 0.001) plus the row groups in flight, planned at about `ROW_GROUP_TARGET_LOOKUPS`
sampled lookups each (and whole accumulation windows), never the number of batches.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from replay._jit import kernel
from replay._threads import worker_pool
from replay.errors import ConfigError
from replay.trace.keys import table_offsets
from replay.workload import sampler
from replay.workload.generator import CompiledWorkload
from replay.workload.onthefly import GeneratedTrace, RowGroups
from replay.workload.sampler import (
    PURPOSE_SAMPLED,
    SHARDS_MODULUS,
    shards_keeps,
    stream_key,
    uniform,
    unpermute_index,
)
from replay.workload.spec import WorkloadSpec

ROW_GROUP_TARGET_LOOKUPS = 1 << 20  # sampled lookups per row group, about
MAX_GROUP_BATCHES = 1 << 16  # so a row group's count array stays small when R is tiny
# ... and at most this many (batch, bin) counts (8 B each): 2^16 batches of 400 tables
# held 210 MB a row group, five of them in flight (issue 39)
MAX_GROUP_CELLS = 1 << 22
SETUP_CHUNK_ROWS = 1 << 20  # rows a set-up task tests
BINOMIAL_CUT = 2.0**-64  # mass the binomial tables may drop, in all


# -- set-up: the sampled rows of a table and their weights ----------------------------


@kernel
def _sampled_rows_kernel(
    offset: np.int64, rows: np.int64, lo: np.int64, hi: np.int64, contiguous: bool,
    bits: np.int64, keys: np.ndarray, threshold: np.int64, alpha: float,
    hot_weight: np.ndarray, out_row: np.ndarray, out_weight: np.ndarray, q: float = 0.0,
) -> int:  # fmt: skip
    """Rows of [lo, hi) that SHARDS keeps and their rank's weight (k + q)^-alpha (hot rank
    i's `hot_weight[i - 1]`); their count."""
    n = 0
    for r in range(lo, hi):
        if shards_keeps(offset + r, threshold):
            p = r if contiguous else unpermute_index(r, rows, bits, keys)
            out_row[n] = r
            out_weight[n] = 1.0 if alpha == 0.0 else math.exp(-alpha * math.log(p + 1.0 + q))
            if p < len(hot_weight):
                out_weight[n] = hot_weight[p]
            n += 1
    return n


def _normaliser(rows: int, alpha: float, q: float = 0.0) -> float:
    """The sum the generator's pmf (k + q)^-alpha is divided by (head sum + tail sum)."""
    return sampler.power_law_sum(rows, alpha, q)


def _hot_weights(
    rows: int, alpha: float, hot_shares: tuple[float, ...], q: float = 0.0
) -> tuple[np.ndarray, float]:
    """(W, normaliser): the hot ranks' weights in the units of (k + q)^-alpha and the sum
    the weights are divided by (module docstring); (empty, Z) without hot values."""
    norm = _normaliser(rows, alpha, q)
    if not hot_shares:
        return np.zeros(0, dtype=np.float64), norm
    plain = sampler.head_weights(len(hot_shares), alpha, q)
    rest = norm - math.fsum(plain.tolist())
    weights = sampler.hot_weights(hot_shares, np.zeros(len(hot_shares)), rest)
    return weights, rest + math.fsum(weights.tolist())


@kernel
def _binomial_window(n: np.int64, p: float) -> tuple[np.int64, np.ndarray]:
    """(lo, w): Binomial(n, p)'s pmf on [lo, lo + len(w)) up to a factor, all of it but
    tails below BINOMIAL_CUT in all (module docstring)."""
    if p <= 0.0 or n == 0:
        return np.int64(0), np.ones(1)
    if p >= 1.0:
        return n, np.ones(1)
    log_ratio = math.log(p) - math.log1p(-p)
    mode = min(np.int64((n + 1) * p), n)
    floor_log = math.log(BINOMIAL_CUT / (n + 1.0))
    hi = mode  # up from the mode: log f(k + 1) / f(k) = log((n - k) / (k + 1)) + log_ratio
    f = 0.0
    while hi < n:
        g = f + math.log((n - hi) / (hi + 1.0)) + log_ratio
        if g < floor_log:
            break
        f = g
        hi += 1
    lo = mode
    f = 0.0
    while lo > 0:
        g = f - math.log((n - lo + 1.0) / lo) - log_ratio
        if g < floor_log:
            break
        f = g
        lo -= 1
    w = np.empty(hi - lo + 1)
    w[mode - lo] = 1.0
    f = 0.0
    for k in range(mode, hi):
        f += math.log((n - k) / (k + 1.0)) + log_ratio
        w[k + 1 - lo] = math.exp(f)
    f = 0.0
    for k in range(mode, lo, -1):
        f -= math.log((n - k + 1.0) / k) + log_ratio
        w[k - 1 - lo] = math.exp(f)
    return lo, w


@dataclass(frozen=True)
class SampledTables:
    """The sampled rows of every table, flattened for the kernels."""

    threshold: int
    sampled_rows: np.ndarray  # int64 per table
    sampled_mass: np.ndarray  # float64 per table: S_t
    row_off: np.ndarray  # int64 [tables + 1]: table t's sampled rows at [off[t], off[t+1])
    row_ids: np.ndarray  # row dtype: the sampled rows, by table then row
    row_prob: np.ndarray  # float64: alias table over them, per table
    row_alias: np.ndarray  # int32 (index within the table's block)
    bin_off: np.ndarray  # int64 per table: its binomial alias table's start
    bin_lo: np.ndarray  # int64 per table: the count of slot 0
    bin_len: np.ndarray  # int64 per table
    bin_prob: np.ndarray  # float64
    bin_alias: np.ndarray  # int32

    lookups_per_table: np.ndarray  # int64 per table: n_t = batch_size x pooling

    @property
    def expected_per_table(self) -> np.ndarray:
        """Expected sampled lookups of each table in a batch: n_t S_t."""
        return self.lookups_per_table * self.sampled_mass

    @property
    def expected_per_batch(self) -> float:
        """Expected sampled lookups of a batch: the sum of n_t S_t."""
        return float(self.expected_per_table.sum())


def sampled_tables(
    spec: WorkloadSpec, threshold: int, row_dtype: np.dtype, *, threads: int = 1
) -> SampledTables:
    """Find every table's sampled rows, S_t and alias tables (module docstring)."""
    root = sampler.root_key(spec.seed)
    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    offsets = table_offsets(rows)
    tasks = [
        (t, lo, min(lo + SETUP_CHUNK_ROWS, int(rows[t])))
        for t in range(len(rows))
        for lo in range(0, int(rows[t]), SETUP_CHUNK_ROWS)
    ]
    keys = [sampler.feistel_round_keys(root, t) for t in range(len(rows))]
    # a function of the table's law alone (rows, alpha, hot values, rank offset): solved
    # once per law (meta-2021's 856 tables are 4 laws; each solve sums 2^16 head ranks)
    laws: dict[tuple[int, float, tuple[float, ...], float], tuple[np.ndarray, float]] = {}
    hot = []
    for spec_table in spec.tables:
        law = (
            int(spec_table.rows),
            float(spec_table.alpha),
            tuple(spec_table.hot_shares),
            float(spec_table.rank_offset),
        )
        if law not in laws:
            laws[law] = _hot_weights(*law)
        hot.append(laws[law])

    def run(task: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        t, lo, hi = task
        table = spec.tables[t]
        out_row = np.empty(hi - lo, dtype=np.int64)
        out_weight = np.empty(hi - lo, dtype=np.float64)
        n = _sampled_rows_kernel(
            int(offsets[t]), int(rows[t]), lo, hi, table.mapping == "contiguous",
            sampler.permutation_bits(int(rows[t])), keys[t], threshold, float(table.alpha),
            hot[t][0], out_row, out_weight, float(table.rank_offset),
        )  # fmt: skip
        return out_row[:n].copy(), out_weight[:n].copy()

    with worker_pool(max(1, threads), "sample-setup") as pool:  # interrupt: no wait
        parts = list(pool.map(run, tasks))
    by_table: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in rows]
    for (t, _, _), part in zip(tasks, parts, strict=True):
        by_table[t].append(part)
    counts, masses, ids, probs, aliases = [], [], [], [], []
    bin_lo, bin_len, bin_probs, bin_aliases = [], [], [], []
    for t, table in enumerate(spec.tables):
        row = np.concatenate([r for r, _ in by_table[t]] or [np.empty(0, np.int64)])
        weight = np.concatenate([w for _, w in by_table[t]] or [np.empty(0)])
        norm = hot[t][1]  # Z without hot values
        mass = min(1.0, float(weight.sum()) / norm)
        counts.append(len(row))
        masses.append(mass)
        ids.append(row.astype(row_dtype))
        if len(row):
            prob, alias = sampler.build_alias(weight)
            probs.append(prob)
            aliases.append(alias)
        lo, w = _binomial_window(spec.batch_size * table.pooling, mass)
        prob, alias = sampler.build_alias(w)
        bin_lo.append(lo)
        bin_len.append(len(w))
        bin_probs.append(prob)
        bin_aliases.append(alias)

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    row_off = table_offsets(np.array(counts, dtype=np.int64))
    bin_off = table_offsets(np.array(bin_len, dtype=np.int64))[:-1]
    return SampledTables(
        threshold, np.array(counts, dtype=np.int64), np.array(masses),
        row_off, cat(ids, row_dtype), cat(probs, np.float64), cat(aliases, np.int32),
        bin_off, np.array(bin_lo, dtype=np.int64), np.array(bin_len, dtype=np.int64),
        cat(bin_probs, np.float64), cat(bin_aliases, np.int32),
        np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.int64),
    )  # fmt: skip


# -- generation -----------------------------------------------------------------------


@kernel(inline="always")
def _alias_pick(
    key: np.uint64, counter: np.int64, off: np.int64, m: np.int64,
    prob: np.ndarray, alias: np.ndarray,
) -> np.int64:  # fmt: skip
    """An alias draw from the table at [off, off + m): uniforms `counter`, `counter + 1`."""
    slot = np.int64(uniform(key, counter) * m)
    if uniform(key, counter + 1) < prob[off + slot]:
        return slot
    return np.int64(alias[off + slot])


@kernel
def sampled_counts(
    root: np.uint64, batch_start: np.int64, batch_stop: np.int64, bin_off: np.ndarray,
    bin_lo: np.ndarray, bin_len: np.ndarray, bin_prob: np.ndarray, bin_alias: np.ndarray,
    counts: np.ndarray,
) -> int:  # fmt: skip
    """counts[b - batch_start, t] = sampled lookups of table t in batch b; their total."""
    total = 0
    for b in range(batch_start, batch_stop):
        for t in range(len(bin_off)):
            k = bin_lo[t]
            if bin_len[t] > 1:
                key = stream_key(root, b, t, PURPOSE_SAMPLED)
                k += _alias_pick(key, 0, bin_off[t], bin_len[t], bin_prob, bin_alias)
            counts[b - batch_start, t] = k
            total += k
    return total


@kernel
def sampled_lookups(
    root: np.uint64, batch_start: np.int64, batch_stop: np.int64, counts: np.ndarray,
    row_off: np.ndarray, row_ids: np.ndarray, row_prob: np.ndarray, row_alias: np.ndarray,
    out_batch: np.ndarray, out_table: np.ndarray, out_row: np.ndarray,
) -> None:  # fmt: skip
    """Fill the sampled lookups of [batch_start, batch_stop), sorted by (batch, table),
    each (batch, table) block in draw order (i.i.d. from the restricted pmf)."""
    out = 0
    for b in range(batch_start, batch_stop):
        for t in range(counts.shape[1]):
            c = counts[b - batch_start, t]
            if c == 0:
                continue
            key = stream_key(root, b, t, PURPOSE_SAMPLED)
            off = row_off[t]
            m = row_off[t + 1] - off
            for i in range(c):  # counters 0 and 1 drew the count
                out_row[out + i] = row_ids[
                    off + _alias_pick(key, 2 + 2 * i, off, m, row_prob, row_alias)
                ]
            out_batch[out : out + c] = b
            out_table[out : out + c] = t
            out += c


@dataclass(frozen=True)
class SampledCompiled:
    """What `GeneratedTrace` asks of its compiled workload, for the sampled stream."""

    full: CompiledWorkload
    tables: SampledTables

    @property
    def row_dtype(self) -> np.dtype:
        return self.full.row_dtype

    def counts(self, batch_start: int, batch_stop: int) -> tuple[np.ndarray, int]:
        st = self.tables
        counts = np.empty((batch_stop - batch_start, len(st.bin_off)), dtype=np.int64)
        total = sampled_counts(
            self.full.root, batch_start, batch_stop, st.bin_off, st.bin_lo, st.bin_len,
            st.bin_prob, st.bin_alias, counts,
        )  # fmt: skip
        return counts, int(total)

    def lookups(
        self, batch_start: int, batch_stop: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(batch, table, row) of the sampled lookups of [batch_start, batch_stop)."""
        counts, n = self.counts(batch_start, batch_stop)
        out_batch = np.empty(n, dtype=np.uint32)
        out_table = np.empty(n, dtype=np.uint16)
        out_row = np.empty(n, dtype=self.row_dtype)
        st = self.tables
        sampled_lookups(
            self.full.root, batch_start, batch_stop, counts, st.row_off, st.row_ids,
            st.row_prob, st.row_alias, out_batch, out_table, out_row,
        )  # fmt: skip
        return out_batch, out_table, out_row

    def updates(
        self, batch: np.ndarray, table: np.ndarray, row: np.ndarray, start: int, stop: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.full.updates(batch, table, row, start, stop)


def check_sampling(spec: WorkloadSpec, threshold: int) -> None:
    """ConfigError for what a sampled stream (R < 1) cannot generate exactly."""
    if threshold >= SHARDS_MODULUS:
        return
    for i, t in enumerate(spec.tables):
        where = f"{spec.name}: tables[{i}] ({t.name})"
        if t.reuse > 0.0:
            raise ConfigError(
                f"{where}: reuse = {t.reuse:g} cannot be sampled (a repeat copies an earlier "
                "lookup's row, so lookups are not kept independently); use reuse = 0 or "
                "--sample-rate 1"
            )
        if t.drift > 0.0:
            raise ConfigError(
                f"{where}: drift = {t.drift:g} cannot be sampled (each drift step changes "
                "the sampled rows' mass and alias table); use drift = 0 or --sample-rate 1"
            )


class SampledWorkload(GeneratedTrace):
    """A workload spec's lookups on the rows SHARDS samples at rate R, generated directly.

    At R = 1 (T = 2^24) it is the full `GeneratedTrace`, lookup for lookup.
    """

    def __init__(
        self, spec: WorkloadSpec, sample_rate: float, *, threads: int | None = None
    ) -> None:
        threshold = sampler.shards_threshold(sample_rate)
        check_sampling(spec, threshold)
        super().__init__(spec, threads=threads)
        self.threshold = threshold
        self.sample_rate = threshold / SHARDS_MODULUS
        full = self.compiled
        self.tables: SampledTables | None = None
        if threshold < SHARDS_MODULUS:
            self.tables = sampled_tables(spec, threshold, full.row_dtype, threads=self.threads)
            self.compiled = SampledCompiled(full, self.tables)  # type: ignore[assignment]  # duck-typed: what generation calls
            per_group = _batches_per_group(
                self.tables.expected_per_batch,
                spec.update.accumulate_batches,
                len(self.tables.bin_off),
            )
            self.row_groups = RowGroups(spec.batches, spec.batches, per_group)
            self.layout = {"batches_per_row_group": per_group}
            self.pieces = ()  # its own row groups of sampled lookups: batches are whole
            self.manifest["layout"] = self.layout
            del self.manifest["lookups"]  # a random number: `num_lookups` counts it
        self.manifest["sample"] = {
            "rate": self.sample_rate,
            "threshold": threshold,
            "modulus": SHARDS_MODULUS,
            "salt": sampler.SHARDS_SALT,
        }

    @property
    def sampled_rows(self) -> np.ndarray:
        """Sampled rows per table (int64)."""
        return self.table_rows.copy() if self.tables is None else self.tables.sampled_rows

    @property
    def sampled_mass(self) -> np.ndarray:
        """S_t per table: the probability that a lookup of table t is on a sampled row."""
        return np.ones(len(self.table_rows)) if self.tables is None else self.tables.sampled_mass

    @property
    def expected_lookups(self) -> float:
        """Expected sampled lookups of the whole run."""
        if self.tables is None:
            return float(self.spec.lookups)
        return self.tables.expected_per_batch * self.num_batches

    @property
    def path(self) -> Path:
        return Path(f"workload:{self.spec.name}@sample-rate={self.sample_rate:.9g}")

    @cached_property
    def num_lookups(self) -> int:
        """Sampled lookups of the run: counted (one binomial draw per batch and table)."""
        if self.tables is None:
            return self.spec.lookups
        compiled: SampledCompiled = self.compiled  # type: ignore[assignment]  # set so with tables
        return sum(compiled.counts(g0, g1)[1] for g0, g1 in self.row_groups)

    def digest(self) -> str:
        """SHA-256 of the spec's canonical JSON and the sample (at R = 1: the full one's)."""
        if self.tables is None:
            return super().digest()
        doc = {"workload": self.workload, "sample": self.manifest["sample"]}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        return (
            f"SampledWorkload({self.spec.name!r}, sample_rate={self.sample_rate:.9g}, "
            f"batches={self.num_batches}, tables={len(self.spec.tables)})"
        )


def _batches_per_group(expected_per_batch: float, accumulate: int, bins: int = 1) -> int:
    """Batches of a row group: about ROW_GROUP_TARGET_LOOKUPS sampled lookups, whole
    accumulation windows, at most MAX_GROUP_BATCHES and MAX_GROUP_CELLS / `bins` (the
    counts drawn per batch) (rounded up to a window)."""
    per = ROW_GROUP_TARGET_LOOKUPS / max(expected_per_batch, 1e-9)
    most = min(MAX_GROUP_BATCHES, max(1, MAX_GROUP_CELLS // max(int(bins), 1)))
    per_group = int(min(max(1.0, per), most))
    return -(-per_group // accumulate) * accumulate


def open_sampled_workload(
    spec: WorkloadSpec, sample_rate: float, *, threads: int | None = None
) -> SampledWorkload:
    """`spec`'s lookups on the rows SHARDS keeps at `sample_rate`, generated on the fly."""
    return SampledWorkload(spec, sample_rate, threads=threads)


__all__ = [
    "SampledCompiled",
    "SampledTables",
    "SampledWorkload",
    "check_sampling",
    "open_sampled_workload",
    "sampled_tables",
]
