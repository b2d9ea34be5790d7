"""Experiment specs: validation names the field; planning is a pure expansion."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from orchestrator.experiment import handler_alone
from orchestrator.experiment.plan import TestbedShape, plan
from orchestrator.experiment.spec import SpecError, load

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def base() -> dict:
    return {
        "name": "t",
        "systems": ["rain"],
        "workers": {"per_host_threads": 4},
        "workload": {"classes": [{"name": "task", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.5, 0.9]},
        "emulated": {"warmup_s": 0.5, "measure_s": 2},
        "repetitions": 2,
    }


def write(tmp_path: Path, d) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def mutate(fn):
    d = copy.deepcopy(base())
    fn(d)
    return d


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_validate_and_plan(path):
    if handler_alone.is_handler_spec(path):  # fig2: the handler alone, no points
        assert handler_alone.load(path).handler_alone.item_bytes
        with pytest.raises(SpecError, match="measures a worker's handler alone"):
            load(path)
        return
    spec = load(path)
    for emulated in (True, False):
        points = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=emulated))
        assert points and len({p.id for p in points}) == len(points)


def test_every_paper_figure_has_a_spec():
    figures = {
        (handler_alone.load(p) if handler_alone.is_handler_spec(p) else load(p)).figure
        for p in EXPERIMENTS.glob("fig*.yaml")
    }
    assert figures >= {"2", "1a", "1b", "6a", "6b", "6c", "7", "8", "9", "10", "11a", "11b", "11c"}


CASES = [
    ("unknown-system", lambda d: d.update(systems=["rain", "shinjuku"]), "systems[1]", "rain"),
    ("typo", lambda d: d.update(repetitons=3), "repetitons", "unknown field"),
    ("both-load-kinds", lambda d: d.update(load={"krps": [1], "capacity_fraction": [0.5]}), "load", "exactly one"),
    ("no-load-kind", lambda d: d.update(load={}), "load", "exactly one"),
    ("negative-load", lambda d: d.update(load={"krps": [100, -1]}), "load.krps[1]", "outside (0, 100,000] kRPS"),
    (
        "bad-dist",
        lambda d: d["workload"]["classes"][0].update(service={"dist": "pareto", "mean_us": 3}),
        "workload.classes[0].service",
        "pareto",
    ),
    (
        "bimodal-one-mode",
        lambda d: d["workload"]["classes"][0].update(service={"dist": "bimodal", "modes": [{"us": 1, "weight": 1}]}),
        "workload.classes[0].service.bimodal.modes",
        "at least 2",
    ),
    (
        "zero-service",
        lambda d: d["workload"]["classes"][0].update(service={"dist": "constant", "us": 0}),
        "workload.classes[0].service.constant.us",
        "outside [0.1, 100,000] us",
    ),
    (
        "dup-class",
        lambda d: d["workload"]["classes"].append({"name": "task", "service": {"dist": "constant", "us": 1}}),
        "workload",
        "used twice",
    ),
    ("quota-over-nmax", lambda d: d.update(rain={"initial_quota": 9, "n_max": 8}), "rain", "n_max"),
    ("bad-variant", lambda d: d.update(variants=[{"name": "x", "rain": {"r_th": 3}}]), "", "variant 'x'"),
    ("slo-empty", lambda d: d.update(slo={}), "slo", "p99"),
    ("bad-plot", lambda d: d.update(plots=["pie"]), "plots[0]", "p99_vs_load"),
    (
        "payload-too-big",
        lambda d: d["workload"]["classes"][0].update(payload={"bytes": 9000}),
        "workload.classes[0].payload.bytes",
        "1400",
    ),
    (
        "phase-times-count",
        lambda d: (
            d["workload"].update(phases=[{"at_s": 0, "capacity_fraction": 0.1}, {"at_s": 1, "capacity_fraction": 0.5}]),
            d["emulated"].update(phases_at_s=[0]),
        ),
        "",
        "1 times for 2 workload phase(s)",
    ),
    (
        "phase-times-past-end",
        lambda d: (
            d["workload"].update(phases=[{"at_s": 0, "capacity_fraction": 0.1}, {"at_s": 1, "capacity_fraction": 0.5}]),
            d["emulated"].update(phases_at_s=[0, 9]),
        ),
        "",
        "after the run ends",
    ),
    (
        "phase-unknown-class",
        lambda d: d["workload"].update(phases=[{"at_s": 0, "capacity_fraction": 0.1, "classes": ["nope"]}]),
        "workload",
        "not defined",
    ),
]


def svc(service: dict):
    return lambda d: d["workload"]["classes"][0].update(service=service)


NAN, INF = float("nan"), float("inf")
SVC = "workload.classes[0].service"
# Every number of a spec has a range a testbed can run; NaN and infinity never pass.
CASES += [
    ("service-1e300", svc({"dist": "constant", "us": 1e300}), f"{SVC}.constant.us", "outside [0.1, 100,000] us"),
    ("exp-mean-1e300", svc({"dist": "exponential", "mean_us": 1e300}), f"{SVC}.exponential.mean_us", "outside"),
    ("exp-mean-nan", svc({"dist": "exponential", "mean_us": NAN}), f"{SVC}.exponential.mean_us", "not a finite"),
    (
        "bimodal-mode-inf",
        svc({"dist": "bimodal", "modes": [{"us": 10, "weight": 1}, {"us": INF, "weight": 1}]}),
        f"{SVC}.bimodal.modes[1].us",
        "not a finite",
    ),
    (
        "bimodal-weight-nan",
        svc({"dist": "bimodal", "modes": [{"us": 10, "weight": NAN}, {"us": 100, "weight": 1}]}),
        f"{SVC}.bimodal.modes[0].weight",
        "not a finite",
    ),
    (
        "keys-too-many",
        svc({"dist": "keys", "op": "scan", "keys": 1e9, "us_per_key": 0.8}),
        f"{SVC}.keys.keys",
        "outside",
    ),
    (
        "keys-cost-1e300",
        svc({"dist": "keys", "op": "get", "keys": 10, "us_per_key": 1e300}),
        f"{SVC}.keys.us_per_key",
        "outside",
    ),
    (
        "keys-product-too-long",
        svc({"dist": "keys", "op": "scan", "keys": 100_000, "us_per_key": 10}),
        f"{SVC}.keys",
        "keys x us_per_key",
    ),
    (
        "class-weight-inf",
        lambda d: d["workload"]["classes"][0].update(weight=INF),
        "workload.classes[0].weight",
        "not a finite",
    ),
    ("krps-inf", lambda d: d.update(load={"krps": [100, INF]}), "load.krps[1]", "not a finite"),
    ("krps-huge", lambda d: d.update(load={"krps": [1e9]}), "load.krps[0]", "outside (0, 100,000] kRPS"),
    (
        "fraction-nan",
        lambda d: d.update(load={"capacity_fraction": [0.5, NAN]}),
        "load.capacity_fraction[1]",
        "not a finite",
    ),
    (
        "fraction-over",
        lambda d: d.update(load={"capacity_fraction": [2]}),
        "load.capacity_fraction[0]",
        "outside (0, 1.5]",
    ),
    ("measure-1e9", lambda d: d.update(measure_s=1e9), "measure_s", "outside [0.1, 3,600] s"),
    ("warmup-nan", lambda d: d.update(warmup_s=NAN), "warmup_s", "not a finite"),
    (
        "emulated-measure-tiny",
        lambda d: d.update(emulated={"warmup_s": 0, "measure_s": 0.001}),
        "emulated.measure_s",
        "outside",
    ),
    (
        "phase-at-inf",
        lambda d: d["workload"].update(
            phases=[{"at_s": 0, "capacity_fraction": 0.5}, {"at_s": INF, "capacity_fraction": 0.5}]
        ),
        "workload.phases[1].at_s",
        "not a finite",
    ),
    (
        "phase-fraction-nan",
        lambda d: d["workload"].update(phases=[{"at_s": 0, "capacity_fraction": NAN}]),
        "workload.phases[0].capacity_fraction",
        "not a finite",
    ),
    ("dilation-hw-inf", lambda d: d.update(dilation={"hardware": INF}), "dilation.hardware", "not a finite"),
    ("dilation-below-1", lambda d: d.update(dilation={"emulated": 0.5}), "dilation.emulated", "outside [1, 10,000]"),
    ("dilation-emu-nan", lambda d: d.update(dilation={"emulated": NAN}), "dilation.emulated", "not a finite"),
    ("quota-huge", lambda d: d.update(rain={"initial_quota": 10**9, "n_max": 8}), "rain.initial_quota", "64"),
    (
        "sample-interval-nan",
        lambda d: d.update(rain={"sample_interval_us": NAN}),
        "rain.sample_interval_us",
        "not a finite",
    ),
    ("s-th-inf", lambda d: d.update(rain={"s_th": INF}), "rain.s_th", "not a finite"),
    ("slo-p99-inf", lambda d: d.update(slo={"p99_us": INF}), "slo.p99_us", "not a finite"),
    ("lag-inf", lambda d: d.update(validity={"max_lag_us": INF}), "validity.max_lag_us", "not a finite"),
    ("measure-max-below", lambda d: d.update(measure_s=10, measure_max_s=5), "", "measure_max_s (5) is below"),
    (
        "emulated-measure-max-below",
        lambda d: d.update(emulated={"warmup_s": 1, "measure_s": 20, "measure_max_s": 10}),
        "emulated",
        "measure_max_s (10) is below",
    ),
    (
        "large-bytes-huge",
        lambda d: d["workload"]["classes"][0].update(payload={"large_bytes": 10**6}),
        "workload.classes[0].payload.large_bytes",
        "1400",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_spec_names_field(tmp_path, case):
    _, fn, path, words = case
    with pytest.raises(SpecError) as ei:
        load(write(tmp_path, mutate(fn)))
    rendered = ei.value.render()
    probs = ei.value.problems
    assert any(p.path == path for p in probs), rendered
    assert any(words.lower() in p.message.lower() for p in probs if p.path == path), rendered
    assert all(p.fix for p in probs), rendered


def test_plan_is_pure_and_scales_with_the_testbed(tmp_path):
    spec = load(write(tmp_path, base()))
    emu = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=True))
    assert emu == plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=True))
    assert [p.id for p in emu] == ["rain-f0.5-r1", "rain-f0.9-r1", "rain-f0.5-r2", "rain-f0.9-r2"]
    # 8 worker threads of 10 us (paper time): capacity 800 kRPS; dilated 100x on the emulated testbed.
    p = emu[1]
    assert p.load_krps == pytest.approx(720) and p.offered_rps == pytest.approx(7200)
    assert p.handler == "sleep" and p.measure_s == 2
    hw = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=False))
    assert hw[1].offered_rps == pytest.approx(720_000) and hw[1].handler == "spin" and hw[1].measure_s == 10


def test_plan_refuses_what_the_testbed_cannot_run(tmp_path):
    """Numbers in range can still ask a testbed for too much: tasks dilated past the
    measurement window, or more requests than its clients send. The error names the
    file, the field and the fix."""
    # 50 ms tasks x100 are 5 s each on the emulated testbed: 2 s of measurement holds none.
    path = write(tmp_path, mutate(svc({"dist": "constant", "us": 50_000})))
    with pytest.raises(SpecError) as ei:
        plan(load(path), TestbedShape(2, 1, emulated=True))
    (p,) = ei.value.problems
    assert p.path == "workload.classes" and "emulated.measure_s" in p.fix and "dilation.emulated" in p.fix
    assert str(path) in ei.value.render()
    # 100 s of measurement on hardware (no dilation) holds 2,000 of them.
    assert plan(load(path), TestbedShape(2, 1, emulated=False))
    # 10 M requests/s undilated: beyond one emulated client, fine for a DPDK client.
    path = write(tmp_path, mutate(lambda d: d.update(load={"krps": [10_000]}, dilation={"emulated": 1})))
    with pytest.raises(SpecError) as ei:
        plan(load(path), TestbedShape(2, 1, emulated=True))
    (p,) = ei.value.problems
    assert p.path == "load.krps" and "raise dilation.emulated to at least 50" in p.fix
    assert plan(load(path), TestbedShape(2, 1, emulated=False))[0].offered_rps == pytest.approx(10_000_000)
    # 30 M requests/s is past one DPDK client host too; two of them send it.
    spec = load(write(tmp_path, mutate(lambda d: d.update(load={"krps": [30_000]}))))
    with pytest.raises(SpecError, match="add client hosts"):
        plan(spec, TestbedShape(2, 1, emulated=False))
    assert plan(spec, TestbedShape(2, 2, emulated=False))


def test_paper_scale_plans(tmp_path):
    """32 single-thread workers at 10 us serve 3.2 M requests/s: the paper's scale plans
    on hardware (4 client hosts) and, dilated 100x, on the emulated testbed."""
    d = mutate(lambda d: d.update(workers={"per_host_threads": 1}, load={"capacity_fraction": [0.5, 0.9, 1.1]}))
    spec = load(write(tmp_path, d))
    hw = plan(spec, TestbedShape(worker_hosts=32, client_hosts=4, emulated=False))
    assert hw[-1].load_krps == pytest.approx(3520) and hw[-1].offered_rps == pytest.approx(3_520_000)
    emu = plan(spec, TestbedShape(worker_hosts=32, client_hosts=1, emulated=True))
    assert emu[-1].offered_rps == pytest.approx(35_200)


def test_variants_expand_into_curves(tmp_path):
    d = mutate(
        lambda d: d.update(
            variants=[
                {"name": "n1", "rain": {"initial_quota": 1}},
                {"name": "n2", "label": "depth 2", "rain": {"initial_quota": 2}},
            ],
            repetitions=1,
        )
    )
    points = plan(load(write(tmp_path, d)), TestbedShape(2, 1, True))
    assert [p.id for p in points] == ["rain.n1-f0.5-r1", "rain.n1-f0.9-r1", "rain.n2-f0.5-r1", "rain.n2-f0.9-r1"]
    assert points[0].params["initial_quota"] == 1 and points[2].params["initial_quota"] == 2
    assert points[2].curve == "rain (depth 2)"


def test_needs_names_features(tmp_path):
    d = mutate(lambda d: d.update(systems=["rain", "draconis"], rain={"adaptive": True}))
    assert load(write(tmp_path, d)).needs() == {"baselines", "adaptive"}


def test_a_runs_sized_windows_are_applied_again_on_resume(tmp_path):
    from orchestrator.experiment.dilation import with_windows

    spec = load(write(tmp_path, base()))
    pts = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=True))
    manifest = {"windows": {"rain-f0.9-r1": {"measure_s": 37.0, "why": "the model"}, "rain-f0.5-r1": {"x": 1}}}
    out = with_windows(pts, manifest)
    assert [p.measure_s for p in out] == [2, 37.0, 2, 2]
    assert out[1].digest != pts[1].digest and with_windows(pts, {}) == pts


def test_phases_follow_the_testbed_clock(tmp_path):
    """A phase starts at its at_s on the testbed's clock, or at emulated.phases_at_s on the
    emulated testbed; the clients' offered rate is the phases' mean over the window."""
    d = base()
    d["workload"]["classes"].append({"name": "big", "service": {"dist": "constant", "us": 30}})
    d["workload"]["phases"] = [
        {"at_s": 0, "capacity_fraction": 0.1, "classes": ["task"]},
        {"at_s": 3, "capacity_fraction": 0.5, "classes": ["big"]},
    ]
    d["load"] = {"capacity_fraction": [1.0]}
    d["warmup_s"], d["measure_s"] = 1, 5
    d["emulated"] = {"warmup_s": 0, "measure_s": 20, "phases_at_s": [0, 10]}
    d["dilation"] = {"emulated": 100}
    spec = load(write(tmp_path, d))
    hw = plan(spec, TestbedShape(worker_hosts=1, client_hosts=1, emulated=False))[0]
    em = plan(spec, TestbedShape(worker_hosts=1, client_hosts=1, emulated=True))[0]
    assert hw.phase_at_s == (0, 3) and em.phase_at_s == (0, 10)
    from orchestrator.experiment.plan import phase_schedule

    # 4 threads: 10% of 4 / 10 us, then 50% of 4 / 30 us (paper requests/s)
    assert phase_schedule(spec, em) == [(0, pytest.approx(40_000), ("task",)), (10, pytest.approx(66_666.67), ("big",))]
    # hardware: window 1..6 s = 2 s of phase 1, 3 s of phase 2
    assert hw.offered_rps == pytest.approx((2 * 40_000 + 3 * 200_000 / 3) / 5, rel=1e-6)
    assert em.offered_rps == pytest.approx((10 * 40_000 + 10 * 200_000 / 3) / 20 / 100, rel=1e-6)
    assert em.load_krps == pytest.approx(em.offered_rps * 100 / 1000, rel=1e-5)
