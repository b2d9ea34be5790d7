"""HdrHistograms as numpy arrays: read rain-client's interval logs, merge them, and
answer quantiles, counts and order-statistic confidence intervals without ever
touching a raw sample.

A histogram is its counts array under the HdrHistogram bucket layout of
(lowest, highest, significant figures); rain-client uses (1 ns, 100 s, 3), the same
as the Python `hdrh` package with those settings. Quantiles follow HdrHistogram's
definition (the one `hdrh` and rain-client's own summary use): the highest value
equivalent to the bucket where the cumulative count first reaches
round(q * total), so the numbers here equal `hdrh`'s `get_value_at_percentile`.

The interval-log format (hosts/dpdk/client/hdr.h): `#[...]` comment lines, a legend,
then `Tag=<class>,<start s>,<length s>,<max>,<base64 V2 histogram>` per interval and
class; start times are relative to `#[BaseTime: ...]`.
"""

from __future__ import annotations

import base64
import math
import re
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

# rain-client's histograms (hosts/dpdk/client/hdr.h)
LOWEST = 1
HIGHEST = 100_000_000_000
SIGFIGS = 3


@dataclass(frozen=True)
class Layout:
    """The bucket layout of one (lowest, highest, sigfigs) and per-index value tables."""

    lowest: int
    highest: int
    sigfigs: int

    @cached_property
    def unit_mag(self) -> int:
        return int(math.floor(math.log2(self.lowest)))

    @cached_property
    def half_mag(self) -> int:
        mag = int(math.ceil(math.log2(2 * 10**self.sigfigs)))
        return max(mag - 1, 0)

    @cached_property
    def sub_bucket_count(self) -> int:
        return 1 << (self.half_mag + 1)

    @cached_property
    def half_count(self) -> int:
        return self.sub_bucket_count // 2

    @property
    def relative_resolution(self) -> float:
        """The widest bucket as a share of its values (1/1024 at 3 significant figures):
        two values closer than this may be one value to every quantile read here."""
        return 1.0 / self.half_count

    @cached_property
    def counts_len(self) -> int:
        smallest_untrackable = self.sub_bucket_count << self.unit_mag
        buckets = 1
        while smallest_untrackable <= self.highest:
            smallest_untrackable <<= 1
            buckets += 1
        return (buckets + 1) * self.half_count

    def index_of(self, values: np.ndarray) -> np.ndarray:
        """Bucket index of each (integer) value, vectorised."""
        v = np.asarray(values, dtype=np.int64)
        mask = (self.sub_bucket_count - 1) << self.unit_mag
        # bit_length(v | mask), exact for v < 2**53 through frexp
        _, pow2ceil = np.frexp((v | mask).astype(np.float64))
        bucket = pow2ceil.astype(np.int64) - self.unit_mag - (self.half_mag + 1)
        sub = v >> (bucket + self.unit_mag)
        return ((bucket + 1) << self.half_mag) + (sub - self.half_count)


