"""`rainmaker simulate` end to end on tiny specs (tens of thousands of tasks): the run
folder is read exactly as a measured one (analyze, plot, report through the CLI),
--ideal, --like on a measured run built here, --resume after Ctrl-C, compare, and
bad input (exit 2, a message with a fix, no traceback)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.experiment import layout
from orchestrator.experiment.analyze import analyze
from orchestrator.experiment.layout import RunDir
from tests.cli import rainmaker
from tests.unit.results_fixture import synthetic_run

TINY = """\
name: tiny
systems: [rain]
workers: {per_host_threads: 2}
workload:
  classes:
    - name: task
      service: {dist: exponential, mean_us: 10}
load: {capacity_fraction: [0.3, 0.6]}
warmup_s: 0.01
measure_s: 0.1
rain: {initial_quota: 2}
validity: {min_samples_p99: 1000}
plots: [p99_vs_load, queue_depth]
"""


@pytest.fixture()
def tiny(tmp_path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def _run_dir(out: str) -> Path:
    line = next(x for x in out.splitlines() if x.startswith("results: "))
    return Path(line.split("results: ", 1)[1].strip())


def test_a_simulated_run_is_read_as_a_measured_one(tiny, tmp_path, monkeypatch, capsys):
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(tiny), "--results", str(tmp_path / "r"), "--no-analysis", "-j", "2"
    )
    assert code == 0, err
    run = _run_dir(out)
    assert "rain-f0.3-r1:" in out and " p99 " in out  # one line per point
    m = RunDir(run).read_manifest()
    tb = m["testbed"]
    assert tb["kind"] == "simulated" and tb["workers"] == 2 and tb["threads_per_host"] == 2
    assert tb["ideal"] is False and tb["network"]["link_gbps"] == 100.0
    assert set(m["seeds"]) == {"rain-f0.3-r1", "rain-f0.6-r1"} and m["seed"] == 1
    assert m["hashes"]["simulator"]
    # plot and report through the CLI, as for a measured run
    code, out, err = rainmaker(monkeypatch, capsys, "plot", str(run))
    assert code == 0, err
    assert (run / "plots" / "p99_vs_load.png").exists() and (run / "plots" / "queue_depth.png").exists()
    code, out, err = rainmaker(monkeypatch, capsys, "report", str(run))
    assert code == 0, err
    report = (run / "report.md").read_text()
    assert "testbed: **simulated**" in report
    df = pd.read_parquet(RunDir(run).summary)
    # the same table the analysis makes of a measured run: the same columns
    measured = analyze(synthetic_run(tmp_path / "m", systems=("rain",), loads=(1000.0,), reps=1, n=400))
    assert list(df.columns) == list(measured.columns)
    rows = df[df["class"] == "all"].sort_values("load_krps")
    assert rows["valid"].all(), rows["failed_checks"].tolist()
    assert list(rows["load_krps"]) == [120.0, 240.0]  # 4 threads / 10 us x 0.3, 0.6
    assert (rows["dilation"] == 1).all() and (rows["samples"] > 10_000).all()
    assert rows["p99_us_paper"].is_monotonic_increasing
    assert rows["queuing_ratio"].notna().all() and rows["worker_queue_mean"].notna().all()
    states = json.loads(RunDir(run).sweep.read_text())["points"]
    assert {s["status"] for s in states.values()} == {"done"} and all(s["valid"] for s in states.values())


def test_the_same_seed_gives_the_same_files_and_ideal_is_faster(tiny, tmp_path):
    from orchestrator.simulate.runner import simulate

    def hlog(run: Path) -> bytes:
        return (RunDir(run).point("rain-f0.6-r1").client("client0") / layout.LATENCY_HLOG).read_bytes()

    kw = {"progress": False, "analyze_after": False, "jobs": 1}
    a = simulate(tiny, results_root=tmp_path / "a", seed=7, **kw)
    b = simulate(tiny, results_root=tmp_path / "b", seed=7, **kw)
    c = simulate(tiny, results_root=tmp_path / "c", seed=8, **kw)
    assert hlog(a) == hlog(b) != hlog(c)
    ideal = simulate(tiny, results_root=tmp_path / "i", seed=7, ideal=True, **kw)
    assert RunDir(ideal).read_manifest()["testbed"]["ideal"] is True
    net = RunDir(ideal).read_manifest()["testbed"]["network"]
    assert net["client_switch_ns"] == 0 and net["switch_pkt_ns"] == 0
    p50 = {r: analyze(r).query("`class` == 'all'").sort_values("load_krps")["p50_us"].iloc[0] for r in (a, ideal)}
    # no network: the same tasks, answered sooner (the paper's testbed adds ~2-3 us per round trip)
    assert p50[ideal] < p50[a]


def _measured_run(root: Path) -> Path:
    """A run folder as `rainmaker run` leaves it on the emulated testbed (k = 100, 2
    worker hosts of 1 thread), with only what --like reads: the manifest and the
    points' point.json."""
    run = root / "results" / "tiny" / "20260101-000000"
    for i, frac in enumerate((0.3, 0.6)):
        d = run / "points" / f"rain-f{frac:g}-r1"
        d.mkdir(parents=True)
        (d / "point.json").write_text(
            json.dumps(
                {
                    "id": f"rain-f{frac:g}-r1",
                    "index": i,
                    "system": "rain",
                    "variant": None,
                    "variant_label": None,
                    "repetition": 1,
                    "load_krps": 200 * frac,
                    "capacity_fraction": frac,
                    "offered_rps": 200 * frac * 1000 / 100,
                    "dilation": 100.0,
                    "warmup_s": 1.0,
                    "measure_s": 4.0,
                    "handler": "sleep",
                    "worker_threads": 2,
                    "params": {"initial_quota": 2, "adaptive": False},
                }
            )
        )
    spec = {
        "name": "tiny",
        "systems": ["rain"],
        "workers": {"per_host_threads": 16, "emulated_per_host_threads": 1},
        "workload": {"classes": [{"name": "task", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.3, 0.6]},
        "validity": {"min_samples_p99": 100, "max_p99_ci_width": 1.0},
        "plots": ["p99_vs_load"],
    }
    manifest = {"experiment": "tiny", "spec": spec, "testbed": {"kind": "emulated", "workers": 2, "clients": 1}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_like_simulates_the_measured_runs_points_in_paper_time(tiny, tmp_path, monkeypatch, capsys):
    measured = _measured_run(tmp_path / "m")
    code, out, err = rainmaker(
        monkeypatch,
        capsys,
        "simulate",
        str(tiny),
        "--like",
        str(measured),
        "--results",
        str(tmp_path / "r"),
        "--no-analysis",
        "-j",
        "1",
    )
    assert code == 0, err
    run = _run_dir(out)
    m = RunDir(run).read_manifest()
    assert m["testbed"]["like"] == str(measured) and m["like"]["testbed"] == "emulated"
    assert m["testbed"]["workers"] == 2 and m["testbed"]["threads_per_host"] == 1
    assert "emulated testbed's defaults at k = 100" in m["like"]["network_from"]
    # a hop of the emulated testbed in paper time: (2 us + half a 50 us nap) / 100
    assert m["testbed"]["network"]["client_switch_ns"] == 270
    for pid, load in (("rain-f0.3-r1", 60.0), ("rain-f0.6-r1", 120.0)):
        p = RunDir(run).point(pid).read_point()
        assert p["dilation"] == 1 and p["load_krps"] == load and p["offered_rps"] == load * 1000
        assert math.isclose(p["warmup_s"], 0.01) and math.isclose(p["measure_s"], 0.04)
        assert p["worker_threads"] == 2
    # compare: the measured shape and the simulation overlaid (here: two simulations of
    # the spec, the second labelled apart), and a run of another experiment refused
    other = synthetic_run(tmp_path / "o", systems=("rain",), loads=(1000.0,), reps=1, n=400)
    code, out, err = rainmaker(monkeypatch, capsys, "compare", str(run), str(other), "--out", str(tmp_path / "c"))
    assert code == 2 and "'tiny'" in err and "'demo'" in err and "--force" in err and "Traceback" not in err
    code, out, err = rainmaker(
        monkeypatch, capsys, "compare", str(run), str(other), "--force", "--out", str(tmp_path / "c")
    )
    assert code == 0, err
    assert (tmp_path / "c" / "p99_vs_load.png").exists() and (tmp_path / "c" / "p99_vs_load.svg").exists()
    svg = (tmp_path / "c" / "p99_vs_load.svg").read_text()
    assert "rain (simulated)" in svg and "rain (emulated)" in svg


def test_ctrl_c_keeps_the_done_points_and_resume_simulates_the_rest(tiny, tmp_path, monkeypatch, capsys):
    from orchestrator.simulate import writer

    real = writer.write
    calls = []

    def write_then_interrupt(*a, **kw):
        calls.append(a[0].id)
        if len(calls) == 2:  # Ctrl-C while the second point is written
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(writer, "write", write_then_interrupt)
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(tiny), "--results", str(tmp_path / "r"), "--no-analysis", "-j", "1"
    )
    assert code == 130
    run = next((tmp_path / "r" / "tiny").iterdir())
    states = json.loads(RunDir(run).sweep.read_text())["points"]
    first, second = calls
    assert states[first]["status"] == "done" and states[first]["valid"] is True
    assert states[second]["status"] == "todo" and states[second]["reason"] == "interrupted"
    assert f"--resume {run}" in RunDir(run).log.read_text()
    kept = RunDir(run).point(first).validity.stat().st_mtime_ns
    monkeypatch.setattr(writer, "write", real)
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(tiny), "--resume", str(run), "--no-analysis", "-j", "1"
    )
    assert code == 0, err
    assert f"{second}:" in out and f"{first}:" not in out  # only the interrupted point is simulated again
    states = json.loads(RunDir(run).sweep.read_text())["points"]
    assert {s["status"] for s in states.values()} == {"done"} and all(s["valid"] for s in states.values())
    assert RunDir(run).point(first).validity.stat().st_mtime_ns == kept


