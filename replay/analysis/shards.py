"""SHARDS: an LRU miss-ratio curve from a spatial sample of the keys (DESIGN s.5).

Sampled curve (Waldspurger, Park, Garthwaite, Ahmad, "Efficient MRC Construction with
SHARDS", FAST 2015; fixed-rate SHARDS with the adjustment, "SHARDS_adj"). A key is
sampled when hash(key) mod P < T, P = 2^24, so the sample rate is R = T / P (T is the
requested rate times P, rounded; `sample_rate` reports T / P). The hash is SplitMix64's
finalizer (`replay.workload.sampler.mix64`) of the key xor a fixed salt. Sampling is by
key, so every request of a sampled key is kept and its stack distance in the sampled
stream, divided by R, estimates its true distance. The sampled stream goes through the
same kernel as the exact curve (`replay.analysis.stack`), with per-key state in an
open-addressing hash map over the sampled keys only. With N requests of which N_s
sampled, the adjustment adds N R - N_s to the smallest-distance bucket (always a hit),
which makes the histogram total N R:

    miss_ratio(C) ~= (cold_s + #{sampled requests with distance_s >= C R}) / (N R),

clipped to [0, 1]. Distinct keys are estimated as distinct sampled keys / R. At R = 1
every key is sampled and the result equals the exact curve (`exact` is then true).

Resolution. A request of true distance d has a sampled distance of about Binomial(d, R),
so the estimate blurs the curve over sizes by a relative standard deviation of
sqrt((1 - R) / (C R)); `resolution_rows` = 16 (1 - R) / R rows is where that is 25%
(1,585 rows at R = 0.01). In an embedding trace every batch shares the same sampled rows,
so near the cliff of the curve (about one batch's distinct rows) the blur does not
average out and the whole cliff moves: at R = 0.01 the plain estimate was 2-17 points
off there on 20 generated Criteo-like traces (`tests/test_shards_fidelity.py`), and its
stated error covered that in 10 of 20.

Exact head (`replay.analysis.head`). So every sampled curve here is joined to exact
stack distances below C_x rows (a power of two >= 4 x one batch's distinct rows and >= the
resolution, at most 2^19): for C <= C_x the curve is the head's, exact when the head read
the whole stream; above, m(C) = m_head(C_x) x G(C), G(C) the sample's share of its
misses at C_x that still miss at C, so the cliff never enters the sampled part and the
curve is continuous at C_x. The sample's count at C_x carries the blur's bias when C_x is
only a few resolutions (low rates: C_x = 2 resolutions at R = 2^-12), so from C_x to
max(16 resolutions, 4 C_x) the joined estimate gives way, linearly in log size, to the
sample's own m(C), whose blur is <= 6% there. Measured: at R = 2^-11 on criteo-terabyte
(4,000 batches of 2,048) the anchored estimate was +0.0026 off on average above C_x, the
blend +0.0005 (largest 0.0036 against 0.0017); at R = 0.01 over the 20 traces x 10 salts
the blend's largest error was 0.0058 (0.0015 median) with the bound covering 98%.
Sizes below the resolution are then exact rather than refused.

Stated error (`expected_error`), by the random-group method (Wolter, "Introduction to
Variance Estimation", 2nd ed., Springer 2007, ch. 2): the sample is split into K = 8
hash-disjoint groups by three further hash bits (bits 24-26 of the same hash, independent
of the sampling bits), each of which is itself a SHARDS_adj sample at rate R / K with its
own kernel state. The K group curves m_k(C) are independent estimates and the full-rate
estimate m(C) behaves like their mean, so its standard error is s_k(C) / sqrt(K), s_k the
sample standard deviation (ddof=1) of the m_k(C). The blur's bias grows as the rate
falls (about sqrt(K) times larger at R / K near a cliff, K times on smooth parts), so
b(C) = (mean_k m_k(C) - m(C)) / (sqrt(K) - 1) estimates the bias at R, erring large.
`point_errors` = |b(C)| + t s_k(C) / sqrt(K) at each size, with t = 2.365 (Student's t,
7 degrees of freedom, two-sided 95%), plus the head's own error carried from C_x (zero
when it read the whole stream; else the spread of its blocks). Users read
`expected_error` as a bound on the largest error over the curve, so it bounds that, not
each size: the same random-group method applied to the sup norm, t sqrt(sum_k D_k^2 /
(K - 1)) / sqrt(K) with D_k = max_C |m_k(C) - mean_j m_j(C)|, plus the largest |b(C)|
and head error, and never less than the largest point error. Measured at R = 0.01 over
the 20 traces x 10 salts (before the blend above): the largest error over 256 sizes was
at most 0.0073 (0.0019 median); this bound covered it in 99% of the 200 cases, the
largest point error in only 93.5%. With the blend: at most 0.0058, covered in 98%; the 20
traces at the default salt: largest error 0.0028, covered 20 of 20.
The groups cost one more kernel pass over the sampled requests (about 2 R of the trace).

Control variate. A caller that knows the sampled population (a sampled workload spec:
`replay.analysis.shards_model`) sets `model`, which adds to the curve, and to each group's,
the model's correction at each size (Che's curve of the full stream less Che's curve of
what this sample reads); the groups then measure what the correction leaves, and the
blur's bias term is dropped (the difference estimator corrects the blur with the luck).
`group_curves` gives the curve and the K group curves that the errors, and the ranges of
the plan's answers (`replay.plan.cache.range_for_hit`, via `point_errors`), come from.

The filter makes, checks and hashes the flat keys straight from a trace's (table, row)
columns in one fused loop, since reading bounds a sampled curve. `ShardsSampler` is the
resumable state (the full sample and the K groups); `shards_sample_columns` is the filter
on its own, for work spread over threads or workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from replay._jit import kernel
from replay.analysis.head import HeadCurve
from replay.analysis.stack import StackDistances
from replay.errors import TraceError
from replay.trace.keys import bad_lookup_error, table_of
from replay.workload.sampler import SHARDS_MODULUS, SHARDS_SALT, mix64, shards_threshold

SUBSAMPLES = 8  # K hash-disjoint groups for the error estimate (a power of 2)
BLEND_RESOLUTIONS = 16  # the sample's own curve takes over by 16 x its resolution (blur 6%)
ERROR_T_QUANTILE = 2.365  # Student t, K - 1 = 7 degrees of freedom, two-sided 95%
# a state's first position window: small, as a sample's state grows its window with its
# keys anyway (distances are exact at any window); a plan's 856 per-table samplers x 9
# states at the default 2^16 positions zeroed 3.2 GB of windows before any key
MIN_WINDOW = 1 << 12


@kernel
def _shards_filter(
    keys: np.ndarray,
    threshold: int,
    salt: np.uint64,
    total_keys: int,
    out_keys: np.ndarray,
    out_group: np.ndarray,
) -> tuple[int, int | np.signedinteger[Any]]:
    """Keep the requests whose key hashes below `threshold` mod 2^24; (kept, bad keys).

    The group of a kept key (bits 24.. of the same hash) goes to `out_group`.
    """
    t = np.uint64(threshold)
    low = np.uint64(SHARDS_MODULUS - 1)
    gmask = np.uint64(SUBSAMPLES - 1)
    s24 = np.uint64(24)
    limit = np.uint64(total_keys)
    bad: int | np.signedinteger[Any] = 0  # numpy's bools add into it (numba: an int64)
    n = 0
    for i in range(len(keys)):
        u = np.uint64(keys[i])
        bad += u >= limit
        h = mix64(u ^ salt)
        if (h & low) < t:
            out_keys[n] = keys[i]
            out_group[n] = np.uint8((h >> s24) & gmask)
            n += 1
    return n, bad


@kernel
def _shards_filter_columns(
    table: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    threshold: int,
    salt: np.uint64,
    out_keys: np.ndarray,
    out_group: np.ndarray,
) -> tuple[int, int | np.signedinteger[Any]]:
    """`_shards_filter` straight from a trace's (table, row) columns; (kept, bad lookups).

    This loop touches every lookup of the trace, so it makes the flat key itself (no
    int64 key array in between) and checks table and row ids without a branch.
    """
    t = np.uint64(threshold)
    low = np.uint64(SHARDS_MODULUS - 1)
    gmask = np.uint64(SUBSAMPLES - 1)
    s24 = np.uint64(24)
    tables = len(rows)
    bad: int | np.signedinteger[Any] = 0  # numpy's bools add into it (numba: an int64)
    n = 0
    for i in range(len(row)):
        tb: int | np.int64 = np.int64(table[i])
        bad += tb >= tables
        tb = min(tb, tables - 1)
        r = np.uint64(row[i])
        bad += r >= np.uint64(rows[tb])
        key = offsets[tb] + np.int64(r)
        h = mix64(np.uint64(key) ^ salt)
        if (h & low) < t:
            out_keys[n] = key
            out_group[n] = np.uint8((h >> s24) & gmask)
            n += 1
    return n, bad


# `split_sampled` stop codes
SPLIT_DONE = 0
SPLIT_OUTSIDE = 1  # a key outside the row space
SPLIT_UNSAMPLED = 2  # a key the SHARDS rule does not keep


@kernel
def split_sampled(
    keys: np.ndarray,
    offsets: np.ndarray,
    threshold: int,
    salt: np.uint64,
    tid: np.ndarray,
    cuts: np.ndarray,
    local: np.ndarray,
    grouped: np.ndarray,
) -> tuple[int, int]:
    """A sampled stream's flat keys split by table for per-table samplers, in one pass:
    table t's table-local keys in stream order at local[cuts[t K] : cuts[t K + K]], and
    the same keys by SHARDS group (stable) at grouped[cuts[t K + g] : cuts[t K + g + 1]]
    (K = SUBSAMPLES; `cuts` has tables K + 1 slots). (index of the first bad key, its
    code), or (len(keys), SPLIT_DONE): every key must be in the row space and sampled at
    `threshold` (the stream was sampled by this rule at this rate)."""
    t_max = np.uint64(threshold)
    low = np.uint64(SHARDS_MODULUS - 1)
    gmask = np.uint64(SUBSAMPLES - 1)
    s24 = np.uint64(24)
    tables = len(offsets) - 1
    total = offsets[tables]
    for j in range(len(cuts)):
        cuts[j] = 0
    t = 0
    for i in range(len(keys)):
        key = np.int64(keys[i])
        if key < 0 or key >= total:
            return i, SPLIT_OUTSIDE
        h = mix64(np.uint64(key) ^ salt)
        if (h & low) >= t_max:
            return i, SPLIT_UNSAMPLED
        # a sampled stream comes by (batch, table): the last key's table first
        if not (offsets[t] <= key < offsets[t + 1]):
            t = table_of(offsets, key)
        c = t * SUBSAMPLES + np.int64((h >> s24) & gmask)
        tid[i] = c
        cuts[c + 1] += 1
    for j in range(len(cuts) - 1):
        cuts[j + 1] += cuts[j]
    fill = cuts[: len(cuts) - 1].copy()  # each (table, group)'s next slot in `grouped`
    head = np.empty(tables, dtype=np.int64)  # each table's next slot in `local`
    for u in range(tables):
        head[u] = cuts[u * SUBSAMPLES]
    for i in range(len(keys)):
        c = tid[i]
        u = c // SUBSAMPLES
        key = np.int64(keys[i]) - offsets[u]
        local[head[u]] = key
        head[u] += 1
        grouped[fill[c]] = key
        fill[c] += 1
    return len(keys), SPLIT_DONE


class TableSamplers:
    """One `ShardsSampler` per table fed from a sampled stream's flat keys (table-local
    keys, error groups from the global keys' hash), `SPLIT_KEYS` keys split at a time
    (`split_sampled`: the check, the groups and the split in one pass), so each table's
    states take a few long runs rather than a short one per row group. A table's sampler
    is made at its first key (most of a production spec's tables get none at a low rate:
    `sampler(t)` makes an empty one). `refused(keys)` raises for a row group whose keys
    are not the rule's at this rate (the caller's wording)."""

    SPLIT_KEYS = 1 << 22  # ~100 MB of keys, split and groups at a time

    def __init__(
        self, rows: np.ndarray, rate: float, refused: Callable[[np.ndarray], object]
    ) -> None:
        from replay.trace.keys import table_offsets

        self.rows = np.asarray(rows, dtype=np.int64)
        self.rate = rate
        self.offsets = table_offsets(self.rows)
        self.threshold = shards_threshold(rate)
        self.salt = np.uint64(SHARDS_SALT)
        self.refused = refused
        self.samplers: dict[int, ShardsSampler] = {}
        self.sampled = np.zeros(len(self.rows), dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._held = 0
        self._cuts = np.zeros(len(self.rows) * SUBSAMPLES + 1, dtype=np.int64)

    def sampler(self, t: int) -> ShardsSampler:
        if t not in self.samplers:
            self.samplers[t] = ShardsSampler(int(self.rows[t]), self.rate)
        return self.samplers[t]

    def add(self, keys: np.ndarray) -> None:
        """A row group's flat keys (int64, stream order)."""
        self._pending.append(keys)
        self._held += len(keys)
        if self._held >= self.SPLIT_KEYS:
            self.close()

    def close(self) -> None:
        """Fold in the keys added so far."""
        if not self._pending:
            return
        pending, self._pending, self._held = self._pending, [], 0
        keys = pending[0] if len(pending) == 1 else np.concatenate(pending)
        n, cuts = len(keys), self._cuts
        tid = np.empty(n, dtype=np.int32)
        local = np.empty(n, dtype=np.int64)
        grouped = np.empty(n, dtype=np.int64)
        i, code = split_sampled(
            keys, self.offsets, self.threshold, self.salt, tid, cuts, local, grouped
        )
        if code != SPLIT_DONE:  # said of the row group that holds the key
            ends = np.cumsum([len(k) for k in pending])
            chunk = int(np.searchsorted(ends, i, side="right"))
            self.refused(pending[chunk])
            raise AssertionError("split_sampled refused a key the row group's check takes")
        per = np.diff(cuts[::SUBSAMPLES])
        self.sampled += per
        for t in np.flatnonzero(per).tolist():
            at = cuts[t * SUBSAMPLES : (t + 1) * SUBSAMPLES + 1]
            self.sampler(t).feed_split(local[int(at[0]) : int(at[-1])], grouped, at)