@lru_cache(maxsize=8)
def _tables(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lowest equivalent value, highest equivalent value, median) of every index."""
    i = np.arange(layout.counts_len, dtype=np.int64)
    bucket = (i >> layout.half_mag) - 1
    sub = (i & (layout.half_count - 1)) + layout.half_count
    first = bucket < 0
    sub = np.where(first, sub - layout.half_count, sub)
    bucket = np.where(first, 0, bucket)
    low = sub << (bucket + layout.unit_mag)
    size = np.left_shift(np.int64(1), bucket + layout.unit_mag)
    high = low + size - 1
    mid = low + (size >> 1)
    for a in (low, high, mid):
        a.flags.writeable = False
    return low, high, mid


@lru_cache(maxsize=8)
def _midf(layout: Layout) -> np.ndarray:
    return _tables(layout)[2].astype(np.float64)


DEFAULT = Layout(LOWEST, HIGHEST, SIGFIGS)


@lru_cache(maxsize=4096)
def _ci_ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    """Order-statistic ranks (1-based) l, u with P(X_(l) <= x_q <= X_(u)) >= confidence:
    the number of samples below x_q is Binomial(n, q); l = the a/2 quantile of it, u =
    the 1 - a/2 quantile + 1 (a = 1 - confidence)."""
    from scipy.stats import binom

    a = (1.0 - confidence) / 2.0
    lo, hi = binom.ppf([a, 1.0 - a], n, q)
    return int(lo), int(hi) + 1


_EMPTY = np.zeros(0, dtype=np.int64)


class Hist:
    """A histogram, stored sparsely: the sorted bucket indices that hold samples (`idx`)
    and their counts (`cnt`), under a bucket layout. A latency histogram fills a few
    thousand of the ~28,000 buckets, so adding, merging and querying cost little and
    allocate little (dense arrays are available as `counts`). Immutable by
    convention except through `add`."""

    __slots__ = ("layout", "idx", "cnt", "_cum")

    def __init__(self, layout: Layout = DEFAULT, idx: np.ndarray | None = None, cnt: np.ndarray | None = None):
        self.layout = layout
        self.idx = _EMPTY if idx is None else idx
        self.cnt = _EMPTY if cnt is None else cnt
        self._cum: np.ndarray | None = None

    # -- building ----------------------------------------------------------------

    @classmethod
    def from_counts(cls, counts: np.ndarray, layout: Layout = DEFAULT) -> Hist:
        """From a dense counts array (one count per bucket index)."""
        counts = np.asarray(counts)
        nz = np.flatnonzero(counts)
        return cls(layout, nz.astype(np.int64), counts[nz].astype(np.int64))

    @classmethod
    def from_values(cls, values: Iterable[int] | np.ndarray, layout: Layout = DEFAULT) -> Hist:
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0:
            return cls(layout)
        v = np.clip(v, 0, layout.highest)
        counts = np.bincount(layout.index_of(v))
        return cls.from_counts(counts, layout)

    @classmethod
    def decode(cls, b64: str) -> Hist:
        """A V2 base64 payload (what an interval-log line carries)."""
        return _decode(*_inflate(b64))

    def encode(self) -> str:
        """The V2 base64 payload, encoded by `hdrh` (for fixtures and benchmarks)."""
        from hdrh.histogram import HdrHistogram

        h = HdrHistogram(self.layout.lowest, self.layout.highest, self.layout.sigfigs)
        if len(self.idx):
            arr = np.ctypeslib.as_array(h.counts)
            arr[self.idx] = self.cnt
            h.set_internal_tacking_values(int(self.idx[0]), int(self.idx[-1]), self.total)
        return h.encode().decode("ascii")

    @property
    def counts(self) -> np.ndarray:
        """The dense counts array (counts_len)."""
        out = np.zeros(self.layout.counts_len, dtype=np.int64)
        out[self.idx] = self.cnt
        return out

    def copy(self) -> Hist:
        return Hist(self.layout, self.idx.copy(), self.cnt.copy())

    def add(self, other: Hist) -> Hist:
        if other.layout != self.layout:
            raise ValueError(f"cannot add histograms of layouts {self.layout} and {other.layout}")
        merged = Hist.merge([self, other], self.layout)
        self.idx, self.cnt, self._cum = merged.idx, merged.cnt, None
        return self

    @staticmethod
    def merge(hists: Iterable[Hist], layout: Layout | None = None) -> Hist:
        """The sum of several histograms (of one layout), in one pass."""
        hs = [h for h in hists]
        if layout is None:
            layout = hs[0].layout if hs else DEFAULT
        if any(h.layout != layout for h in hs):
            raise ValueError("cannot merge histograms of different layouts")
        hs = [h for h in hs if len(h.idx)]
        if not hs:
            return Hist(layout)
        if len(hs) == 1:
            return Hist(layout, hs[0].idx, hs[0].cnt)
        # accumulate in a reused dense buffer (each input's indices are unique, so a
        # fancy-indexed += is exact), read back the touched window, zero it again
        buf = _scratch(layout, "merge")
        for h in hs:
            buf[h.idx] += h.cnt
        lo, hi = min(int(h.idx[0]) for h in hs), max(int(h.idx[-1]) for h in hs) + 1
        window = buf[lo:hi]
        nz = np.flatnonzero(window)
        out = Hist(layout, nz + lo, window[nz])
        window[:] = 0
        return out

    # -- queries -----------------------------------------------------------------

    def cum(self) -> np.ndarray:
        if self._cum is None:
            self._cum = np.cumsum(self.cnt)
        return self._cum

    @property
    def total(self) -> int:
        c = self.cum()
        return int(c[-1]) if len(c) else 0

    def __len__(self) -> int:
        return self.total

    def _at(self, rank, highest: bool) -> np.ndarray:
        low, high, _ = _tables(self.layout)
        pos = np.searchsorted(self.cum(), rank, side="left")
        return (high if highest else low)[self.idx[pos]]

    def value_at_rank(self, rank: int | np.ndarray, *, highest: bool = True) -> np.ndarray:
        """The value of the `rank`-th smallest sample (1-based, clipped to 1..n), as
        its bucket's highest (or lowest) equivalent value."""
        r = np.clip(np.asarray(rank, dtype=np.int64), 1, max(self.total, 1))
        return self._at(r, highest)

    def percentiles(self, pcts: Sequence[float]) -> list[float]:
        """HdrHistogram's value at each percentile (0..100): the highest equivalent
        value of the bucket where the count first reaches round(p% x n) (lowest
        equivalent for p = 0). NaN when empty."""
        n = self.total
        if n == 0:
            return [math.nan] * len(pcts)
        cum, idx = self.cum(), self.idx
        low, high, _ = _tables(self.layout)
        out = []
        for p in pcts:  # scalar searches: a few, on a short array
            p = min(float(p), 100.0)
            i = idx[cum.searchsorted(max(int(p * n / 100.0 + 0.5), 1))]
            out.append(float(high[i] if p > 0 else low[i]))
        return out

    def percentile(self, pct: float) -> float:
        return self.percentiles([pct])[0]

    def mean(self) -> float:
        """Each bucket counted at its middle value, as HdrHistogram does."""
        n = self.total
        return float(np.dot(self.cnt, _midf(self.layout)[self.idx]) / n) if n else math.nan

    def min(self) -> float:
        return float(_tables(self.layout)[0][self.idx[0]]) if len(self.idx) else math.nan

    def max(self) -> float:
        return float(_tables(self.layout)[1][self.idx[-1]]) if len(self.idx) else math.nan

    def count_above(self, value: float) -> int:
        """Samples whose bucket lies wholly above `value`."""
        low, _, _ = _tables(self.layout)
        return int(self.cnt[low[self.idx] > value].sum())

    def quantile_ci(self, q: float, confidence: float = 0.95) -> tuple[float, float]:
        """A distribution-free confidence interval for the q-quantile from order
        statistics (see _ci_ranks). The bounds are the lowest equivalent value of
        rank l and the highest equivalent value of rank u, so the histogram's
        quantisation widens, never narrows, the interval. An end whose rank falls
        outside 1..n is unbounded (0 or inf): too few samples for this q."""
        n = self.total
        if n == 0:
            return (math.nan, math.nan)
        lo_rank, hi_rank = _ci_ranks(n, float(q), float(confidence))
        lo = float(self._at(np.int64(lo_rank), False)) if lo_rank >= 1 else 0.0
        hi = float(self._at(np.int64(hi_rank), True)) if hi_rank <= n else math.inf
        return (lo, hi)


