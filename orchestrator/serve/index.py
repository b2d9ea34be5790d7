"""The runs under a results root: one row per run folder (a folder holding manifest.json
or sweep.json, at any depth: results/<experiment>/<ts>/ and results/sim/<fig>/<ts>/
alike), with what the runs page shows of it.

A row costs a few file reads, and a finished run's claims cost reading its summary;
rows are cached on the modification times of the files they are made of, so listing
hundreds of runs again reads nothing but their directories and a few stats. What
depends on the clock (a run's state, the duration of one still going) is computed
when asked, from the cached times.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import RainmakerError
from ..experiment.layout import MANIFEST, POINTS, RUN_LOG, SUMMARY, SWEEP, VALIDITY, RunDir
from ..experiment.points import experiment_name, testbed_kind

_MAX_DEPTH = 6  # results/sim/<fig>/<ts> is 3 deep; deeper folders are not runs `rainmaker` writes
QUIET_S = 900.0  # a run not finished that wrote nothing for this long is said to have stopped
_STAMP = re.compile(r"^(\d{8})-(\d{6})$")

FINISHED, RUNNING, STOPPED, INTERRUPTED, UNKNOWN = "finished", "running", "stopped", "interrupted", "unknown"


def find_runs(root: Path) -> list[Path]:
    """Every run folder under root (not root itself), sorted by path; a run's own
    subfolders are not searched (its points are not runs)."""
    out: list[Path] = []

    def walk(d: str, depth: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        names = {e.name for e in entries}
        if depth and (MANIFEST in names or SWEEP in names):
            out.append(Path(d))
            return
        if depth >= _MAX_DEPTH:
            return
        for e in entries:
            try:
                sub = e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            except OSError:
                continue
            if sub:
                walk(e.path, depth + 1)

    walk(str(root), 0)
    return sorted(out)


@dataclass(frozen=True)
class RunRow:
    """What the runs page shows of one run; times are Unix seconds."""

    id: str  # the folder relative to the results root, with '/'
    experiment: str
    kind: str  # manifest.json's testbed.kind: emulated, simulated, hardware, ...
    started: float | None
    k: float | None
    total: int  # points planned (sweep.json, else the manifest's)
    done: int
    failed: int
    valid: int  # done points whose verdict is valid
    running: str | None  # the point sweep.json says is running
    claims_held: int | None  # None: no summary yet, or the spec states no claims
    claims_total: int | None
    last_finish: float | None  # the last point's end (sweep.json)
    last_write: float  # the newest of run.log's and sweep.json's mtimes
    interrupted: bool  # run.log's last line says the run was interrupted
    analysed: bool  # summary.parquet exists
    problems: tuple[str, ...] = field(default=())

    def state(self, now: float | None = None) -> str:
        if self.total and self.done + self.failed >= self.total:
            return FINISHED
        if self.interrupted:
            return INTERRUPTED
        if not self.total:
            return UNKNOWN
        now = time.time() if now is None else now
        return RUNNING if now - self.last_write < QUIET_S else STOPPED

    def duration_s(self, now: float | None = None) -> float | None:
        if self.started is None:
            return None
        if self.state(now) == RUNNING:
            end = time.time() if now is None else now
        elif self.last_finish is not None:
            end = self.last_finish
        else:  # stopped before any point ended: not known
            return None
        return max(0.0, end - self.started)

    def as_dict(self, now: float | None = None) -> dict:
        return asdict(self) | {"state": self.state(now), "duration_s": self.duration_s(now)}


def stamp_time(name: str) -> float | None:
    """The local time a run folder's name (YYYYmmdd-HHMMSS) gives, or None."""
    m = _STAMP.match(name)
    if not m:
        return None
    try:
        return time.mktime(time.strptime(name, "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return None


def _k(manifest: dict) -> float | None:
    """The run's dilation: the one chosen (auto), else the planned points' single k,
    else the calibration's."""
    dil = manifest.get("dilation")
    if isinstance(dil, dict) and _num(dil.get("k")):
        return float(dil["k"])
    pts = manifest.get("points")
    ks = (
        {float(p["dilation"]) for p in pts if isinstance(p, dict) and _num(p.get("dilation"))}
        if isinstance(pts, list)
        else set()
    )
    if len(ks) == 1:
        return ks.pop()
    cal = manifest.get("calibration")
    if isinstance(cal, dict) and _num(cal.get("k")):
        return float(cal["k"])
    return None


def _point_k(rd: RunDir) -> float | None:
    """A point's k (its point.json), for a manifest that lists no planned points."""
    try:
        with os.scandir(rd.path / POINTS) as it:
            first = next((e.name for e in it if e.is_dir()), None)
    except OSError:
        return None
    k = (rd.point(first).read_point() or {}).get("dilation") if first else None
    return float(k) if _num(k) else None


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _last_line(path: Path, tail: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def claims_of(run_dir: Path) -> tuple[int, int] | None:
    """(held, total) of the claims the run's spec states, judged on its summary as
    `rainmaker claims` judges them; None without a summary or claims. Reads only:
    a summary analysed before the intervals existed is judged as it is."""
    from ..experiment.analyze import read_summary
    from ..experiment.claims import HOLDS, evaluate_all, spec_with_claims

    rd = RunDir(run_dir)
    if not rd.summary.is_file():
        return None
    spec, _ = spec_with_claims(run_dir)
    if not spec.claims:
        return None
    verdicts = evaluate_all(spec, read_summary(run_dir))  # the file exists: read, never analysed
    return sum(1 for v in verdicts if v.verdict == HOLDS), len(verdicts)


def damaged(rd: RunDir) -> list[str]:
    """What is wrong with the run's own files, each named: manifest.json and sweep.json
    apart (either may be cut mid-write), then the rest of RunDir.check's shape checks."""
    out = []
    for f, shape in ((rd.manifest, "an object"), (rd.sweep, "an object whose `points` maps ids to states")):
        if not f.exists():
            continue
        try:
            obj = json.loads(f.read_bytes())
        except OSError as e:
            out.append(f"{f.name} cannot be read: {e.strerror}")
            continue
        except ValueError as e:
            out.append(f"{f.name} is damaged (cut mid-write?): not JSON ({e})")
            continue
        pts = obj.get("points") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or (
            f == rd.sweep and not (isinstance(pts, dict) and all(isinstance(v, dict) for v in pts.values()))
        ):
            out.append(f"{f.name} is damaged: {shape} was expected")
    if not out:
        try:
            rd.check(manifest=False)
        except RainmakerError as e:
            out.append(e.message)
    return out


def make_row(root: Path, path: Path) -> RunRow:
    """One run's row; what cannot be read is named in `problems`, never raised."""
    rd = RunDir(path)
    problems = damaged(rd)
    manifest = rd.read_manifest()
    sweep = rd.read_sweep()
    statuses = [st.get("status") for st in sweep.values()]
    planned = manifest.get("points") if isinstance(manifest.get("points"), list) else []
    valid = 0
    for pid, st in sweep.items():
        if st.get("status") != "done":
            continue
        v = rd.point(pid).read_verdict()
        ok = v.get("valid") if v is not None else st.get("valid")
        valid += ok is True
    finishes = [st["finished"] for st in sweep.values() if _num(st.get("finished"))]
    mtimes = [_mtime(rd.log), _mtime(rd.sweep), _mtime(rd.manifest)]
    claims = None
    try:
        claims = claims_of(path)
    except Exception as e:  # a summary or spec the claims cannot read: the row says so, the listing goes on
        problems.append(f"claims not judged: {getattr(e, 'message', e)}")
    created = manifest.get("created_unix")
    return RunRow(
        id=path.relative_to(root).as_posix(),
        experiment=experiment_name(path, manifest),
        kind=testbed_kind(manifest),
        started=float(created) if _num(created) else stamp_time(path.name),
        k=_k(manifest) or _point_k(rd),
        total=len(sweep) or len(planned),
        done=statuses.count("done"),
        failed=statuses.count("failed"),
        valid=valid,
        running=next((pid for pid, st in sweep.items() if st.get("status") == "running"), None),
        claims_held=claims[0] if claims else None,
        claims_total=claims[1] if claims else None,
        last_finish=max(finishes) if finishes else None,
        last_write=max(mtimes),
        interrupted="interrupted" in _last_line(rd.log),
        analysed=rd.summary.is_file(),
        problems=tuple(problems),
    )


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def signature(path: Path) -> tuple:
    """What a row is made of, as (name, mtime_ns, size) of each file: a row is made
    again when one of them changes."""
    names = [MANIFEST, SWEEP, SUMMARY, RUN_LOG]
    try:
        with os.scandir(path / POINTS) as it:
            names += sorted(f"{POINTS}/{e.name}/{VALIDITY}" for e in it if e.is_dir())
    except OSError:
        pass
    sig = []
    for n in names:
        try:
            st = os.stat(path / n)
            sig.append((n, st.st_mtime_ns, st.st_size))
        except OSError:
            sig.append((n, None, None))
    return tuple(sig)


class Index:
    """The rows of a results root, cached per run folder on signature()."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._rows: dict[Path, tuple[tuple, RunRow]] = {}
        self._lock = threading.Lock()

    def rows(self) -> list[RunRow]:
        paths = find_runs(self.root)
        out = []
        for p in paths:
            out.append(self.row(p))
        with self._lock:  # forget runs that were moved away
            for gone in set(self._rows) - set(paths):
                del self._rows[gone]
        return out

    def row(self, path: Path) -> RunRow:
        sig = signature(path)
        with self._lock:
            hit = self._rows.get(path)
        if hit is not None and hit[0] == sig:
            return hit[1]
        row = make_row(self.root, path)
        with self._lock:
            self._rows[path] = (sig, row)
        return row

    def resolve(self, run_id: str) -> Path | None:
        """The run folder an id names, or None when it names none under the root (a
        path that leaves the root included)."""
        if not run_id or run_id.startswith("/") or "\\" in run_id:
            return None
        root = self.root
        try:
            path = (root / run_id).resolve()
            path.relative_to(root)
        except (OSError, ValueError):
            return None
        if path == root or not path.is_dir():
            return None
        if not ((path / MANIFEST).exists() or (path / SWEEP).exists()):
            return None
        return path

    def run_id(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def sort_rows(rows: list[RunRow], key: str, descending: bool, now: float | None = None) -> list[RunRow]:
    """The rows by one of the runs page's columns; unknown values last."""
    now = time.time() if now is None else now

    def value(r: RunRow):
        v = {
            "experiment": r.experiment,
            "testbed": r.kind,
            "date": r.started,
            "k": r.k,
            "points": (r.valid / r.total) if r.total else None,
            "claims": (r.claims_held / r.claims_total) if r.claims_total else None,
            "duration": r.duration_s(now),
            "state": r.state(now),
        }.get(key, r.started)
        return v

    known = [r for r in rows if value(r) is not None]
    unknown = [r for r in rows if value(r) is None]
    return sorted(known, key=lambda r: (value(r), r.id), reverse=descending) + unknown


SORT_KEYS = ("date", "experiment", "testbed", "k", "points", "claims", "duration", "state")