def test_bad_input_exits_2_with_a_fix_and_no_traceback(tiny, tmp_path, monkeypatch, capsys):
    code, out, err = rainmaker(monkeypatch, capsys, "simulate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in err and "Traceback" not in err
    baseline = tmp_path / "base.yaml"
    baseline.write_text(TINY.replace("systems: [rain]", "systems: [rain, pallas]"))
    from orchestrator.simulate import policies

    with monkeypatch.context() as m:  # a system with no policy (every one has one now)
        m.delitem(policies.POLICIES, "pallas")
        code, out, err = rainmaker(monkeypatch, capsys, "simulate", str(baseline), "--results", str(tmp_path / "r"))
    assert code == 2 and "Traceback" not in err
    assert "cannot model pallas yet" in err and "fix:" in err and "--system rain" in err
    assert not (tmp_path / "r").exists()  # refused before anything is written
    code, out, err = rainmaker(monkeypatch, capsys, "simulate", str(baseline), "--system", "r2p2")
    assert code == 2 and "no such system" in err and "rain, pallas" in err and "Traceback" not in err
    code, out, err = rainmaker(monkeypatch, capsys, "simulate", str(tiny), "--resume", str(tmp_path))
    assert code == 2 and "not a run directory" in err
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(tiny), "--like", str(tmp_path / "none"), "--results", str(tmp_path / "r")
    )
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_system_durations_and_repetitions_can_be_narrowed(tiny, tmp_path, monkeypatch, capsys):
    both = tmp_path / "both.yaml"
    both.write_text(TINY.replace("systems: [rain]", "systems: [rain, pallas]"))
    args = ["--system", "rain", "--warmup", "0", "--measure", "0.1", "--repetitions", "2", "--no-analysis"]
    args += ["--threads", "1"]
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(both), "--results", str(tmp_path / "r"), "-j", "1", *args
    )
    assert code == 0, err
    run = _run_dir(out)
    points = [d.read_point() for d in RunDir(run).points()]
    assert sorted(p["id"] for p in points) == ["rain-f0.3-r1", "rain-f0.3-r2", "rain-f0.6-r1", "rain-f0.6-r2"]
    assert all(p["warmup_s"] == 0 and p["measure_s"] == 0.1 for p in points)
    m = RunDir(run).read_manifest()
    assert m["spec"]["systems"] == ["rain"] and m["simulate"]["measure_s"] == 0.1
    assert m["testbed"]["threads_per_host"] == 1 and all(p["worker_threads"] == 2 for p in points)
    assert len(set(m["seeds"].values())) == 4  # each repetition its own seed


