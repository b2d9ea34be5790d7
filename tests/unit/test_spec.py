"""Experiment specs: validation names the field; planning is a pure expansion."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

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
    spec = load(path)
    for emulated in (True, False):
        points = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=emulated))
        assert points and len({p.id for p in points}) == len(points)


def test_every_paper_figure_has_a_spec():
    figures = {load(p).figure for p in EXPERIMENTS.glob("fig*.yaml")}
    assert figures >= {"1a", "1b", "6a", "6b", "6c", "7", "8", "9", "10", "11a", "11b", "11c"}


CASES = [
    ("unknown-system", lambda d: d.update(systems=["rain", "shinjuku"]), "systems[1]", "rain"),
    ("typo", lambda d: d.update(repetitons=3), "repetitons", "unknown field"),
    ("both-load-kinds", lambda d: d.update(load={"krps": [1], "capacity_fraction": [0.5]}), "load", "exactly one"),
    ("no-load-kind", lambda d: d.update(load={}), "load", "exactly one"),
    ("negative-load", lambda d: d.update(load={"krps": [100, -1]}), "load", "positive"),
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
        "greater than 0",
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
        "phase-unknown-class",
        lambda d: d["workload"].update(phases=[{"at_s": 0, "capacity_fraction": 0.1, "classes": ["nope"]}]),
        "workload",
        "not defined",
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
