"""Calibration (orchestrator/experiment/calibrate.py): the testbed's own overheads from
one light point, in testbed and paper time, as the model beside each point takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.experiment import calibrate
from orchestrator.experiment.layout import PointDir
from orchestrator.experiment.plan import Point
from orchestrator.experiment.spec import Spec

REPO = Path(__file__).resolve().parents[2]


def _first(k: float = 100.0) -> Point:
    return Point(
        "rain-f0.3-r1", 0, "rain", None, None, 1, 120.0, 0.3, 1200.0, k, 1.0, 4.0, "sleep", 4,
        {"initial_quota": 2, "adaptive": True},
    )  # fmt: skip


def _point_dir(tmp_path, *, busy_ns, done, lat_mean_ns, p50_ns, p99_ns, lag_ns=0) -> PointDir:
    pd = PointDir(tmp_path / "calibration")
    (pd.worker("worker0")).mkdir(parents=True)
    (pd.worker("worker0") / "stats.json").write_text(
        json.dumps({"workers": [{"busy_ns": busy_ns // 2, "tasks_done": done // 2}] * 2})
    )
    pd.client("client0").mkdir(parents=True)
    lat = {"count": done, "mean": lat_mean_ns, "p50": p50_ns, "p99": p99_ns}
    summary = {
        "totals": {"sent": done, "max_lag_ns": lag_ns, "late_sends": 3},
        "classes": {"cal": {"latency_ns": lat}},
    }
    (pd.client("client0") / "summary.json").write_text(json.dumps(summary))
    return pd


def test_the_calibration_point_is_light_constant_and_of_the_runs_shape():
    spec = Spec.model_validate(
        {
            "name": "x",
            "systems": ["rain"],
            "workload": {
                "classes": [
                    {"name": "a", "service": {"dist": "exponential", "mean_us": 10}},
                    {"name": "b", "weight": 3, "service": {"dist": "constant", "us": 30}},
                ]
            },
            "load": {"capacity_fraction": [0.5]},
        }
    )
    cs = calibrate.calibration_spec(spec)
    (c,) = cs.workload.classes
    assert c.service.dist == "constant" and c.service.us == pytest.approx(25.0)
    assert cs.systems == spec.systems and cs.rain == spec.rain
    p = calibrate.calibration_point(_first(), 10.0)  # 4 threads of 1 ms tasks: 10% is 400/s, at most 200
    assert p.offered_rps == 200.0 and p.dilation == 100.0 and p.worker_threads == 4 and p.measure_s == 1.5
    p = calibrate.calibration_point(_first(k=1000), 10.0)  # 10 ms tasks: 40/s, 3.75 s for 150 requests
    assert p.offered_rps == 40.0 and p.measure_s == 3.75
    # quota 1 whatever the run's: a second task held by a busy worker thread would wait a
    # whole service time and pass for the testbed's round trip
    assert p.params["adaptive"] is False and p.params["initial_quota"] == 1


def test_round_trip_and_handler_error_become_the_models_network_in_paper_time(tmp_path):
    # 1 ms tasks that took 1.03 ms; requests answered 1.55 ms after their intended send
    pd = _point_dir(
        tmp_path, busy_ns=1_030_000 * 300, done=300, lat_mean_ns=1_550_000, p50_ns=1_450_000, p99_ns=4_030_000
    )
    cal = calibrate.summarise(pd, calibrate.calibration_point(_first(), 10.0), mean_service_us=10.0)
    assert cal["service_overshoot_us"] == pytest.approx(30.0)
    assert cal["round_trip_us"] == {"mean": 520.0, "p50": 420.0, "p99": 3000.0}
    net = cal["network"]
    # four host legs share the 520 us round trip; / k = 100 -> 1.3 us of paper time each
    assert net["client_switch_ns"] == net["switch_worker_ns"] == 1300 and net["switch_pkt_ns"] == 0
    assert net["worker_pkt_ns"] == 100  # 30 us late per task over three packets, / k
    assert cal["paper_time"]["overhead_share_of_service"] == pytest.approx(0.55)
    assert "round trip 520 us mean" in calibrate.describe(cal)


def test_a_calibration_point_without_answers_is_refused(tmp_path):
    pd = _point_dir(tmp_path, busy_ns=0, done=0, lat_mean_ns=0, p50_ns=0, p99_ns=0)
    with pytest.raises(ValueError, match="no worker finished"):
        calibrate.summarise(pd, calibrate.calibration_point(_first(), 10.0), mean_service_us=10.0)


def _rpc_first(k: float = 1000.0) -> Point:
    return Point(
        "cs-c5000-f0.4-r1", 5, "cs", "c5000", "5,000 connections", 1, 400.0, 0.4, 400.0, k, 1.0, 30.0, "sleep", 20,
        {"connections": 5000, "zipf_s": 0.0},
    )  # fmt: skip


def test_a_server_side_run_calibrates_with_its_own_mode_and_connections():
    # rpc-server's mode and the first point's connections are what its points pay; the
    # token quota is Rain's and has no meaning here
    p = calibrate.calibration_point(_rpc_first(), 20.0)  # 20 threads of 20 ms tasks: 10% is 100/s
    assert p.system == "cs" and p.params == {"connections": 5000, "zipf_s": 0.0}
    assert p.offered_rps == 100.0 and p.measure_s == 1.5 and p.worker_threads == 20 and p.handler == "sleep"
    assert p.id == calibrate.CAL_ID and p.variant is None and p.capacity_fraction is None


def test_rpc_servers_cost_and_round_trip_become_the_rpc_models_network(tmp_path):
    # 20 ms requests (20 us at k = 1000) that kept rpc-server's threads 20.06 ms busy
    # each, answered 20.26 ms after their intended send: a 200 us round trip
    point = calibrate.calibration_point(_rpc_first(), 20.0)
    pd = PointDir(tmp_path / "calibration")
    pd.worker("worker0").mkdir(parents=True)
    served = 150
    (pd.worker("worker0") / "server.json").write_text(
        json.dumps({"busy_ns": 20_060_000 * served, "asked_ns": 20_000_000 * served, "served": served})
    )
    pd.client("client0").mkdir(parents=True)
    lat = {"count": served, "mean": 20_260_000, "p50": 20_210_000, "p99": 21_060_000}
    summary = {
        "totals": {"sent": served, "max_lag_ns": 90_000, "late_sends": 0},
        "classes": {"cal": {"latency_ns": lat}},
    }
    (pd.client("client0") / "summary.json").write_text(json.dumps(summary))
    cal = calibrate.summarise(pd, point, mean_service_us=20.0)
    assert cal["service_overshoot_us"] == pytest.approx(60.0)
    assert cal["round_trip_us"] == {"mean": 200.0, "p50": 150.0, "p99": 1000.0}
    net = cal["network"]
    # the RPC model's two client legs share the round trip (100 us each, / k = 1000);
    # the handoff inside the server is in it, not a leg of its own
    assert net["client_switch_ns"] == 100 and net["switch_worker_ns"] == 0 and net["switch_pkt_ns"] == 0
    assert net["worker_pkt_ns"] == 30  # 60 us of rpc-server's own cost over a request in and its answer out
    assert cal["paper_time"]["overhead_share_of_service"] == pytest.approx(0.013)
    # a server that counted nothing (an rpc-server without its done line): refused
    (pd.worker("worker0") / "server.json").write_text(json.dumps({"stopped_by": "signal"}))
    with pytest.raises(ValueError, match="no worker finished"):
        calibrate.summarise(pd, point, mean_service_us=20.0)


def test_every_family_calibrates_but_a_real_memcached(tmp_path):
    from orchestrator.errors import UsageError
    from orchestrator.experiment.run import auto_k_calibrates
    from orchestrator.experiment.spec import load

    rakaia = load(REPO / "experiments/rakaia-micro-20us-emulated.yaml")
    memcached = load(REPO / "experiments/memcached.yaml")
    assert calibrate.calibrates(rakaia) and calibrate.calibrates(_spec())
    assert not calibrate.calibrates(memcached)
    auto_k_calibrates(rakaia, auto=True)  # an RPC spec may leave its k to the calibration
    with pytest.raises(UsageError) as e:
        auto_k_calibrates(memcached, auto=True)
    assert "memcached decides its own service times" in e.value.message and "dilation.emulated" in e.value.fix
    auto_k_calibrates(memcached, auto=False)


def test_an_rpc_spec_gets_its_k_from_its_calibration():
    from orchestrator.experiment.plan import TestbedShape
    from orchestrator.experiment.spec import load

    spec = load(REPO / "experiments/rakaia-micro-20us-emulated.yaml")
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    # 200 us of round trip and 60 us of server cost: 5% of a 20 us mean from k = 260
    k, why = calibrate.choose_k(_cal(200.0, 60.0), spec, shape)
    assert k == 500 and "20 us mean task" in why
    # the capacity is one server's 20 threads (not every worker host's): 0.2 of it is
    # 200 kRPS, whose 2,000 samples 30 s hold up to k = 3,000
    k, why = calibrate.choose_k(_cal(2000.0, 600.0), spec, shape)
    assert k == 2000 and "(200 kRPS) only up to k = 3,000" in why


def test_the_calibrate_command_teaches_and_refuses_a_missing_spec(tmp_path):
    from click.testing import CliRunner

    from orchestrator.cli import cli

    r = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert r.exit_code == 0 and "round trip" in r.output and "--resume" in r.output
    r = CliRunner().invoke(cli, ["calibrate", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "nope.yaml" in r.output


def _spec(**extra) -> Spec:
    d = {
        "name": "x",
        "systems": ["rain"],
        "workload": {"classes": [{"name": "a", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.3, 0.85]},
        "emulated": {"warmup_s": 1, "measure_s": 20},
    }
    d.update(extra)
    return Spec.model_validate(d)


def _cal(rtt_us: float, late_us: float = 0.0) -> dict:
    return {"round_trip_us": {"mean": rtt_us, "p50": rtt_us, "p99": rtt_us}, "service_overshoot_us": late_us}


def test_auto_dilation_is_the_default_and_plans_at_100_until_calibrated():
    from orchestrator.experiment.plan import TestbedShape, plan

    spec = _spec()
    assert spec.dilation.emulated == "auto"
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    assert {p.dilation for p in plan(spec, shape)} == {100}
    assert {p.dilation for p in plan(spec, shape, k=2000)} == {2000}
    assert {p.dilation for p in plan(spec, TestbedShape(2, 1, emulated=False))} == {1}


def test_a_slower_testbed_gets_a_larger_k():
    from orchestrator.experiment.plan import TestbedShape

    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    spec = _spec()
    long = _spec(emulated={"warmup_s": 1, "measure_s": 200})
    k_fast, why = calibrate.choose_k(_cal(40.0), long, shape)  # 40 us: 5% of 10 us from k = 80
    assert k_fast == 100 and "k = 100" in why
    k_slow, why = calibrate.choose_k(_cal(800.0, 60.0), long, shape)  # 860 us: from k = 1,720
    assert k_slow == 2000 and "860 us" in why
    # the measurement window bounds it: 200 s hold 100 mean tasks of 10 us up to k = 200,000,
    # and 2,000 requests at 0.3 of 4 threads (120 kRPS) up to k = 12,000: k stops at 10,000
    k, why = calibrate.choose_k(_cal(50_000.0), long, shape)
    assert k == 10_000
    # 20 s hold twice min_samples_p99 at the lowest load up to k = 1,200: a larger k would
    # fail samples_p99 or p99_ci at that load
    k, why = calibrate.choose_k(_cal(50_000.0), spec, shape)
    assert k == 1000 and "hold 2,000 requests at its lowest load (120 kRPS) only up to k = 1,200" in why
    short = _spec(emulated={"warmup_s": 1, "measure_s": 1})
    k, why = calibrate.choose_k(_cal(800.0), short, shape)
    assert k == 50 and "only up to k = 1,000" in why and "only up to k = 60: k = 50" in why


def test_a_client_that_stalls_gets_a_k_that_holds_its_stalls():
    from orchestrator.experiment.plan import TestbedShape

    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    long = _spec(emulated={"warmup_s": 1, "measure_s": 200})
    # 40 us of overheads ask for k = 80; a 3 ms stall is 10 us of paper time from k = 300
    k, why = calibrate.choose_k({**_cal(40.0), "schedule_lag_max_us": 3000.0}, long, shape)
    assert k == 500 and "largest lag in it, 3,000 us of testbed time" in why and "only from k = 300: k = 500" in why
    # a stall within the limit at the overheads' k changes nothing, and says nothing
    k, why = calibrate.choose_k({**_cal(40.0), "schedule_lag_max_us": 500.0}, long, shape)
    assert k == 100 and "lag" not in why
    # held within the margin, as the overheads are: one more stall does not move a settled k
    k, why = calibrate.choose_k({**_cal(40.0), "schedule_lag_max_us": 6000.0}, long, shape, hold=500.0)
    assert k == 500 and "k stays 500" in why
    # the window still bounds it: 20 s hold 2,000 requests at the lowest load up to k = 1,200
    k, why = calibrate.choose_k({**_cal(40.0), "schedule_lag_max_us": 50_000.0}, _spec(), shape)
    assert k == 1000 and "only from k = 5,000" in why and "only up to k = 1,200" in why


def test_a_calibration_whose_client_stalled_past_the_limit_is_a_warning():
    spec = _spec(validity={"remeasure_stalled": 4})
    cal = {**_cal(40.0), "k": 200.0, "schedule_lag_max_us": 7300.0}
    text = calibrate.stall_warning(cal, spec)
    assert text is not None
    assert "7.3 ms behind" in text and "36.5 us of paper time at k = 200, over schedule_lag's 10 us" in text
    assert "up to 4 times" in text and "from k = 1000" in text
    assert calibrate.stall_warning({**cal, "k": 1000.0}, spec) is None  # 7.3 us: within
    assert calibrate.stall_warning({**_cal(40.0), "k": 200.0}, spec) is None  # no lag recorded


def test_the_run_says_so_before_its_sweep_and_the_report_shows_it(tmp_path):
    from types import SimpleNamespace

    from orchestrator.experiment import report
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.run import warn_stalls

    rd = RunDir(tmp_path)
    rd.write_manifest({"calibration": {"k": 100.0, "schedule_lag_max_us": 2500.0}})
    said: list[str] = []
    cal = {**_cal(40.0), "k": 100.0, "schedule_lag_max_us": 2500.0}
    runner = SimpleNamespace(calibrated=[cal], points=[SimpleNamespace(dilation=100.0)], spec=_spec(), log=said.append)
    warn_stalls(runner, rd)
    assert len(said) == 1 and said[0].startswith("warning: the client fell 2.5 ms behind")
    text = rd.read_manifest()["calibration"]["schedule_lag_warning"]
    assert "from k = 500" in text
    lines = report._spec_section(None, rd.read_manifest(), __import__("pandas").DataFrame())
    assert f"- the client's schedule: {text}" in lines
    # at a k that holds the stall: nothing said, nothing written
    rd.write_manifest({"calibration": {"k": 1000.0}})
    runner.points = [SimpleNamespace(dilation=1000.0)]
    warn_stalls(runner, rd)
    assert len(said) == 1 and "schedule_lag_warning" not in rd.read_manifest()["calibration"]


def test_the_cpu_a_request_costs_is_what_the_load_adds_to_the_idle_testbed(tmp_path):
    pd = _point_dir(tmp_path, busy_ns=1_000_000 * 300, done=300, lat_mean_ns=1_500_000, p50_ns=1, p99_ns=1)
    # 2 cores, 0.1 busy with no load; 300 requests in 2 s kept 0.4 busy: 0.6 s more, 2 ms each
    cpu = {"cores": 2, "idle_testbed_cores": 0.03, "idle_cores": 0.1, "load_busy_s": 0.8, "load_wall_s": 2.0}
    pd.write_cpu({**cpu, "requests": 300})
    cal = calibrate.summarise(pd, calibrate.calibration_point(_first(), 10.0), mean_service_us=10.0)
    assert cal["cpu"] == {
        "cores": 2,
        "idle_cores": 0.1,
        "idle_testbed_cores": 0.03,
        "load_cores": 0.4,
        "per_request_ms": 2.0,
    }
    assert "the testbed uses 3.0% of a core (10.0% with the runner), a request 2 ms of CPU" in calibrate.describe(cal)
    # no idle measurement (the pollers' long naps come too late at a large k): all of the load's CPU
    del cpu["idle_cores"], cpu["idle_testbed_cores"]
    pd.write_cpu({**cpu, "requests": 300})
    cal = calibrate.summarise(pd, calibrate.calibration_point(_first(), 10.0), mean_service_us=10.0)
    assert cal["cpu"]["per_request_ms"] == pytest.approx(8 / 3, abs=1e-4)
    said = calibrate.describe(cal)
    assert "the idle testbed not measured" in said and "0.0% of a core" not in said
    pd.path.joinpath("cpu.json").unlink()  # not a shared-core testbed: nothing measured, nothing claimed
    assert "cpu" not in calibrate.summarise(pd, calibrate.calibration_point(_first(), 10.0), mean_service_us=10.0)


def test_a_highest_load_that_does_not_fit_the_cores_gets_a_larger_k():
    from orchestrator.experiment.plan import TestbedShape

    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    spec = _spec()  # 0.85 of 2 x 2 threads of 10 us tasks: 340 kRPS of paper time
    cheap = {**_cal(40.0), "cpu": {"cores": 2, "idle_cores": 0.1, "per_request_ms": 0.1}}
    k, why = calibrate.choose_k(cheap, spec, shape)  # 3,400 req/s x 0.1 ms at k = 100: 0.34 cores more
    assert k == 100 and "needs 0.44 of 2 cores" in why
    # 1 ms a request: 340,000 / k req/s must fit 1 - 0.1 cores: from k = 378
    dear = {**_cal(40.0), "cpu": {"cores": 2, "idle_cores": 0.1, "per_request_ms": 1.0}}
    k, why = calibrate.choose_k(dear, spec, shape)
    assert k == 500 and "only from k = 378" in why and "0.78 cores busy" in why
    # an idle testbed that already fills half the cores: said, and k is left to the other bounds
    full = {**_cal(40.0), "cpu": {"cores": 2, "idle_cores": 1.2, "per_request_ms": 1.0}}
    k, why = calibrate.choose_k(full, spec, shape)
    assert k == 100 and "no k makes its highest load fit 50%" in why


class _Runner:
    """What _choose_dilation uses of a Runner: its points and sweep, and calibrate(),
    here answering with the overheads a testbed would show at each k."""

    def __init__(self, points, overhead_at):
        self.points, self.overhead_at, self.calibrated = points, overhead_at, []

    def calibrate(self):
        k = self.points[0].dilation
        self.calibrated.append(k)
        return _cal(self.overhead_at(k))


@pytest.mark.parametrize(
    "overhead_at, ks, k_final",
    [
        # the naps grow with k: 476 us at k = 100 asks for 1,000; 640 there asks for 2,000, which holds
        (lambda k: 476.0 if k == 100 else 640.0 if k == 1000 else 700.0, [1000, 2000], 2000),
        # constant overheads: the first answer holds
        (lambda k: 476.0, [1000], 1000),
        # smaller at the new k: it is not lowered again
        (lambda k: 476.0 if k == 100 else 40.0, [1000], 1000),
        # still growing after two raises: a run calibrates at most three times
        (lambda k: 476.0 * k / 100, [1000, 10_000], 10_000),
    ],
)
def test_auto_dilation_checks_its_k_at_that_k(tmp_path, overhead_at, ks, k_final):
    from orchestrator.experiment.dilation import MAX_CALIBRATIONS, choose_dilation
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.plan import TestbedShape, plan
    from orchestrator.experiment.sweep import Sweep

    spec = _spec(emulated={"warmup_s": 1, "measure_s": 200})  # a window that holds k = 10,000
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    points = plan(spec, shape)
    rd = RunDir(tmp_path)
    rd.write_manifest({"points": []})
    runner = _Runner(points, overhead_at)
    runner.sweep = Sweep(tmp_path, points, resume=False)
    rd.sweep.write_text("{}")  # the sweep file a run has by then: planning again replaces it
    log = []
    choose_dilation(runner, rd, spec, shape, _cal(overhead_at(100.0)), log.append)
    assert runner.calibrated == ks
    assert len(runner.calibrated) <= MAX_CALIBRATIONS - 1  # the first calibration was the run's own
    m = rd.read_manifest()
    assert m["dilation"]["k"] == k_final == runner.points[0].dilation
    assert {p["dilation"] for p in m["points"]} == {k_final}
    assert m["dilation"]["why"].count(" | at that k: ") == len(ks)  # one reason per calibration
    assert log[-1].startswith(f"dilation: k = {k_final:g}, after ")


def test_each_point_and_client_draws_its_own_arrivals_the_same_in_every_run():
    from orchestrator.experiment.agent_config import client_seed
    from orchestrator.experiment.plan import TestbedShape, plan

    points = plan(_spec(repetitions=2), TestbedShape(worker_hosts=2, client_hosts=2, emulated=True))
    seeds = [client_seed(p, i) for p in points for i in range(2)]
    assert len(points) == 4 and len(set(seeds)) == len(seeds)  # two loads x two repetitions x two clients
    assert seeds == [client_seed(p, i) for p in points for i in range(2)]  # stable
    assert all(0 <= s < 2**62 for s in seeds)  # room for rain-client's + lcore index in 64 bits
    # a point measured in segments draws anew in each (a stalled segment measured again
    # draws the same as its first attempt: the segment, not the attempt, names the seed)
    p = points[0]
    by_segment = [client_seed(p, 0, i) for i in range(1, 16)]
    assert len(set(by_segment)) == 15 and client_seed(p, 0) not in by_segment
    assert client_seed(p, 0, 3) == client_seed(p, 0, 3)


@pytest.mark.parametrize(
    "settled, overhead_at, ks, k_final",
    [
        # where the last run settled, held: 695 us at k = 2000 asks for 1,390 (the k = 100
        # calibration's 491 us, which would have asked for 1,000, is never made)
        (2000.0, lambda k: 491.0 if k == 100 else 695.0, [2000], 2000),
        # fig6a-emulated's second run here: 828 us at 1000 ask for 1,656, within twice
        # 1000 (the first run read 622 there): held
        (1000.0, lambda k: 828.0, [1000], 1000),
        # a testbed that became twice as slow: 1,100 us ask for 2,200: raised, and checked there
        (1000.0, lambda k: 1100.0, [1000, 5000], 5000),
    ],
)
def test_auto_dilation_starts_where_the_last_run_of_the_spec_settled(tmp_path, settled, overhead_at, ks, k_final):
    from orchestrator.experiment.dilation import choose_dilation, start_at
    from orchestrator.experiment.history import Settled
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.plan import TestbedShape, plan
    from orchestrator.experiment.sweep import Sweep

    spec = _spec(emulated={"warmup_s": 1, "measure_s": 200})
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    points = plan(spec, shape)
    assert points[0].dilation == 100
    rd = RunDir(tmp_path)
    rd.write_manifest({"points": []})
    runner = _Runner(points, overhead_at)
    runner.sweep = Sweep(tmp_path, points, resume=False)
    log = []
    start_at(runner, rd, spec, shape, Settled(settled, "where the last run settled", None), log.append)
    assert log[0].startswith(f"dilation: starting at k = {settled:g}, where the last run settled")
    assert {p["dilation"] for p in rd.read_manifest()["points"]} == {settled}
    cal = runner.calibrate()  # the run's first calibration, at the settled k
    choose_dilation(runner, rd, spec, shape, cal, log.append, held=True)
    assert runner.calibrated == ks
    assert rd.read_manifest()["dilation"]["k"] == k_final == runner.points[0].dilation


def test_a_held_k_takes_the_cpu_per_request_of_the_highest_rate_calibration(tmp_path):
    """The CPU a request costs, read by a light point, grows with k (2.6 ms at k = 100,
    8.82 at 1000 here): at a held k of 1000, its own would ask fig6a-emulated's highest
    load for k = 5000, where the run that settled at 1000 (from k = 100) measured every
    point valid. The CPU bound takes the k = 100 calibration's, as that run did."""
    from orchestrator.experiment.history import settled_k
    from orchestrator.experiment.plan import TestbedShape
    from orchestrator.experiment.run import _with_cpu
    from orchestrator.experiment.spec import load as load_spec

    spec = load_spec(REPO / "experiments/fig6a-emulated.yaml")
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)
    cpu = lambda per: {"cores": 2, "idle_cores": 0.011, "per_request_ms": per}  # noqa: E731
    at_1000 = {**_cal(828.0 - 37.3), "service_overshoot_us": 37.3, "k": 1000.0, "cpu": cpu(8.82)}
    run = {"kind": "run", "spec": spec.name, "auto": True, "k": 1000.0, "at": "then",
           "calibration": {**_cal(600.0), "k": 1000.0, "cpu": cpu(7.06)},
           "calibrated": [{**_cal(456.0), "k": 100.0, "cpu": cpu(2.6)}]}  # fmt: skip
    start = settled_k([run], spec)
    assert start.k == 1000 and start.cpu["per_request_ms"] == 2.6
    own, _ = calibrate.choose_k(at_1000, spec, shape, hold=1000.0, margin=calibrate.HELD_MARGIN)
    assert own == 5000
    k, why = calibrate.choose_k(_with_cpu(at_1000, start), spec, shape, hold=1000.0, margin=calibrate.HELD_MARGIN)
    assert k == 1000, why