def _simulate_refusing_the_higher_load(sp, point):
    """simulate_point as a pool worker runs it, with the model refusing rain-f0.6-r1."""
    from orchestrator.simulate import engine, runner

    def refuse(sp):
        raise engine.SimError(f"simulated point {sp.point_id}: too many events", fix="lower the load")

    real = engine.run
    engine.run = refuse if sp.point_id == "rain-f0.6-r1" else real
    try:
        return runner.simulate_point(sp, point)
    finally:
        engine.run = real


def test_a_point_the_model_refuses_is_failed_and_the_others_go_on(tiny, tmp_path, monkeypatch, capsys):
    from orchestrator.simulate import runner

    # The pool's workers start clean (a fork server), so what they run is patched by name.
    monkeypatch.setattr(runner, "simulate_point", _simulate_refusing_the_higher_load)
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(tiny), "--results", str(tmp_path / "r"), "--no-analysis", "-j", "1"
    )
    assert code == 0, err
    run = _run_dir(out)
    states = json.loads(RunDir(run).sweep.read_text())["points"]
    assert states["rain-f0.3-r1"]["status"] == "done"
    assert states["rain-f0.6-r1"]["status"] == "failed"
    assert (
        "too many events" in states["rain-f0.6-r1"]["reason"] and "lower the load" in states["rain-f0.6-r1"]["reason"]
    )
    assert "rain-f0.6-r1: failed: " in out and "1 done, 1 failed, 0 todo" in out


