"""The parts of a run on a cluster of testbeds (orchestrator/cluster) that need no
cluster: the testbeds' agreement, a station's archive, sweep.json's `testbed`, the
model of a point on its own testbed's calibration, the pool's checks and the command
line's refusals (tests/integration/test_cluster_run.py runs a real LocalCluster)."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from orchestrator.cluster import agreement, shard
from orchestrator.cluster.connect import Pool, split_cores
from orchestrator.errors import UsageError
from orchestrator.experiment.model_beside import of_testbed
from orchestrator.experiment.sweep import DONE, Sweep
from tests.cli import rainmaker
from tests.unit.test_sweep_state import POINTS

REPO = Path(__file__).resolve().parents[2]


def _cal(share: float | None) -> dict | None:
    return None if share is None else {"paper_time": {"overhead_share_of_service": share}}


# -- agreement -------------------------------------------------------------------------
def test_testbeds_within_the_tolerance_of_the_least_overhead_are_kept():
    a = agreement.compare({"tb0": _cal(0.20), "tb1": _cal(0.15), "tb2": _cal(0.30)}, 0.15)
    assert a.reference == "tb1"  # the least overhead: a disturbed testbed only adds
    assert a.kept == ["tb0", "tb1", "tb2"] and a.left_out == {}  # 1.30 / 1.15 - 1 = 13%
    assert "all within the model tolerance (15%) of tb1" in a.note


def test_a_testbed_that_measures_slower_is_left_out_with_its_numbers():
    a = agreement.compare({"tb0": _cal(0.15), "tb1": _cal(4.23)}, 0.15)
    assert a.kept == ["tb0"] and list(a.left_out) == ["tb1"]
    why = a.left_out["tb1"]
    assert "423.0% of a mean service time against 15.0% on tb0" in why and "355% slower" in why, why
    assert "1 left out (tb1)" in a.note
    assert a.as_dict()["overhead_share_of_service"] == {"tb0": 0.15, "tb1": 4.23}


def test_testbeds_not_calibrated_are_merged_unchecked_and_it_says_so():
    a = agreement.compare({"tb0": _cal(0.15), "tb1": None}, 0.15)
    assert a.kept == ["tb0", "tb1"] and a.reference is None
    assert "not compared: tb1 not calibrated" in a.note and "unchecked" in a.note
    # a calibration without the share (damaged) counts as none
    assert agreement.overhead({"paper_time": {"overhead_share_of_service": "x"}}) is None


# -- a station's archive -----------------------------------------------------------------
def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_a_point_folder_travels_whole_and_replaces_the_old_one(tmp_path):
    src = tmp_path / "station"
    (src / "points/p1/clients").mkdir(parents=True)
    (src / "points/p1/point.json").write_text('{"id": "p1"}')
    (src / "points/p1/clients/summary.json").write_text("{}")
    (src / "points/p2").mkdir(parents=True)  # another point's: not asked for
    blob = shard.pack(src, ["points/p1", "stalled/p1"])  # stalled/p1 does not exist: skipped
    run = tmp_path / "run"
    (run / "points/p1").mkdir(parents=True)
    (run / "points/p1/old-attempt.txt").write_text("from before")
    assert shard.unpack(blob, run, "points/p1", "stalled/p1") == ["points/p1"]
    got = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert got == ["points", "points/p1", "points/p1/clients", "points/p1/clients/summary.json", "points/p1/point.json"]


@pytest.mark.parametrize(
    "member",
    [
        _file("points/p1/../../../etc/passwd"),
        _file("/etc/passwd"),
        _file("points/p2/point.json"),  # another point's folder than the one asked for
        (tarfile.TarInfo("points/p1/link"), None),
    ],
    ids=["climbs-out", "absolute", "other-point", "symlink"],
)
def test_an_archive_with_what_no_run_folder_has_is_refused_and_writes_nothing(tmp_path, member):
    info, data = member
    if data is None:
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    blob = _tar([_file("points/p1/point.json"), (info, data)])
    with pytest.raises(shard.ShardError, match="holds what no run folder has"):
        shard.unpack(blob, tmp_path / "run", "points/p1")
    assert not (tmp_path / "run/points").exists()
    with pytest.raises(shard.ShardError, match="cannot be read"):
        shard.unpack(b"not a tar archive", tmp_path / "run", "points/p1")


# -- sweep.json --------------------------------------------------------------------------
def test_a_point_adopted_from_its_testbed_keeps_the_lost_attempts_before_it(tmp_path):
    sw = Sweep(tmp_path, POINTS, resume=False)
    pid = POINTS[0].id
    digest = sw.state[pid].digest
    sw.start(pid, testbed="host-a/slot10")
    sw.attempt_failed(pid, "testbed host-a/slot10 was lost while measuring it")
    s = sw.state[pid]
    lost = [{"attempt": s.attempts, "started": s.started, "reason": s.reason}]
    # what the other testbed's own sweep.json says of the point: its one attempt, done
    (tmp_path / "there").mkdir()
    there = Sweep(tmp_path / "there", POINTS, resume=False)
    there.start(pid)
    there.finish(pid, DONE, None, valid=True)
    measured = json.loads((tmp_path / "there" / Sweep.FILE).read_text())["points"][pid]
    sw.adopt(pid, measured, testbed="host-b/slot11", before=lost)
    saved = json.loads((tmp_path / Sweep.FILE).read_text())["points"][pid]
    assert saved["status"] == DONE and saved["valid"] is True and saved["testbed"] == "host-b/slot11"
    assert saved["digest"] == digest and saved["attempts"] == 2
    assert [(a["attempt"], a["reason"]) for a in saved["attempts_log"]] == [
        (1, "testbed host-a/slot10 was lost while measuring it"),
        (2, None),
    ]
    assert Sweep(tmp_path, POINTS, resume=True).state[pid].testbed == "host-b/slot11"  # a resume reads it


def test_a_testbed_that_is_not_a_name_is_refused_on_resume(tmp_path):
    sw = Sweep(tmp_path, POINTS, resume=False)
    doc = json.loads((tmp_path / Sweep.FILE).read_text())
    doc["points"][POINTS[0].id]["testbed"] = 7
    (tmp_path / Sweep.FILE).write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="testbed"):
        Sweep(tmp_path, POINTS, resume=True)
    assert sw.state[POINTS[0].id].testbed is None  # a run of one testbed names none


# -- the model beside a point ----------------------------------------------------------------
def test_the_model_of_a_point_takes_its_own_testbeds_calibration():
    manifest = {"k": 1000, "calibration": {"network": "first"}, "testbeds": {"a": {"calibration": {"network": "a"}}}}
    assert of_testbed(manifest, {"id": "p", "testbed": "a"})["calibration"] == {"network": "a"}
    assert of_testbed(manifest, {"id": "p"}) is manifest  # a run of one testbed
    assert of_testbed(manifest, {"id": "p", "testbed": "gone"}) is manifest
    assert "calibration" not in of_testbed({"testbeds": {"a": {}}}, {"testbed": "a"})  # not calibrated: none


# -- the pool ---------------------------------------------------------------------------------
def test_cores_are_split_evenly_and_too_many_testbeds_are_refused():
    assert split_cores(2, [0, 1]) == [[0], [1]]
    assert split_cores(3, list(range(16))) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    with pytest.raises(UsageError, match="fewer than one per testbed") as e:
        split_cores(3, [0, 1])
    assert "at most 2 testbed(s)" in e.value.render()


class _Client:
    def __init__(self, workers: dict):
        self.info = {"workers": workers}

    def scheduler_info(self, n_workers: int = 5) -> dict:
        return self.info


def test_only_workers_that_offer_a_testbed_are_given_points():
    pool = Pool(
        _Client(
            {"tcp://a:1": {"resources": {"testbed": 1}}, "tcp://b:1": {}, "tcp://c:1": {"resources": {"testbed": 1}}}
        ),
        "Dask cluster tcp://s:8786",
    )
    assert pool.testbed_workers() == ["tcp://a:1", "tcp://c:1"]
    assert pool.testbed_workers(1) == ["tcp://a:1"]
    with pytest.raises(UsageError, match="2 worker.s. offer a testbed, fewer than the 3 asked for"):
        pool.testbed_workers(3)
    bare = Pool(_Client({"tcp://b:1": {}}), "Dask cluster tcp://s:8786")
    with pytest.raises(UsageError) as e:
        bare.testbed_workers()
    assert "none of its 1 worker(s) offers a testbed" in str(e.value)
    assert "--resources testbed=1" in e.value.render()


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, said",
    [
        (["--cluster", "tcp://127.0.0.1:9", "--testbed", "hardware"], "a cluster holds emulated testbeds only"),
        (["--cluster", "tcp://127.0.0.1:9", "--testbed", "emulated:0"], "N must be at least 1"),
        (["--testbed", "emulated:2"], "no --cluster was given"),
        (["--cluster", "tcp://127.0.0.1:9", "--testbeds", "2"], "--cluster and --testbeds both given"),
        (["--testbeds", "2", "-i", str(REPO / "orchestrator/inventory/examples/rack1.yaml")], "stay sequential"),
    ],
    ids=["not-emulated", "zero", "no-cluster", "both", "hardware"],
)
def test_run_on_a_cluster_refuses_what_it_cannot_do_before_connecting(monkeypatch, capsys, tmp_path, args, said):
    code, out, err = rainmaker(
        monkeypatch, capsys, "run", str(REPO / "experiments/demo.yaml"), "--results", str(tmp_path / "r"), *args
    )
    assert code == 2, (out, err)
    assert said in " ".join((out + err).split()), out + err
    assert not (tmp_path / "r").exists()


# -- a testbed that never finishes preparing ---------------------------------------------
def _prepare_or_stick(key: str, lock_dir: str, calibration: dict):
    """A station's prepare (station.prepare's place): the first worker's stays in the
    measurement lock of a core another process holds (measure_lock.measuring), as a
    wedged calibration would; the other's is ready at once."""
    from distributed import get_worker

    from orchestrator.cluster import station as st
    from orchestrator.testbed.measure_lock import measuring

    me = get_worker().address
    if me == min(_WORKERS):
        with measuring(5, "calibrate", lambda m: None, cpus=[0], directory=Path(lock_dir), wait_max_s=60):
            pass
    return st.Prepared(
        testbed=f"tb-{me.rsplit(':', 1)[1]}", worker=me, host="here", slot=5, cpus=[], k=100.0,
        calibration=calibration, dilation=None, windows=None, service=None, host_facts={}, prepare_s=0.1,
        files=shard.pack(Path(lock_dir), []), manifest={"created_unix": 0},
    )  # fmt: skip