def resolution_rows(threshold: int) -> int:
    """Smallest cache size a sample at rate R = T / P resolves: ceil(16 (1 - R) / R), >= 1.

    A request with true distance d has a sampled distance ~ Binomial(d, R), so d_s / R has
    a relative standard deviation sqrt((1 - R) / (d R)); at this size it is 25%, and it
    grows fast below (around 1 / R most sampled distances are 0 or 1).
    """
    return max(1, -(-16 * (SHARDS_MODULUS - threshold) // threshold))


class ShardsSampler:
    """Fixed-rate SHARDS over a stream of chunks: the full sample and K hash groups."""

    def __init__(
        self,
        total_keys: int,
        sample_rate: float,
        *,
        subsamples: int = SUBSAMPLES,
        salt: int = SHARDS_SALT,
    ) -> None:
        if subsamples not in (0, SUBSAMPLES):
            raise ValueError(f"subsamples must be 0 or {SUBSAMPLES}")
        self.total_keys = int(total_keys)
        self.salt = np.uint64(salt)
        self.threshold = shards_threshold(sample_rate)
        self.full = StackDistances(self.total_keys, direct=False, min_window=MIN_WINDOW)
        # at R = 1 the sample is the whole trace: there is no sampling error to estimate
        groups = subsamples if self.threshold < SHARDS_MODULUS else 0
        self.groups = [
            StackDistances(self.total_keys, direct=False, min_window=MIN_WINDOW)
            for _ in range(groups)
        ]
        self.requests = 0
        # a control variate: sizes -> (correction of the curve, of each group's [K, sizes])
        # added to the sample's own miss ratios (`replay.analysis.shards_model`)
        self.model: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
        self.model_blend = 1.0  # 0: the corrected sample above the head, unanchored
        self._buf_keys = np.empty(0, dtype=np.int64)
        self._buf_group = np.empty(0, dtype=np.uint8)

    @property
    def rate(self) -> float:
        return self.threshold / SHARDS_MODULUS

    @property
    def resolution(self) -> int:
        return resolution_rows(self.threshold)

    def _buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self._buf_keys) < n:
            self._buf_keys = np.empty(n, dtype=np.int64)
            self._buf_group = np.empty(n, dtype=np.uint8)
        return self._buf_keys, self._buf_group

    def feed(self, keys: np.ndarray) -> None:
        """Fold in a chunk of flat keys (trace order)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out_keys, out_group = self._buffers(len(keys))
        n, bad = _shards_filter(
            keys, self.threshold, self.salt, self.total_keys, out_keys, out_group
        )
        if bad:
            first = int(np.argmax((keys < 0) | (keys >= self.total_keys)))
            raise TraceError(
                f"lookup {self.requests + first + 1}: key {int(keys[first])} is outside the "
                f"row space [0, {self.total_keys}) (a row id beyond its table)"
            )
        self._take(len(keys), n)

    def feed_columns(
        self,
        table: np.ndarray,
        row: np.ndarray,
        offsets: np.ndarray,
        rows: np.ndarray,
        *,
        where: str = "lookups",
    ) -> None:
        """Fold in a chunk of a trace's lookup columns; `offsets`/`rows` int64 per table."""
        out_keys, out_group = self._buffers(len(row))
        n, bad = _shards_filter_columns(
            table, row, offsets, rows, self.threshold, self.salt, out_keys, out_group
        )
        if bad:
            raise bad_lookup_error(where, self.requests, table, row, rows)
        self._take(len(row), n)

    def _take(self, requests: int, n: int) -> None:
        self.feed_sampled(requests, self._buf_keys[:n], self._buf_group[:n])

    def feed_sampled(self, requests: int, sampled: np.ndarray, group: np.ndarray) -> None:
        """Fold in the output of `shards_sample_columns` for `requests` requests (in trace
        order): how a sample filtered elsewhere (a worker) joins the kernels."""
        self.requests += requests
        self.full.feed(sampled)
        if self.groups and len(sampled):
            order = np.argsort(group, kind="stable")  # keeps trace order inside a group
            ends = np.cumsum(np.bincount(group, minlength=len(self.groups)))
            ordered = sampled[order]
            lo = 0
            for g, hi in enumerate(ends.tolist()):
                if hi > lo:
                    self.groups[g].feed(ordered[lo:hi])
                lo = hi

    def feed_split(self, sampled: np.ndarray, grouped: np.ndarray, cuts: np.ndarray) -> None:
        """`feed_sampled(0, ...)` of a stream already split (`split_sampled`): `sampled` in
        stream order, the same keys by group (stable) at grouped[cuts[g] : cuts[g + 1]]."""
        if len(sampled):
            self.full.feed(sampled)
        if self.groups:
            for g in range(len(self.groups)):
                lo, hi = int(cuts[g]), int(cuts[g + 1])
                if hi > lo:
                    self.groups[g].feed(grouped[lo:hi])

    def _cuts(self, sizes: np.ndarray, groups: int = 1) -> np.ndarray:
        """The sampled distance each size's misses start at: distance_s / R >= C <=>
        distance_s >= ceil(C T / den), den = P groups (exact integers)."""
        den = SHARDS_MODULUS * groups
        if len(sizes) and int(sizes.max()) < (1 << 62) // max(self.threshold, 1):
            return -(-np.asarray(sizes, dtype=np.int64) * self.threshold // den)
        # Python ints where C T could overflow int64
        return np.array([-(-int(c) * self.threshold // den) for c in sizes.tolist()], np.int64)

    def _curve(
        self,
        state: StackDistances,
        sizes: np.ndarray,
        groups: int = 1,
        cuts: np.ndarray | None = None,
    ) -> np.ndarray:
        """SHARDS_adj miss ratios of one sample at rate T / (P groups); `cuts`: `_cuts`'s
        of these sizes, where the caller has them."""
        den = SHARDS_MODULUS * groups
        expected = self.requests * self.threshold / den  # N R, the adjusted histogram total
        if expected <= 0:
            return np.zeros(len(sizes))
        misses = state.misses_at(self._cuts(sizes, groups) if cuts is None else cuts)
        return np.clip(misses / expected, 0.0, 1.0)

    def miss_ratios(
        self, sizes: np.ndarray, head: HeadCurve | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(curve, expected error at each size) at the given sizes (module docstring)."""
        curve, point, _ = self.estimate(sizes, head)
        return curve, point

    def estimate(
        self, sizes: np.ndarray, head: HeadCurve | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """(curve, ~95% error at each size, ~95% bound on the largest error over the
        sizes). With a usable `head`, sizes up to its capacity C_x come from it and larger
        ones are its miss ratio at C_x times the sample's share of the misses at C_x that
        still miss at C (module docstring)."""
        curve, groups, base = self.group_curves(sizes, head)
        return _errors(curve, groups, base, sizes, head, biased=self.model is None)

    def group_curves(
        self, sizes: np.ndarray, head: HeadCurve | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(curve, the K groups' curves [K, sizes], the head's error carried to each size):
        what `estimate` and the ranges of answers read off the curve
        (`replay.analysis.ranges`) are computed from. The groups equal the curve at sizes
        the head covers; with no groups (R = 1, or the head covers every size) the matrix
        has no rows."""
        sizes = np.asarray(sizes, dtype=np.int64)
        k = len(self.groups)
        if head is None or not head.usable:
            whole, parts = self._corrections(sizes)
            curve = np.clip(self._curve(self.full, sizes) + whole, 0.0, 1.0)
            per = [np.clip(self._curve(g, sizes, k) + parts[i], 0.0, 1.0)
                   for i, g in enumerate(self.groups)]  # fmt: skip
            base = np.zeros(len(sizes))
        else:
            cx = head.capacity
            low, low_err = head.miss_ratios(sizes)
            at_cx, cx_err = head.miss_ratios(np.array([cx]))
            up = sizes > cx
            if cx >= self.total_keys or not up.any():
                return low, np.empty((0, len(sizes))), low_err  # the head's alone

            # the sample's miss count at C_x (the anchor's denominator) carries the blur's
            # bias when C_x is within a few resolutions, so the anchored estimate gives way
            # to the sample's own, linearly in log size, from C_x to where its blur is
            # <= 6% (16 resolutions) and at least 4 C_x
            top = max(BLEND_RESOLUTIONS * self.resolution, 4 * cx)
            weight = np.clip(np.log(top / np.maximum(sizes, 1)) / math.log(top / cx), 0.0, 1.0)

            whole, parts = self._corrections(np.append(sizes, cx))
            if self.model is not None and self.model_blend == 0.0:
                weight = np.zeros(len(sizes))  # the corrected sample needs no anchor
            # the whole sample's row and then each group's, at the sizes and C_x (the last
            # column): every state's curve at once, element by element as one state's
            at = np.append(sizes, cx)
            cuts = self._cuts(at, k) if k else None
            raw = np.array(
                [self._curve(self.full, at)] + [self._curve(g, at, k, cuts) for g in self.groups]
            )
            corr = np.vstack([whole[None, :], np.asarray(parts).reshape(k, len(at))])
            tail = np.clip(raw[:, :-1] + corr[:, :-1], 0.0, 1.0)
            pivot = raw[:, -1] + corr[:, -1]
            share = np.zeros(tail.shape)
            on = pivot > 0
            share[on] = tail[on] / pivot[on, None]
            anchored = at_cx[0] * np.minimum(share, 1.0)
            mixed = weight * anchored + (1.0 - weight) * np.minimum(tail, at_cx[0])
            rows = np.where(up, mixed, low)
            curve = rows[0]
            per = list(rows[1:])
            # the head's own error at C_x carries into every larger size
            base = np.where(up, curve / max(at_cx[0], 1e-300) * cx_err[0], low_err)
        groups = np.array(per, dtype=np.float64).reshape(k, len(sizes))
        return curve, groups, base

    def _corrections(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The control variate's correction at `sizes` for the whole sample and each group
        (`model`, `replay.analysis.shards_model`); zeros without one."""
        if self.model is None:
            return np.zeros(len(sizes)), np.zeros((len(self.groups), len(sizes)))
        whole, parts = self.model(np.asarray(sizes, dtype=np.int64))
        return np.asarray(whole, dtype=np.float64), np.asarray(parts, dtype=np.float64)

    @property
    def estimated_distinct(self) -> int:
        return round(self.full.distinct / self.rate)


def _errors(
    curve: np.ndarray,
    groups: np.ndarray,
    base: np.ndarray,
    sizes: np.ndarray,
    head: HeadCurve | None,
    *,
    biased: bool = True,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(curve, ~95% error at each size, ~95% bound on the largest error): the random-group
    method over `groups` (module docstring). `biased` False: no smoothing-bias term, for
    a curve whose control variate corrects the sample's blur with its luck
    (`replay.analysis.shards_model`: the difference estimator is unbiased to first order,
    and its groups, at R / K, carry a larger model error near the head that the term
    would count as bias)."""
    k = len(groups)
    if k < 2:
        return curve, base, float(base.max(initial=0.0))
    stderr = groups.std(axis=0, ddof=1) / math.sqrt(k)  # random-group standard error
    # smoothing bias grows as the rate falls: at rate R / K it is about sqrt(K) times
    # that at R near a cliff of the curve (less elsewhere), so this over-covers
    bias = (groups.mean(axis=0) - curve) / (math.sqrt(k) - 1.0) if biased else 0.0 * curve
    point = np.abs(bias) + ERROR_T_QUANTILE * stderr + base
    if head is not None and head.usable:
        # sizes the head covers: the groups agree there (to rounding), its error holds
        covered = np.asarray(sizes) <= head.capacity
        point = np.where(covered, base, point)
        bias = np.where(covered, 0.0, bias)
    # the largest error over the sizes: the random-group method on the sup norm (each
    # group's largest deviation from the groups' mean), not the largest pointwise bound
    dev = np.abs(groups - groups.mean(axis=0)).max(axis=1)
    sup = ERROR_T_QUANTILE * math.sqrt(float((dev**2).sum()) / (k - 1)) / math.sqrt(k)
    sup += float(np.abs(bias).max(initial=0.0)) + float(base.max(initial=0.0))
    return curve, point, max(float(point.max(initial=0.0)), sup)


def shards_sample_columns(
    table: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    threshold: int,
    *,
    salt: int = SHARDS_SALT,
    where: str = "lookups",
) -> tuple[int, np.ndarray, np.ndarray]:
    """(requests, sampled keys, their groups) of one chunk of lookup columns: the SHARDS
    filter on its own, for work spread over threads or workers (`ShardsSampler.feed_sampled`
    folds the results in, in trace order)."""
    keys = np.empty(len(row), dtype=np.int64)
    group = np.empty(len(row), dtype=np.uint8)
    n, bad = _shards_filter_columns(
        table, row, offsets, rows, threshold, np.uint64(salt), keys, group
    )
    if bad:
        raise bad_lookup_error(where, 0, table, row, rows)
    return len(row), keys[:n].copy(), group[:n].copy()
