"""The run folder's one owner (orchestrator/experiment/layout.py): what the runner's
switch-queue sampler writes is what the analysis reads; the names the host programs
write under clients/ and workers/ are the layout's; and docs/results.md describes
every file the layout names."""

from __future__ import annotations

import ast
import math
import threading
import time
from pathlib import Path

import pytest

from hosts.agent.client import client_argv
from hosts.agent.worker import worker_argv
from orchestrator.experiment import layout
from orchestrator.experiment.analyze import queue_depths, switch_queue_series
from orchestrator.experiment.layout import PointDir, RunDir
from orchestrator.experiment.queue_sampler import QueueSampler
from switch.bfrt.errors import BfrtError
from switch.control import RainController

REPO = Path(__file__).resolve().parents[2]


class _Balance:
    """The controller's bidir_queue.balance register as the sampler reads it: one
    value per pipe; the value follows a script of (balance per slice) per read."""

    def __init__(self, script: list[dict[int, int]], pipes: int = 2, fail_after: int | None = None):
        self.script, self.pipes, self.fail_after = script, pipes, fail_after
        self.reads = 0
        self.lock = threading.Lock()

    def _next(self) -> dict[int, int]:
        with self.lock:
            if self.fail_after is not None and self.reads >= self.fail_after:
                raise BfrtError("Read failed: UNAVAILABLE: the switch went away")
            row = self.script[min(self.reads, len(self.script) - 1)]
            self.reads += 1
            return row

    def read(self, index: int) -> list[int]:
        v = self._next()[index]
        return [999] * (self.pipes - 1) + [v]  # only the Rain pipe's cell counts

    def read_all(self) -> list[list[int]]:
        row = self._next()
        return [[999] * (self.pipes - 1) + [row.get(i, 0)] for i in range(16)]


class _Ctl:
    """The controller as the sampler uses it: its own balances() over a scripted register."""

    balances = RainController.balances

    def __init__(self, balance: _Balance, slices=(0,)):
        self.bidir_queue = type("BQ", (), {"balance": balance})()
        self.pipe = balance.pipes - 1
        self.slices = {s: object() for s in slices}


def _wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail("timed out")
        time.sleep(0.01)


def test_the_samplers_series_is_what_the_analysis_reads(tmp_path):
    rd = RunDir.new(tmp_path, "x", "t")
    pd = rd.point("rain-f0.5-r1")
    pd.path.mkdir(parents=True)
    script = [{0: 3, 1: -1}, {0: -2, 1: -5}, {0: 0, 1: 4}]
    bal = _Balance(script)
    s = QueueSampler(_Ctl(bal, slices=(0, 1)), expected_s=0.1)
    _wait_for(lambda: len(s.samples) >= 2)
    s.load_started(s.samples[1][0] + 0.001)  # the clients' signals were delivered just after read 2
    _wait_for(lambda: bal.reads >= 5)
    cost = s.stop(pd)
    n = cost["samples"]
    assert n >= 5 and cost["error"] is None and cost["read_ms_median"] is not None
    series = switch_queue_series(pd)
    assert len(series) == n
    # tasks = queued tasks (negative balance), tokens = positive, summed over slices
    assert [(tasks, tokens) for _, tasks, tokens in series[:4]] == [(1, 3), (7, 0), (0, 4), (0, 4)]
    ts = [t for t, _, _ in series]
    assert ts == sorted(ts) and ts[0] < ts[1] < 0 <= ts[2]  # time 0: the load's start
    # bounded rate: never faster than MAX_HZ
    assert all(b - a >= 0.95 / QueueSampler.MAX_HZ for a, b in zip(ts, ts[1:]))
    q = queue_depths(pd, {"warmup_s": 0.0, "measure_s": 100.0})
    assert q["switch_queue_max"] == 0.0 and math.isnan(q["worker_queue_mean"])  # 7 was before the start


def test_one_slice_is_one_small_read_and_the_period_stretches_for_long_points(tmp_path):
    pd = PointDir(tmp_path / "p")
    pd.path.mkdir()
    bal = _Balance([{0: -4}])
    s = QueueSampler(_Ctl(bal), expected_s=60.0)
    assert s.period_s == pytest.approx(60.0 / QueueSampler.MAX_SAMPLES)
    _wait_for(lambda: bal.reads >= 1)
    cost = s.stop(pd)
    assert switch_queue_series(pd)[0] == (0.0, 4, 0)  # never marked: time 0 is the first sample
    assert cost["load_start_marked"] is False


def test_a_failed_read_ends_the_series_not_the_point(tmp_path):
    pd = PointDir(tmp_path / "p")
    pd.path.mkdir()
    bal = _Balance([{0: -1}], fail_after=3)
    s = QueueSampler(_Ctl(bal), expected_s=0.1)
    _wait_for(lambda: bal.reads >= 3 and not s._thread.is_alive())
    cost = s.stop(pd)
    assert cost["samples"] == 3 and "UNAVAILABLE" in cost["error"]
    assert len(switch_queue_series(pd)) == 3


def test_the_host_programs_write_the_layouts_names(tmp_path):
    out = tmp_path / "out"
    eal = {"lcores": "0", "no_huge": True, "devices": [], "file_prefix": "x"}
    w = worker_argv(
        {
            "binary": "rain-worker",
            "eal": eal,
            "worker": {"switch_mac": "m", "switch_ip": "i", "src_ip": "s", "threads": 1, "worker_base": 0},
        },
        out,
    )
    assert w[w.index("--registration") + 1] == str(out / layout.REGISTRATION)
    assert w[w.index("--stats") + 1] == str(out / layout.WORKER_STATS)
    c = client_argv(
        {
            "binary": "rain-client",
            "eal": eal,
            "client": {
                "src_ip": "s",
                "dst_mac": "m",
                "dst_ip": "i",
                "warmup_s": 1,
                "measure_s": 1,
                "rate": 1,
                "classes": [],
                "trace": True,
            },
        },
        out,
    )
    assert c[c.index("--trace") + 1] == str(out / layout.TRACE) and c[c.index("--out") + 1] == str(out)
    # the worker agent opens its series and decisions files by these names
    tree = ast.parse((REPO / "hosts/agent/worker.py").read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert {layout.WORKER_SAMPLES, layout.DECISIONS} <= strings
    # rain-client's output files (hosts/dpdk/client/report.c)
    report_c = (REPO / "hosts/dpdk/client/report.c").read_text()
    for name in (layout.LATENCY_HLOG, layout.SLOWDOWN_HLOG, layout.CLIENT_SUMMARY):
        assert f'"{name}"' in report_c


def test_docs_results_md_names_every_file_of_the_layout():
    text = (REPO / "docs" / "results.md").read_text()
    names = [
        v
        for k, v in vars(layout).items()
        if k.isupper() and isinstance(v, str) and ("." in v or k in ("PLOTS", "POINTS", "SWITCH", "CLIENTS", "WORKERS"))
    ]
    names += list(layout.CLIENT_FILES) + list(layout.WORKER_FILES)
    missing = sorted({n for n in names if f"`{n}" not in text and f"{n}`" not in text and n not in text})
    assert not missing, f"docs/results.md does not describe {missing}"
