"""A run while it goes, read from its folder alone: each point's state (sweep.json),
the current point and segment and the run's own elapsed time and ETA (run.log's lines,
as the sweeper writes them: "point i of n, <id>: elapsed X, ETA Y" from estimate.Eta,
"<id>: segment i of n (s s)"), and the p99 of each segment and point as it lands
(its validity.json is written when it is complete) beside the model's.

Nothing here asks the running process anything: a page polls this module's answer,
and the answer is whatever the files say at that moment.
"""

from __future__ import annotations

import datetime
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..experiment.layout import SEGMENTS, VALIDITY, PointDir, RunDir
from .index import RunRow
from .measures import p99_of

_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) (.*)$")
_POINT = re.compile(r"^point (\d+) of (\d+), (\S+): elapsed (.+?), (ETA .+)$")
_SEGMENT = re.compile(r"^(\S+): segment (\d+) of (\d+) \(([\d.]+) s\)(?:, again \((\d+)\))?$")
_DURATION = re.compile(r"(?:(\d+) h (\d+) min|([\d.]+) min|([\d.]+) s)")
LANDED = 10  # the newest segments and points shown


@dataclass(frozen=True)
class LogLine:
    t: float | None  # Unix seconds (the line's time of day on the run's dates)
    text: str


def parse_log(text: str, start: float | None) -> list[LogLine]:
    """run.log's lines with their times: the log writes the time of day only, so the
    date is the run's start's, moved on a day each time the clock goes back."""
    base = datetime.datetime.fromtimestamp(start) if start is not None else None
    day = base.replace(hour=0, minute=0, second=0, microsecond=0) if base else None
    out, last = [], None
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            if raw.strip():
                out.append(LogLine(None, raw))
            continue
        t = None
        if day is not None:
            when = day + datetime.timedelta(hours=int(m[1]), minutes=int(m[2]), seconds=int(m[3]))
            if last is not None and when < last - datetime.timedelta(hours=1):
                day += datetime.timedelta(days=1)
                when += datetime.timedelta(days=1)
            last = when
            t = when.timestamp()
        out.append(LogLine(t, m[4]))
    return out


def duration_s(text: str) -> float | None:
    """estimate.fmt's text back into seconds: '12 s', '7.5 min', '1 h 05 min'."""
    m = _DURATION.search(text)
    if not m:
        return None
    if m[1] is not None:
        return int(m[1]) * 3600 + int(m[2]) * 60
    return float(m[3]) * 60 if m[3] is not None else float(m[4])


_logs: dict[Path, tuple[tuple, list[LogLine]]] = {}
_lock = threading.Lock()


def read_log(path: Path, start: float | None) -> list[LogLine]:
    try:
        st = path.stat()
        sig = (st.st_mtime_ns, st.st_size, start)
    except OSError:
        return []
    with _lock:
        hit = _logs.get(path)
    if hit is not None and hit[0] == sig:
        return hit[1]
    try:
        lines = parse_log(path.read_text(errors="replace"), start)
    except OSError:
        return []
    with _lock:
        _logs[path] = (sig, lines)
    return lines


def _landed(rd: RunDir, order: list[str]) -> list[dict]:
    """Every complete segment and point (its validity.json written), newest last."""
    found: list[tuple[float, dict]] = []
    for pid in order:
        pd = rd.point(pid)
        seg_root = pd.path / SEGMENTS
        if seg_root.is_dir():
            try:
                segs = sorted((p for p in seg_root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
            except OSError:
                segs = []
            for s in segs:
                t = _mtime(s / VALIDITY)
                if t is not None:
                    found.append((t, {"point": pid, "segment": int(s.name), "dir": PointDir(s), "model": False}))
        t = _mtime(pd.validity)
        if t is not None:
            found.append((t, {"point": pid, "segment": None, "dir": pd, "model": True}))
    found.sort(key=lambda x: x[0])
    out = []
    for t, f in found[-LANDED:]:
        d: PointDir = f.pop("dir")
        m = p99_of(d, model=f.pop("model"))
        v = d.read_verdict()
        out.append(
            f
            | {
                "at": t,
                "p99_us": m.p99_us,
                "requests": m.requests,
                "model_p99_us": m.model_p99_us,
                "ratio": m.ratio,
                "model_note": m.model_note,
                "valid": v.get("valid") if v else None,
                "failed": list(v.get("failed", [])) if v else [],
            }
        )
    return out


def _mtime(p: Path) -> float | None:
    try:
        return p.stat().st_mtime
    except OSError:
        return None


def progress(run_dir: Path, row: RunRow, now: float | None = None) -> dict:
    """What the live section of a run's page shows (JSON-ready)."""
    now = time.time() if now is None else now
    rd = RunDir(run_dir)
    sweep = rd.read_sweep()
    points = [
        {
            "id": pid,
            "status": str(st.get("status", "?")),
            "valid": st.get("valid"),
            "attempts": st.get("attempts"),
            "reason": st.get("reason"),
            "wall_s": st.get("wall_s"),
        }
        for pid, st in sweep.items()
    ]
    lines = read_log(rd.log, row.started)
    current, eta = None, None
    for line in lines:
        if m := _POINT.match(line.text):
            current = {"point": m[3], "index": int(m[1]), "of": int(m[2]), "segment": None, "since": line.t}
            eta = {"text": m[5], "at": line.t, "s": duration_s(m[5]), "at_least": "at least" in m[5]}
        elif (m := _SEGMENT.match(line.text)) and current is not None and m[1] == current["point"]:
            current |= {"segment": int(m[2]), "segments": int(m[3]), "segment_s": float(m[4]), "again": m[5]}
            current["segment_since"] = line.t
    state = row.state(now)
    if state != "running":
        current = None
    left = None
    if state == "running" and eta is not None and eta["s"] is not None and eta["at"] is not None:
        left = max(0.0, eta["s"] - (now - eta["at"]))
    counts = {s: sum(1 for p in points if p["status"] == s) for s in ("done", "running", "todo", "failed")}
    problems = []
    if not rd.log.exists():
        problems.append("no run.log: the current point and the ETA are not known")
    return {
        "id": row.id,
        "state": state,
        "row": {
            "kind": row.kind,
            "k": row.k,
            "valid": row.valid,
            "claims_held": row.claims_held,
            "claims_total": row.claims_total,
        },
        "now": now,
        "total": row.total,
        "counts": counts,
        "points": points,
        "current": current,
        "elapsed_s": row.duration_s(now),
        "eta": eta,
        "eta_left_s": left,
        "landed": _landed(rd, list(sweep)),
        "log_tail": [ln.text for ln in lines[-8:]],
        "problems": problems,
        "written_s_ago": max(0.0, now - row.last_write) if row.last_write else None,
    }


__all__ = ["LogLine", "duration_s", "parse_log", "progress", "read_log"]