PHASES = """\
name: phases
systems: [rain]
workers: {per_host_threads: 4}
workload:
  classes:
    - {name: exp, task_type: 1, service: {dist: exponential, mean_us: 10}}
    - {name: bimodal, task_type: 1, service: {dist: bimodal, modes: [{us: 10, weight: 0.5}, {us: 100, weight: 0.5}]}}
  phases:
    - {at_s: 0, capacity_fraction: 0.05, classes: [exp]}
    - {at_s: 0.03, capacity_fraction: 0.05, classes: [bimodal]}
    - {at_s: 0.06, capacity_fraction: 0.5, classes: [exp]}
load: {capacity_fraction: [1.0]}
warmup_s: 0
measure_s: 0.12
rain:
  initial_quota: 2
  adaptive: true
  r_th: 0.3
  k_samples: 100
  slices: [{id: 0, task_types: [1]}, {id: 1, task_types: [2]}]
variants:
  - {name: static, rain: {adaptive: false}}
  - {name: adaptive}
plots: [p99_over_time, queue_depth]
"""


def test_a_time_varying_adaptive_spec_is_simulated_with_its_moves_and_drawn(tmp_path):
    """Fig. 10 in small: the clients follow the phases, the coordinator moves workers of
    the idle slice into the loaded one, and p99_over_time draws p99, the slices' workers
    and quotas, and the switch queue, the phases marked."""
    from orchestrator.experiment.analyze import slices_over_time
    from orchestrator.simulate.runner import simulate

    spec = tmp_path / "phases.yaml"
    spec.write_text(PHASES)
    run = simulate(spec, results_root=tmp_path / "r", progress=False, jobs=1)
    rd = RunDir(run)
    pd_ = rd.point("rain.adaptive-f1-r1")
    summary = json.loads((pd_.client("client0") / layout.CLIENT_SUMMARY).read_text())
    assert [(t, c) for t, _, c in summary["schedule"]] == [(0.0, ["exp"]), (0.03, ["bimodal"]), (0.06, ["exp"])]
    moves = [m for r in pd_.read_coordinator() for m in r["moves"]]
    assert moves and all((m["src"], m["dst"]) == (1, 0) for m in moves)
    over = slices_over_time(pd_, pd_.read_point())
    assert over[0][1][0][0] == 4 and over[-1][1][0][0] > 4  # slice 0 grew from its 4 workers
    assert rd.point("rain.static-f1-r1").read_coordinator() == []
    fig = run / "plots" / "p99_over_time.svg"
    assert fig.exists()
    svg = fig.read_text()
    assert "slice 0: workers" in svg and "tasks in the switch" in svg


