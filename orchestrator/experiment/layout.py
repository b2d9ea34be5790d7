"""The run folder: every file of a run, where it is, who writes it and who reads it.

    results/<experiment>/<YYYYmmdd-HHMMSS>/      RunDir: one per run, never overwritten
      manifest.json         provenance                      run.py      -> analysis, plots, report
      sweep.json            each point's state and verdict  sweep.py    -> sweep.py (resume), analysis
      run.log               the run's log lines             run.py      -> people
      preflight.json        each machine's checks before the sweep (or its resume)
                                                            run.py (orchestrator/preflight) -> people
      summary.parquet       one row per point and class     analyze.py  -> plots, report
      timeseries.parquet    p50/p99 per interval            analyze.py  -> plots
      plots/<kind>.png|svg  the figures                     plots.py    -> report
      report.md, .html      the report                      report.py   -> people
      testbeds/<id>/        a run of several testbeds (orchestrator/cluster): each one's
                            manifest, preflight, calibration/ and run.log  coordinator.py -> people
      points/<point-id>/    PointDir
        point.json          the plan's Point                point.py    -> analysis
        timing.json         seconds per phase of the point  point.py    -> people
        validity.json       the verdict                     validity.py -> analysis, report
        switch/snapshot.json   registers and counters after the load  point.py -> analysis
        switch/queue.jsonl     the switch's queues sampled during the load
                                                            queue_sampler.py -> analysis, plots
        switch/links.json      what each port's link did during the load
                                                            point.py    -> validity (links_up)
        coordinator.jsonl   adaptive points: Algorithm 1's slice moves, each with its inputs
                            and how it was carried out       coordinator.py -> plots, report
        clients/<host>/     the client host's output folder, collected over SFTP (CLIENT_FILES)
        workers/<host>/     the worker host's output folder, collected over SFTP (WORKER_FILES)
        model/              the same point simulated in paper time: a simulated point's files
          model.json        its network, seed and window, or why it failed
                                                            model_beside.py -> validity, analysis, report
        segments/<i>/       a point measured in segments: each a point folder of its own; the
                            point's clients/ and switch/queue.jsonl are then their merged window
                                                            sweeper.py, segments.py -> validity, analysis
      stalled/<point-id>/<attempt>/, s<segment>-<attempt>/  measurements the host's stalls discarded
                                                            sweeper.py  -> report

Files under clients/ and workers/ are named by the programs that write them on the
hosts (rain-client, rain-worker, the agents), which cannot import this module; the
names below are the orchestrator's side of that contract. Every reader of the run
folder goes through this module; a file is listed here only if something writes it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

# -- the run --------------------------------------------------------------------------
MANIFEST = "manifest.json"
SWEEP = "sweep.json"
RUN_LOG = "run.log"
PREFLIGHT = "preflight.json"  # orchestrator/preflight's Report, written before the sweep
SUMMARY = "summary.parquet"
TIMESERIES = "timeseries.parquet"
PLOTS = "plots"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
POINTS = "points"
CALIBRATION = "calibration"  # the calibration point (calibrate.py), laid out as a point
SERVICE_PROBE = "service-probe"  # a real handler's service times on this testbed (dilation.py), laid out as a point
STALLED = "stalled"  # stalled/<point-id>/<attempt>/: attempts a stall of the host discarded (sweeper.py)
TESTBEDS = "testbeds"  # testbeds/<id>/: a run of several testbeds, each one's own files (cluster/coordinator.py)
SEGMENTS = "segments"  # points/<point-id>/segments/<i>/: a long point's segments (segments.py)

# -- one point ------------------------------------------------------------------------
POINT = "point.json"
TIMING = "timing.json"
CPU = "cpu.json"  # shared-core testbeds: the hypervisor's steal during the load; calibration: the testbed's CPU
VALIDITY = "validity.json"
SWITCH = "switch"
SNAPSHOT = "snapshot.json"
SWITCH_QUEUE = "queue.jsonl"
COORDINATOR = "coordinator.jsonl"  # adaptive points: Algorithm 1's slice moves (coordinator.py)
LINKS = "links.json"
CLIENTS = "clients"
WORKERS = "workers"
MODEL = "model"  # the point simulated beside its measurement (model_beside.py), a simulated point's layout
MODEL_INFO = "model.json"  # model/: the model's network and its source, seed, window (or its error)

# clients/<host>/ and workers/<host>/: the agents
AGENT_OUTCOME = "agent.json"  # how the agent's program ended (written by the agent when it ends)
AGENT_LOG = "agent.log"  # the agent's own output, copied from the host's run folder

# clients/<host>/: rain-client (--out, --trace) and the client agent
LATENCY_HLOG = "latency.hlog"  # HdrHistogram interval log per class, ns
SLOWDOWN_HLOG = "slowdown.hlog"  # the same, slowdown x 1000
CLIENT_SUMMARY = "summary.json"  # rain-client's counters
TRACE = "trace.csv"  # every first send, intended and actual (short runs)
SERVER_COUNTS = "server.json"  # rpc-server's done line as numbers (its agent, hosts/agent/rpc.py)
CLIENT_FILES = {
    LATENCY_HLOG: "rain-client -> analysis, validity",
    SLOWDOWN_HLOG: "rain-client -> analysis",
    CLIENT_SUMMARY: "rain-client -> analysis, validity",
    TRACE: "rain-client --trace (when the point has at most 2 M sends) -> validity (interarrival)",
    "client.log": "rain-client's output (the client agent) -> people",
    AGENT_OUTCOME: "the client agent: rain-client's exit status -> outcome.py (the point's acceptance), people",
    AGENT_LOG: "the client agent's log (point.py copies it in) -> outcome.py, people",
    "agent-config.json": "agent_config.py: the agent's configuration -> the client agent, people",
}

# workers/<host>/: rain-worker and the worker agent
REGISTRATION = "registration.json"
WORKER_SAMPLES = "timeseries.jsonl"  # the worker agent, every sample period
DECISIONS = "decisions.jsonl"  # the worker agent's Algorithm 1, adaptive points only
WORKER_STATS = "stats.json"
WORKER_FILES = {
    REGISTRATION: "rain-worker (--registration) -> point.py: programs the switch",
    WORKER_SAMPLES: "the worker agent: per sample period and worker fifo, outstanding, quota, "
    "slice, enabled -> analysis (worker queue depth, quota)",
    DECISIONS: "the worker agent (adaptive points): each control interval's quotas -> analysis (quota)",
    WORKER_STATS: "rain-worker (--stats): its counters, rewritten periodically and at exit -> validity "
    "(tasks_intact), people",
    "worker.log": "rain-worker's output (the worker agent) -> people",
    "worker.ctl": "the shared-memory control block rain-worker and its agent share -> people",
    AGENT_OUTCOME: "the worker agent: rain-worker's exit status, lost samples -> outcome.py (the point's "
    "acceptance), people",
    AGENT_LOG: "the worker agent's log (point.py copies it in) -> outcome.py (its exit status), people",
    "agent-config.json": "agent_config.py: the agent's configuration -> the worker agent, people",
}


def _write_json(path: Path, obj: Any, indent: int | None = 1) -> Path:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=indent, default=str) + "\n")
    tmp.replace(path)
    return path


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file, skipping a torn last line; [] if missing."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


@dataclass(frozen=True)
class PointDir:
    """points/<point-id>/ of a run."""

    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def point_file(self) -> Path:
        return self.path / POINT

    @property
    def timing(self) -> Path:
        return self.path / TIMING

    @property
    def validity(self) -> Path:
        return self.path / VALIDITY

    @property
    def snapshot(self) -> Path:
        return self.path / SWITCH / SNAPSHOT

    @property
    def model(self) -> Path:
        """model/: the point simulated beside its measurement (model_beside.py)."""
        return self.path / MODEL

    @property
    def switch_queue(self) -> Path:
        return self.path / SWITCH / SWITCH_QUEUE

    @property
    def links(self) -> Path:
        return self.path / SWITCH / LINKS

    def client(self, host: str) -> Path:
        return self.path / CLIENTS / host

    def worker(self, host: str) -> Path:
        return self.path / WORKERS / host

    def host_dir(self, role: str, host: str) -> Path:
        """The folder of a host of a role ("client" or "worker")."""
        return {"client": self.client, "worker": self.worker}[role](host)

    def _hosts(self, sub: str) -> list[str]:
        d = self.path / sub
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    def client_hosts(self) -> list[str]:
        return self._hosts(CLIENTS)

    def worker_hosts(self) -> list[str]:
        return self._hosts(WORKERS)

    # -- writers (point.py, validity.py) ---------------------------------------------------
    def fresh(self) -> PointDir:
        """An empty folder: an interrupted attempt's files are not trusted."""
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        return self

    def write_point(self, point: dict) -> Path:
        return _write_json(self.point_file, point)

    def write_timing(self, timing: dict) -> Path:
        return _write_json(self.timing, timing, indent=None)

    def write_client_summary(self, host: str, summary: dict) -> Path:
        """clients/<host>/summary.json, as rain-client writes it (a merged window's)."""
        return _write_json(self.client(host) / CLIENT_SUMMARY, summary)

    def write_cpu(self, cpu: dict) -> Path:
        return _write_json(self.path / CPU, cpu)

    def read_cpu(self) -> dict | None:
        return read_json(self.path / CPU)

    def write_snapshot(self, snapshot: dict) -> Path:
        self.snapshot.parent.mkdir(exist_ok=True)
        return _write_json(self.snapshot, snapshot)

    def write_links(self, links: dict) -> Path:
        """switch/links.json: per inventory port, up at the load's start and end, link
        losses and frames dropped while down in between (None: the switch counts none)."""
        self.links.parent.mkdir(exist_ok=True)
        return _write_json(self.links, links)

    def write_verdict(self, verdict: dict) -> Path:
        return _write_json(self.validity, verdict)

    def write_switch_queue(self, samples: list[tuple[float, dict[int, int]]]) -> Path:
        """switch/queue.jsonl: one line per sample, (seconds since the load started,
        signed balance per slice); samples before the start have negative times."""
        self.switch_queue.parent.mkdir(exist_ok=True)
        rows = [{"t_s": round(t, 4), "balance": {str(s): int(v) for s, v in sorted(b.items())}} for t, b in samples]
        tmp = self.switch_queue.with_name(f".{SWITCH_QUEUE}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(self.switch_queue)
        return self.switch_queue

    def write_coordinator(self, rows: list[dict]) -> Path:
        """coordinator.jsonl: per control interval the coordinator acted on, the summed
        slice view and its moves, each with how it was carried out."""
        path = self.path / COORDINATOR
        tmp = path.with_name(f".{COORDINATOR}.tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
        tmp.replace(path)
        return path

    # -- readers -------------------------------------------------------------------------
    def read_coordinator(self) -> list[dict]:
        """The coordinator's rows: {"t", "labels", "overload", "idleness", "moves": [{worker,
        src, dst, why, ...}]}; empty for a point that does not adapt."""
        return [r for r in read_jsonl(self.path / COORDINATOR) if isinstance(r.get("moves", []), list)]

    def read_point(self) -> dict | None:
        p = read_json(self.point_file)
        return p if isinstance(p, dict) else None

    def read_status(self) -> str | None:
        """The point's status in its run's sweep.json (todo, running, done, failed)."""
        st = RunDir(self.path.parent.parent).read_sweep().get(self.id, {}).get("status")
        return st if isinstance(st, str) else None

    def read_snapshot(self) -> dict | None:
        s = read_json(self.snapshot)
        return s if isinstance(s, dict) else None

    def read_verdict(self) -> dict | None:
        """validity.json, or None when it is missing, unreadable or not what validity.py
        writes (then the analysis checks the point again)."""
        v = read_json(self.validity)
        if not isinstance(v, dict) or not isinstance(v.get("valid"), bool):
            return None
        checks, failed = v.get("checks", []), v.get("failed", [])
        if not isinstance(checks, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in checks
        ):
            return None
        if not isinstance(failed, list) or not all(isinstance(f, str) for f in failed):
            return None
        return v

    def read_links(self) -> dict | None:
        """switch/links.json ({"window_s", "ports": [{port, dev_port, hosts, up_before,
        up_after, link_down_events, frames_dropped_port_down}]}); None if missing or unreadable."""
        v = read_json(self.links)
        return v if isinstance(v, dict) and isinstance(v.get("ports"), list) else None

    def read_switch_queue(self) -> list[dict]:
        """Samples of the switch's queues: {"t_s": seconds since the load started,
        "balance": {slice: signed token balance}} (negative: tasks queued)."""
        return [
            r for r in read_jsonl(self.switch_queue) if isinstance(r.get("balance"), dict) and _number(r.get("t_s"))
        ]

    def read_worker_samples(self, host: str) -> list[dict]:
        """The worker agent's periodic samples: {"t": s since the agent started,
        "workers": [{"fifo", "outstanding", "quota", "enabled", ...} per worker]}; lines of
        another shape are skipped, as torn ones are (so in the other readers)."""
        rows = read_jsonl(self.worker(host) / WORKER_SAMPLES)
        return [
            r
            for r in rows
            if isinstance(r.get("workers", []), list) and all(isinstance(w, dict) for w in r.get("workers", []))
        ]

    def read_worker_stats(self, host: str) -> dict | None:
        """rain-worker's counters (its last --stats file): drops by reason, the RoCE
        counters, one entry per worker thread; None when missing or unreadable."""
        s = read_json(self.worker(host) / WORKER_STATS)
        return s if isinstance(s, dict) else None

    def read_decisions(self, host: str) -> list[dict]:
        """The worker agent's decisions: {"t", "changes", "quotas": [per worker], ...}."""
        return [r for r in read_jsonl(self.worker(host) / DECISIONS) if isinstance(r.get("quotas", []), list)]


@dataclass(frozen=True)
class RunDir:
    """results/<experiment>/<timestamp>/."""

    path: Path

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    @classmethod
    def new(cls, results_root: Path, experiment: str, stamp: str) -> RunDir:
        d = cls(Path(results_root) / experiment / stamp)
        d.path.mkdir(parents=True, exist_ok=False)
        return d

    @classmethod
    def to_resume(cls, path: str | Path) -> RunDir:
        """An existing run's folder, to continue (`--resume`): refused unless it has a sweep."""
        d = cls(path)
        if not d.sweep.exists():
            raise UsageError(f"{d.path} is not a run directory (no {SWEEP})", fix="pass the folder a run printed")
        return d

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def sweep(self) -> Path:
        return self.path / SWEEP

    @property
    def log(self) -> Path:
        return self.path / RUN_LOG

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def timeseries(self) -> Path:
        return self.path / TIMESERIES

    @property
    def calibration(self) -> PointDir:
        return PointDir(self.path / CALIBRATION)

    @property
    def service_probe(self) -> PointDir:
        return PointDir(self.path / SERVICE_PROBE)

    @property
    def plots(self) -> Path:
        return self.path / PLOTS

    @property
    def report_md(self) -> Path:
        return self.path / REPORT_MD

    @property
    def report_html(self) -> Path:
        return self.path / REPORT_HTML

    def point(self, point_id: str) -> PointDir:
        return PointDir(self.path / POINTS / point_id)

    def stalled(self, point_id: str) -> list[PointDir]:
        """The attempts of a point discarded because the host stalled its client, in
        order: <attempt>/ of a point measured whole, s<segment>-<attempt>/ of a segment."""
        root = self.path / STALLED / point_id
        dirs = [PointDir(p) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []

        def order(d: PointDir) -> tuple[int, int]:
            if d.id.isdigit():
                return (0, int(d.id))
            seg, _, attempt = d.id.removeprefix("s").partition("-")
            return (int(seg), int(attempt)) if seg.isdigit() and attempt.isdigit() else (1 << 30, 0)

        return sorted(dirs, key=order)

    def set_aside_segment(self, point_id: str, segment: int, attempt: int) -> PointDir:
        """Move a segment's folder (segments.py) to stalled/<point-id>/s<segment>-<attempt>/."""
        source = self.point(point_id).path / SEGMENTS / str(segment)
        return self._stall(source, Path(point_id, f"s{segment}-{attempt}"))

    def set_aside(self, point_id: str, attempt: int) -> PointDir:
        """Move a point's folder to stalled/<point-id>/<attempt>/ before it is measured again:
        the discarded attempt stays on disk to be read, out of the analysis's way."""
        return self._stall(self.point(point_id).path, Path(point_id, str(attempt)))

    def set_aside_probe(self, attempt: int) -> PointDir:
        """Move the service probe's folder to stalled/service-probe/<attempt>/ before it is
        measured again (dilation.probe_service), as a stalled point's is."""
        return self._stall(self.service_probe.path, Path(SERVICE_PROBE, str(attempt)))

    def _stall(self, source: Path, under: Path) -> PointDir:
        """Move source to stalled/<under>/, replacing what an earlier run left there."""
        dest = self.path / STALLED / under
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(dest))
        return PointDir(dest)

    def points(self) -> list[PointDir]:
        """Point folders in plan order (point.json's index, then name)."""
        root = self.path / POINTS
        if not root.is_dir():
            return []
        dirs = [PointDir(p) for p in root.iterdir() if p.is_dir()]

        def order(d: PointDir) -> tuple:
            index = (d.read_point() or {}).get("index")
            return (index if isinstance(index, int) else 1 << 30, d.id)

        return sorted(dirs, key=order)

    def __iter__(self) -> Iterator[PointDir]:
        return iter(self.points())

    # -- read-side checks (analysis, plots, report) --------------------------------------
    def check(self, *, manifest: bool = True) -> RunDir:
        """Refuse, before anything reads or writes it, a folder that is not a run
        `rainmaker run` wrote or whose run-level files are damaged: a UsageError naming
        the file, with a fix. A damaged file of one point is that point's business (its
        verdict says so), never a reason to refuse the run. manifest=False: a folder of
        points without manifest.json will do (the analysis then checks validity with
        the default thresholds); the figures and the report need the provenance."""
        where = "give the run folder `rainmaker run` printed (results/<experiment>/<timestamp>)"
        if not self.path.is_dir():
            what = "is not a folder" if self.path.exists() else "does not exist"
            raise UsageError(f"{self.path} {what}", fix=where)
        if not (self.manifest.exists() or self.sweep.exists() or (self.path / POINTS).exists()):
            raise UsageError(f"{self.path} is not a run folder: it has no {MANIFEST}, {SWEEP} or {POINTS}/", fix=where)
        if manifest and not self.manifest.exists():
            raise UsageError(
                f"{self.manifest} is missing: the run's spec and provenance are not known", fix=_NEW_MANIFEST
            )
        if self.manifest.exists():
            content = _run_file(self.manifest, "an object (the run's provenance)", _NEW_MANIFEST)
            if not isinstance(content, dict):
                raise _damaged(self.manifest, f"a JSON object was expected, found {_kind(content)}", _NEW_MANIFEST)
        if self.sweep.exists():
            sweep = _run_file(self.sweep, "an object with the points' states", _SWEEP_AWAY)
            pts = sweep.get("points") if isinstance(sweep, dict) else None
            if not isinstance(pts, dict) or not all(isinstance(v, dict) for v in pts.values()):
                raise _damaged(
                    self.sweep,
                    "a JSON object whose `points` maps each point id to its state was expected",
                    _SWEEP_AWAY,
                )
        for name in (POINTS, PLOTS):
            if (self.path / name).exists() and not (self.path / name).is_dir():
                raise UsageError(
                    f"{self.path / name} is a file where the run keeps its {name} folder",
                    fix="move it away (its name is taken by the run's folder)",
                )
        for name in (SUMMARY, TIMESERIES, REPORT_MD, REPORT_HTML, RUN_LOG):
            if (self.path / name).is_dir():
                raise UsageError(
                    f"{self.path / name} is a folder where the run keeps its {name}",
                    fix="move it away (its name is taken by the run's file)",
                )
        return self

    def write_manifest(self, manifest: dict) -> Path:
        return _write_json(self.manifest, manifest)

    def read_manifest(self) -> dict:
        m = read_json(self.manifest)
        return m if isinstance(m, dict) else {}

    def read_sweep(self) -> dict[str, dict]:
        """point id -> its state in sweep.json (status, attempts, reason, valid, ...);
        {} without one (sweep.py owns the format and writes it)."""
        s = read_json(self.sweep)
        pts = s.get("points") if isinstance(s, dict) else None
        return {k: v for k, v in pts.items() if isinstance(v, dict)} if isinstance(pts, dict) else {}


_NEW_MANIFEST = (
    "restore it from a copy of the run, or move it away: `rainmaker run SPEC --resume RUN_DIR` then writes "
    "a new one (with today's provenance)"
)


def _kind(obj: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null"}.get(type(obj), type(obj).__name__)


_SWEEP_AWAY = "restore it from a copy of the run, or move it away: the points are then analysed without their status"


def _damaged(path: Path, why: str, fix: str) -> UsageError:
    return UsageError(f"{path} is damaged: {why}", fix=fix)


def _run_file(path: Path, expected: str, fix: str) -> Any:
    """A run-level JSON file's content; a UsageError naming it when it is not one."""
    if path.is_dir():
        raise _damaged(path, "it is a folder, not a file", fix)
    try:
        return json.loads(path.read_bytes())
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}", fix="check its permissions") from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise _damaged(path, f"not JSON ({e}); {expected} was expected", fix) from None


def atomic_replace(path: Path, text: str) -> None:
    """Write text to path through a temporary file and fsync (sweep.json's writes)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


SIMULATED_TOOL = "rainmaker simulate"  # summary.json's "tool" of a simulated point (orchestrator/simulate)