# -- the V2 encoding ----------------------------------------------------------------

_V2_ENCODING = 0x1C849303
_V2_COMPRESSION = 0x1C849304


def _inflate(b64: str) -> tuple[Layout, bytes]:
    """base64 -> (layout, the decompressed V2 payload: 40-byte header + varints)."""
    raw = base64.b64decode(b64)
    cookie, length = struct.unpack_from(">II", raw)
    if cookie & ~0xF0 != _V2_COMPRESSION or length != len(raw) - 8:
        raise ValueError("not a compressed V2 HdrHistogram")
    data = zlib.decompress(raw[8:])
    cookie, _len, _offset, sigfigs, lowest, highest = struct.unpack_from(">IIIIqq", data)
    if cookie & ~0xF0 != _V2_ENCODING:
        raise ValueError("not a V2 HdrHistogram encoding")
    return _layout(int(lowest), int(highest), int(sigfigs)), data


@lru_cache(maxsize=8)
def _layout(lowest: int, highest: int, sigfigs: int) -> Layout:
    return Layout(lowest, highest, sigfigs)


_SCRATCH: dict[tuple[Layout, str], np.ndarray] = {}


def _scratch(layout: Layout, use: str) -> np.ndarray:
    """A dense zeroed buffer per layout and use, reused (users zero what they touch):
    fresh large arrays cost page faults, which dominate at this size."""
    buf = _SCRATCH.get((layout, use))
    if buf is None:
        buf = _SCRATCH[(layout, use)] = np.zeros(layout.counts_len, dtype=np.int64)
    return buf


