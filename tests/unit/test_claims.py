"""A paper's claims judged with the run's intervals (orchestrator/experiment/claims.py):
holds when the intervals support it, does not hold when they contradict it, and
inconclusive when they overlap or a point is invalid, with the reason in numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pydantic import ValidationError

from orchestrator.experiment.claims import FAILS, HOLDS, INCONCLUSIVE, Claim, evaluate, references
from orchestrator.experiment.spec import Spec


def row(curve, fraction, p99, lo, hi, *, valid=True, rep=0):
    load = 100 * fraction
    return {
        "point_id": f"{curve}-{fraction}-{rep}",
        "curve": curve,
        "system": curve,
        "class": "all",
        "load_krps": load,
        "capacity_fraction": fraction,
        "repetition": rep,
        "valid": valid,
        "failed_checks": "" if valid else "load,p99_ci",
        "achieved_krps": load,
        "offered_krps": load,
        "p50_us_paper": p99 / 3,
        "p50_ci_lo_us_paper": lo / 3,
        "p50_ci_hi_us_paper": hi / 3,
        "p99_us_paper": p99,
        "p99_ci_lo_us_paper": lo,
        "p99_ci_hi_us_paper": hi,
        "p999_us_paper": p99 * 2,
        "p99_slowdown": p99 / 10,
        "samples": 10_000,
        "rejected": 0,
        "sent": 1000,
    }


def frame(*rows):
    return pd.DataFrame(list(rows))


def claim(**check):
    return Claim.model_validate({"id": "c", "text": "t", "source": "s", "check": check})


AT = [{"fraction": 0.5}]


@pytest.mark.parametrize(
    ("a", "b", "rel", "verdict"),
    [
        ((10, 9, 11), (20, 19, 21), "<", HOLDS),
        ((10, 9, 11), (20, 19, 21), ">", FAILS),
        ((10, 9, 15), (14, 13, 21), "<", INCONCLUSIVE),  # overlapping intervals
        ((20, 19, 21), (10, 9, 11), ">=", HOLDS),
    ],
)
def test_two_curves_are_compared_by_their_intervals(a, b, rel, verdict):
    df = frame(row("x", 0.5, *a), row("y", 0.5, *b))
    v = evaluate(claim(metric="p99_us", curve="x", relation=rel, than="y", at=AT), df)
    assert v.verdict == verdict, v.evidence
    if verdict == INCONCLUSIVE:
        assert "overlap" in v.evidence


def test_a_value_is_held_to_its_interval_and_every_named_load_must_hold():
    df = frame(row("x", 0.5, 15, 14, 16), row("x", 0.8, 25, 22, 31))
    at = [{"fraction": 0.5}, {"fraction": 0.8}]
    assert evaluate(claim(metric="p99_us", curve="x", relation="<=", value=20, at=AT), df).verdict == HOLDS
    v = evaluate(claim(metric="p99_us", curve="x", relation="<=", value=20, at=at), df)
    assert v.verdict == FAILS and "load 0.8" in v.evidence.split(";")[0], v.evidence  # the deciding load first


def test_an_invalid_or_missing_point_makes_a_claim_inconclusive_and_says_which():
    df = frame(row("x", 0.5, 15, 14, 16, valid=False), row("y", 0.5, 30, 29, 31))
    v = evaluate(claim(metric="p99_us", curve="x", relation="<", than="y", at=AT), df)
    assert v.verdict == INCONCLUSIVE and "not valid (load,p99_ci)" in v.evidence
    v = evaluate(claim(metric="p99_us", curve="y", relation="<", value=50, at=[{"krps": 70}]), df)
    assert v.verdict == INCONCLUSIVE and "no point of y at 70 kRPS" in v.evidence


def test_within_uses_the_ratio_interval():
    df = frame(row("x", 0.5, 100, 95, 105), row("y", 0.5, 100, 97, 103))
    assert (
        evaluate(claim(metric="p99_us", curve="x", relation="within", than="y", tolerance_pct=15, at=AT), df).verdict
        == HOLDS
    )
    # [95/103, 105/97] = [0.92, 1.08] straddles 1 +- 5%
    v = evaluate(claim(metric="p99_us", curve="x", relation="within", than="y", tolerance_pct=5, at=AT), df)
    assert v.verdict == INCONCLUSIVE and "straddles" in v.evidence


def sweep(curve, p99s, slo_breaks_at=None):
    return [row(curve, f, p, p * 0.95, p * 1.05) for f, p in zip((0.2, 0.4, 0.6, 0.8), p99s)]


def test_throughput_under_slo_is_the_knee_between_met_and_broke():
    # x meets 1000 us up to 0.6 (60 kRPS) and breaks at 0.8; y breaks at 0.4
    df = frame(*sweep("x", [300, 400, 600, 2000]), *sweep("y", [300, 1500, 3000, 9000]))
    spec_slo = type("S", (), {"slo": None})()
    c = claim(metric="throughput_under_slo", curve="x", relation="ratio>=", than="y", value=1.5, slo={"p99_us": 1000})
    v = evaluate(c, df, spec_slo)
    # x in [60, 80), y in [20, 40): ratio in [60/40, 80/20] = [1.5, 4]
    assert v.verdict == HOLDS and "[1.5, 4]" in v.evidence, v.evidence
    c = claim(metric="throughput_under_slo", curve="x", relation="ratio>=", than="y", value=2, slo={"p99_us": 1000})
    assert evaluate(c, df, spec_slo).verdict == INCONCLUSIVE
    c = claim(metric="throughput_under_slo", curve="y", relation="collapses_before", than="x", slo={"p99_us": 1000})
    assert evaluate(c, df, spec_slo).verdict == HOLDS
    c = claim(metric="throughput_under_slo", curve="x", relation="collapses_before", than="y", slo={"p99_us": 1000})
    assert evaluate(c, df, spec_slo).verdict == FAILS


def test_a_knee_past_an_invalid_point_is_open_ended():
    rows = sweep("x", [300, 400, 600, 700])
    rows[2]["valid"] = False
    c = claim(metric="throughput_under_slo", curve="x", relation=">=", value=70, slo={"p99_us": 1000})
    v = evaluate(c, frame(*rows))
    assert v.verdict == INCONCLUSIVE and "invalid at 60 kRPS" in v.evidence and "inf" in v.evidence


def test_claims_must_be_well_formed():
    with pytest.raises(ValidationError, match="exactly one of check and not_checkable"):
        Claim.model_validate({"id": "c", "text": "t", "source": "s"})
    with pytest.raises(ValidationError, match="read at named loads"):
        claim(metric="p99_us", curve="x", relation="<", value=3)
    with pytest.raises(ValidationError, match="than"):
        claim(metric="p99_us", curve="x", relation="ratio>=", value=3, at=AT)


def base_spec(**extra):
    return {
        "name": "s",
        "systems": ["rain", "r2p2"],
        "workload": {"classes": [{"name": "t", "service": {"dist": "constant", "us": 10}}]},
        "load": {"capacity_fraction": [0.5]},
        **extra,
    }


def test_a_spec_names_only_curves_it_draws():
    ok = {
        "id": "a",
        "text": "t",
        "source": "s",
        "check": {"metric": "p99_us", "curve": "rain", "relation": "<", "than": "r2p2", "at": AT},
    }
    Spec.model_validate(base_spec(claims=[ok]))
    bad = {**ok, "check": {**ok["check"], "than": "pallas"}}
    with pytest.raises(ValidationError, match="names curve 'pallas'") as e:
        Spec.model_validate(base_spec(claims=[bad]))
    assert e.value.errors()[0]["ctx"]["fix"].startswith("use one of: rain, r2p2 (")
    with pytest.raises(ValidationError, match="given twice"):
        Spec.model_validate(base_spec(claims=[ok, ok]))


def test_references_sit_beside_the_runs_value():
    spec = Spec.model_validate(
        base_spec(
            references=[
                {
                    "id": "r",
                    "curve": "rain",
                    "metric": "p99_us",
                    "at": {"fraction": 0.5},
                    "value": 15,
                    "approx": True,
                    "source": "x",
                },
                {"id": "q", "curve": "r2p2", "metric": "p99_us", "at": {"fraction": 0.9}, "value": 30, "source": "x"},
            ]
        )
    )
    df = frame(row("rain", 0.5, 18, 17, 19), row("r2p2", 0.5, 30, 29, 31))
    r, q = references(spec, df)
    assert r.ours == 18 and math.isclose(r.ratio, 1.2) and q.ours is None and "no point" in q.note


def test_claims_of_a_simulated_run_in_the_cli_the_page_and_the_report(tmp_path, monkeypatch, capsys):
    """End to end on a small simulated run: the verdicts as JSON, the page, the report's
    section; a claim the run contradicts does not hold, one it supports holds."""
    import json

    import yaml

    from orchestrator.experiment.layout import RunDir
    from orchestrator.simulate.runner import simulate
    from tests.cli import rainmaker

    spec = base_spec(
        systems=["rain", "racksched"],
        workload={
            "classes": [
                {
                    "name": "t",
                    "service": {"dist": "bimodal", "modes": [{"us": 10, "weight": 0.5}, {"us": 100, "weight": 0.5}]},
                }
            ]
        },
        load={"capacity_fraction": [0.5, 0.8]},
        warmup_s=0.02,
        measure_s=0.3,
        claims=[
            {
                "id": "pull-beats-push",
                "text": "t",
                "source": "s",
                "check": {
                    "metric": "p99_us",
                    "curve": "rain",
                    "relation": "<",
                    "than": "racksched",
                    "at": [{"fraction": 0.8}],
                },
            },
            {
                "id": "absurd",
                "text": "t",
                "source": "s",
                "check": {"metric": "p99_us", "curve": "rain", "relation": "<", "value": 1, "at": [{"fraction": 0.5}]},
            },
        ],
        references=[
            {"id": "ref", "curve": "rain", "metric": "p99_us", "at": {"fraction": 0.5}, "value": 150, "source": "x"}
        ],
    )
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(spec))
    rd = RunDir(simulate(f, results_root=tmp_path / "r", worker_hosts=2, jobs=2, progress=False))
    code, out, err = rainmaker(monkeypatch, capsys, "claims", "--json", "--page", str(tmp_path / "p.md"), str(rd.path))
    assert code == 0, err
    (got,) = json.loads(out[out.index("[") :])
    verdicts = {c["id"]: c["verdict"] for c in got["claims"]}
    assert verdicts == {"pull-beats-push": HOLDS, "absurd": FAILS}, got["claims"]
    assert got["references"][0]["ours"] > 0 and got["testbed"] == "simulated"
    page = (tmp_path / "p.md").read_text()
    assert "**holds**" in page and "**does not hold**" in page and "1 holds, 1 does not hold" in page
    assert "## Claims" in (rd.path / "report.md").read_text()