def test_a_time_varying_point_is_reported_per_phase(tmp_path):
    """Each phase's requests on their own: the static point's tail grows with the
    overloaded slice's load, the adaptive one's slice 0 ends larger, and report.md says so."""
    from orchestrator.experiment.analyze import phase_rows
    from orchestrator.experiment.points import load_point
    from orchestrator.simulate.runner import simulate

    spec = tmp_path / "phases.yaml"
    spec.write_text(PHASES)
    run = simulate(spec, results_root=tmp_path / "r", progress=False, jobs=1)
    rd = RunDir(run)
    static = phase_rows(load_point(rd.point("rain.static-f1-r1")), rd.point("rain.static-f1-r1"))
    assert [r["phase"] for r in static] == [1, 2, 3]
    assert [round(r["from_ms_paper"]) for r in static] == [0, 30, 60]
    assert static[2]["samples"] > 5 * static[0]["samples"]  # 0.5 of capacity against 0.05
    assert static[2]["p99_us_paper"] > static[0]["p99_us_paper"] and static[0]["slices"] == {}
    adaptive = phase_rows(load_point(rd.point("rain.adaptive-f1-r1")), rd.point("rain.adaptive-f1-r1"))
    assert adaptive[0]["slices"][0][0] == 4 and adaptive[2]["slices"][0][0] > 4
    md = (run / "report.md").read_text()
    assert "## Per phase" in md and "### `rain.adaptive-f1-r1`" in md and "slice 0: " in md


_HELD_IMPORT = """
import importlib.abc, importlib.machinery, sys, threading
from pathlib import Path
from orchestrator.simulate import runner

# Another thread of this process is half-way through importing a module that a worker
# imports too when the pool starts it: a worker forked from here inherits that import's
# lock, held by a thread the worker does not have, and waits for it forever.
release, held = threading.Event(), threading.Event()
MODULE = "held_probe"  # an empty module beside this script


class Slow(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = super().find_spec(name, path, target) if name == MODULE else None
        if spec is not None:
            real = spec.loader

            class Held(importlib.abc.Loader):
                def create_module(self, spec):
                    return None

                def exec_module(self, module):  # under the module's own lock, not the global one
                    held.set()
                    release.wait()
                    real.exec_module(module)

            spec.loader = Held()
        return spec


def simulate_point(sp, point):
    __import__(MODULE)
    return real_simulate_point(sp, point)


real_simulate_point = runner.simulate_point
if __name__ == "__main__":
    sys.meta_path.insert(0, Slow())
    threading.Thread(target=lambda: __import__(MODULE), daemon=True).start()
    assert held.wait(10), MODULE + " was imported already"
    runner.simulate_point = simulate_point
    run = runner.simulate(Path(sys.argv[1]), results_root=Path(sys.argv[2]), seed=7, progress=False,
                          analyze_after=False, jobs=1)
    release.set()
    print("simulated", run)
"""


def test_the_pool_starts_its_workers_clean_of_this_process_threads(tiny, tmp_path):
    # A pytest worker that ran in-process gRPC servers before hung here for 600 s.
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "held_import.py"
    script.write_text(_HELD_IMPORT)
    (tmp_path / "held_probe.py").write_text("")
    # Its own session: a hung pool worker (a grandchild) is killed with it, not left behind.
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tiny), str(tmp_path / "r")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2], start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("simulate's worker hung on a lock another thread of the parent held when it started")
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert out.returncode == 0, out.stderr
    assert "simulated" in out.stdout