def _decode(layout: Layout, data: bytes) -> Hist:
    """Decode an inflated payload's varint counts (with `hdrh`'s C decoder) into a
    reused, zeroed dense buffer, keep the non-zero buckets, and zero them again."""
    from pyhdrh import decode  # hdrh's C extension

    buf = _scratch(layout, "decode")
    r = decode(data, 40, buf.ctypes.data, len(buf), 8)
    if not r["total"]:
        return Hist(layout)
    lo, hi = int(r["min_nonzero_index"]), int(r["max_nonzero_index"]) + 1
    window = buf[lo:hi]
    nz = np.flatnonzero(window)
    h = Hist(layout, nz + lo, window[nz])  # fancy indexing copies
    window[:] = 0
    return h


# -- interval logs ----------------------------------------------------------------

_BASE = re.compile(r"#\[BaseTime:\s*([\d.]+)")
_START = re.compile(r"#\[StartTime:\s*([\d.]+)")


@dataclass
class Interval:
    tag: str | None
    start_s: float  # relative to the log's base time (rain-client: the window start)
    length_s: float
    max: float  # as logged (already divided by the writer's max ratio)
    hist: Hist


@dataclass
class IntervalLog:
    path: Path
    start_time: float | None
    base_time: float | None
    intervals: list[Interval]

    @property
    def layout(self) -> Layout:
        return self.intervals[0].hist.layout if self.intervals else DEFAULT

    def tags(self) -> list[str]:
        seen: dict[str, None] = {}
        for iv in self.intervals:
            seen.setdefault(iv.tag or "", None)
        return list(seen)


def read_hlog(path: str | Path) -> IntervalLog:
    """Read an interval log (tagged or not) into decoded histograms."""
    path = Path(path)
    start = base = None
    out: list[Interval] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line or line[0] == "\n":
                continue
            if line[0] == "#":
                m = _BASE.match(line)
                if m:
                    base = float(m.group(1))
                    continue
                m = _START.match(line)
                if m:
                    start = float(m.group(1))
                continue
            if line[0] == '"':  # the legend
                continue
            tag = None
            if line.startswith("Tag="):
                comma = line.index(",")
                tag, line = line[4:comma], line[comma + 1 :]
            parts = line.rstrip("\n").split(",", 3)
            if len(parts) != 4:
                raise ValueError(f"{path}: not an interval line: {line[:60]!r}")
            out.append(Interval(tag, float(parts[0]), float(parts[1]), float(parts[2]), Hist.decode(parts[3])))
    if len({iv.hist.layout for iv in out}) > 1:
        raise ValueError(f"{path}: histograms of different layouts in one log")
    return IntervalLog(path, start, base, out)