_WORKERS: list[str] = []


def test_a_testbed_stuck_while_preparing_is_said_where_and_left_out(tmp_path, monkeypatch):
    """The coordinator says where a testbed's preparation is while it waits (its task's
    call stack, rainmaker's frames), and past prepare's bound leaves that testbed out
    with the reason in the manifest; the run goes on with the one that is ready."""
    import fcntl

    from distributed import Client, LocalCluster

    from orchestrator.cluster import coordinator as co
    from orchestrator.cluster import station as st
    from orchestrator.cluster.connect import RESOURCE
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.plan import TestbedShape, plan
    from orchestrator.experiment.spec import load as load_spec
    from orchestrator.testbed.measure_lock import lock_path

    held = open(lock_path(tmp_path, 0), "a")  # noqa: SIM115 - held for the whole test
    fcntl.flock(held, fcntl.LOCK_EX)
    cal = {"paper_time": {"overhead_share_of_service": 0.5}, "round_trip_us": {"mean": 1.0}}
    monkeypatch.setattr(st, "prepare", lambda key: _prepare_or_stick(key, str(tmp_path), cal))
    monkeypatch.setattr(co, "PREPARE_SAY_S", 1.0)
    spec_path = REPO / "experiments/demo.yaml"
    spec = load_spec(spec_path)
    points = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=True))
    rd = RunDir.new(tmp_path / "results", spec.name, "now")
    lines: list[str] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, resources={RESOURCE: 1},
                      dashboard_address=":0") as cluster, Client(cluster) as client:  # fmt: skip
        pool = Pool(client, "two in-process workers")
        workers = pool.testbed_workers()
        _WORKERS[:] = workers
        order = st.Order(key="demo/now/1", spec_name="demo.yaml", spec_text=spec_path.read_text())
        c = co.Coordinator(pool, rd, spec, spec_path, points, Sweep(rd.path, points, resume=False), order,
                           lines.append, None)  # fmt: skip
        c.prepare(workers, max_s=3.0)
        fcntl.flock(held, fcntl.LOCK_UN)  # the stuck task ends; Dask has let it go
    stuck, ready = min(workers), max(workers)
    said = [x for x in lines if x.startswith(f"still preparing the testbed of worker {stuck}")]
    assert said and "orchestrator.testbed.measure_lock.measuring:" in said[-1], lines
    assert not [x for x in lines if x.startswith(f"still preparing the testbed of worker {ready}")]
    assert list(c.unprepared) == [stuck] and "not prepared in 3 s" in c.unprepared[stuck]
    assert "measure_lock.measuring" in c.unprepared[stuck]
    m = rd.read_manifest()
    assert list(m["testbeds"]) == [f"tb-{ready.rsplit(':', 1)[1]}"]
    assert m["cluster"]["unprepared"] == c.unprepared