def write_hlog(
    path: str | Path,
    intervals: Sequence[tuple[str, float, float, Hist]],
    *,
    start_unix_s: float = 0.0,
    max_ratio: float = 1e6,
    comment: str | None = None,
) -> Path:
    """Write (tag, start_s, length_s, hist) rows as rain-client does (hdr.c,
    hdr_log_write): comment, version, StartTime, BaseTime, legend, then
    `Tag=<tag>,<start>,<length>,<max/ratio>,<payload>` with 3 decimals."""
    import time

    path = Path(path)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(start_unix_s)))
    with open(path, "w", encoding="utf-8") as f:
        if comment is not None:
            f.write(f"#[{comment}]\n")
        f.write("#[Histogram log format version 1.3]\n")
        f.write(f"#[StartTime: {start_unix_s:.3f} (seconds since epoch), {when}]\n")
        f.write(f"#[BaseTime: {start_unix_s:.3f} (seconds since epoch)]\n")
        f.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
        for tag, start, length, h in intervals:
            mx = h.max() if h.total else 0.0
            f.write(f"Tag={tag},{start:.3f},{length:.3f},{mx / max_ratio:.3f},{h.encode()}\n")
    return path


@dataclass
class Cube:
    """Interval logs of several client hosts merged by tag and interval: cells[(tag,
    start)] is that class's histogram of that interval across hosts (intervals are
    matched by their start relative to each host's own window start)."""

    layout: Layout
    tags: list[str]
    starts: list[float]
    cells: dict[tuple[str, float], Hist]

    @cached_property
    def _whole(self) -> dict[str, Hist]:
        out = {t: Hist.merge([h for (tg, _), h in self.cells.items() if tg == t], self.layout) for t in self.tags}
        if self.tags and "all" not in out:
            out["all"] = Hist.merge(out.values(), self.layout)
        return out

    def whole(self) -> dict[str, Hist]:
        """Per tag, and 'all', the whole-window histogram."""
        return dict(self._whole)

    def interval(self, tag: str, start: float) -> Hist:
        if tag == "all" and "all" not in self.tags:
            return Hist.merge([self.cells[(t, start)] for t in self.tags if (t, start) in self.cells], self.layout)
        return self.cells.get((tag, start), Hist(self.layout))

    def interval_hists(self) -> dict[str, list[Hist]]:
        """Per tag (and 'all'): the histogram of each interval, in start order."""
        out = {t: [self.interval(t, s) for s in self.starts] for t in self.tags}
        if self.tags and "all" not in out:
            out["all"] = [self.interval("all", s) for s in self.starts]
        return out


def merge_logs(logs: Sequence[IntervalLog]) -> Cube:
    """Add the logs of several client hosts, by tag and interval start."""
    layouts = {lg.layout for lg in logs if lg.intervals}
    if len(layouts) > 1:
        raise ValueError("interval logs of different histogram layouts")
    layout = layouts.pop() if layouts else DEFAULT
    groups: dict[tuple[str, float], list[Hist]] = {}
    tags: dict[str, None] = {}
    starts: dict[float, None] = {}
    for lg in logs:
        for iv in lg.intervals:
            key = (iv.tag or "all", round(iv.start_s, 3))
            tags.setdefault(key[0], None)
            starts.setdefault(key[1], None)
            groups.setdefault(key, []).append(iv.hist)
    cells = {k: (v[0] if len(v) == 1 else Hist.merge(v, layout)) for k, v in groups.items()}
    return Cube(layout, list(tags), sorted(starts), cells)