# -- a worker too wedged to answer -----------------------------------------------------
WEDGED = """
import sys, threading
from pathlib import Path
from orchestrator.cluster import stacks
from orchestrator.testbed.measure_lock import measuring
print("armed", stacks.arm(sys.argv[1]), flush=True)
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a second thread, not ours
with measuring(5, "calibrate", lambda m: print(m, flush=True), cpus=[0], directory=Path(sys.argv[1]), wait_max_s=60):
    pass
"""


def test_a_wedged_process_writes_every_threads_stack_on_the_signal(tmp_path):
    """stacks.py: a process that armed it writes its threads' stacks on the signal
    while its main thread waits (faulthandler, in C); the coordinator's reading names
    rainmaker's frames. A process that did not arm it is not signalled (the signal's
    default action would end it)."""
    import fcntl
    import subprocess
    import sys

    from orchestrator.cluster import stacks
    from orchestrator.testbed.measure_lock import lock_path

    held = open(lock_path(tmp_path, 0), "a")  # noqa: SIM115 - held while the process waits for it
    fcntl.flock(held, fcntl.LOCK_EX)
    p = subprocess.Popen([sys.executable, "-c", WEDGED, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen(["sleep", "30"])
    try:
        path = p.stdout.readline().split()[1]
        assert "waiting for this machine's cores" in p.stdout.readline()  # inside measuring's wait
        text = stacks.dump(p.pid, path)
        assert text and text.count("Thread 0x") + text.count("Current thread 0x") == 2, text
        ours = stacks.frames(text)
        assert len(ours) == 1 and re.fullmatch(r"orchestrator\.testbed\.measure_lock\.measuring:\d+", ours[0]), ours
        assert stacks.dump(p.pid, path) is not None  # again: the handler stays
        assert stacks.dump(other.pid, path) is None and other.poll() is None  # not its file: left alone
    finally:
        for q in (p, other):
            q.kill()
            q.wait()
        held.close()


class _WedgedClient:
    """A Dask client whose every worker is wedged: Client.run never answers."""

    def run(self, *a, **kw):
        raise TimeoutError("a worker did not answer in 180 s")

    def unregister_worker_plugin(self, name):
        pass

    def unsubscribe_topic(self, topic):
        pass


def test_a_testbed_left_out_while_preparing_goes_down_here_when_its_worker_is_wedged(tmp_path, monkeypatch):
    """A testbed that never finished preparing on this machine, whose worker answers
    nothing, is taken down by the coordinator at close, from where its station said it
    was (seen in CI: one stayed up until the test's fixture took its slot down); one of
    another machine is not touched."""
    import socket
    from types import SimpleNamespace

    from orchestrator.cluster import coordinator as co
    from orchestrator.experiment.layout import RunDir
    from orchestrator.testbed.emulated import EmulatedTestbed

    downs: list[int] = []
    monkeypatch.setattr(EmulatedTestbed, "down", lambda self, log=print: downs.append(self.slot) or [])
    rd = RunDir.new(tmp_path, "demo", "now")
    lines: list[str] = []
    order = SimpleNamespace(key="demo/now/1")
    c = co.Coordinator(SimpleNamespace(client=_WedgedClient()), rd, None, None, [], None, order, lines.append, None)
    for w, host, slot in (("tcp://10.0.0.1:1", socket.gethostname(), 7), ("tcp://10.0.0.2:1", "elsewhere", 8)):
        c._line({"testbed": f"{host}-s{slot}", "line": "calibrating the testbed...", "worker": w, "host": host,
                 "slot": slot, "pid": 1, "stacks": None})  # fmt: skip
        c._unprepared(w, "not prepared in 300 s")
    c.close()
    assert downs == [7], lines
    assert f"testbed {socket.gethostname()}-s7 (slot 7 of this machine) taken down" in lines
