"""Figures and the report of a small synthetic run: every kind is drawn as a
non-empty PNG and SVG with its caption, invalid points are marked, kinds without
inputs are skipped with a reason, and the report carries the tables, the verdicts,
the provenance and the figures."""

from __future__ import annotations

import pytest

from orchestrator.experiment.analyze import analyze
from orchestrator.experiment.plots import KINDS, plot
from orchestrator.experiment.report import report

from .results_fixture import synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = synthetic_run(tmp_path_factory.mktemp("plots"))
    analyze(r)
    return r


@pytest.fixture(scope="module")
def drawn(run):
    skipped: dict = {}
    files = plot(run, skipped=skipped)
    return files, skipped


def test_every_kind_as_png_and_svg(run, drawn):
    files, skipped = drawn
    assert skipped == {}
    assert sorted(p.name for p in files) == sorted(f"{k}.{ext}" for k in KINDS for ext in ("png", "svg"))
    for p in files:
        assert p.parent == run / "plots" and p.stat().st_size > 1000
        head = p.read_bytes()[:64]
        if p.suffix == ".png":
            assert head.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            text = p.read_text()
            assert text.startswith("<?xml") and "<svg" in text


def test_figures_are_in_paper_time_with_caption_and_invalid_marks(run, drawn):
    svg = (run / "plots" / "p99_vs_load.svg").read_text()
    assert "testbed: emulated" in svg and "time dilation k = 100" in svg
    assert "kRPS, paper time" in svg and "99% tail latency (us)" in svg
    assert "invalid (hollow)" in svg
    sd = (run / "plots" / "p99_slowdown_vs_load.svg").read_text()
    assert "SLO: p99 slowdown 10" in sd
    per_class = (run / "plots" / "p99_per_class.svg").read_text()
    assert "get: 99% tail latency" in per_class and "scan: 99% tail latency" in per_class
    # the invalid pallas point at 3000 kRPS shows up in the per-interval figure's legend
    assert "3000 kRPS (invalid)" in (run / "plots" / "p99_over_time.svg").read_text()


def test_kinds_without_inputs_are_skipped(tmp_path):
    r = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0,), reps=1, n=4000, with_optional=False)
    analyze(r)
    skipped: dict = {}
    files = plot(r, ["queue_depth", "queuing_ratio", "quota_vs_load"], skipped=skipped)
    assert files == []
    assert set(skipped) == {"queue_depth", "queuing_ratio", "quota_vs_load"}
    assert "decisions.jsonl" in skipped["quota_vs_load"] and "snapshot" in skipped["queuing_ratio"]
    with pytest.raises(ValueError, match="unknown plot kind"):
        plot(r, ["pie_chart"])


def test_report(run, drawn):
    md_path = report(run)
    md = md_path.read_text()
    assert md_path == run / "report.md"
    assert md.startswith("# demo: run 20260101-000000")
    # the spec summary and the results table
    assert "- systems: rain, pallas" in md and "time dilation k = 100" in md
    assert "| curve | load (kRPS) | achieved (kRPS) | p50 (us) | p99 (us) mean |" in md
    assert "| rain | 1,000 | 990 |" in md
    assert "### Class `get`" in md and "### Class `scan`" in md
    # throughput under the SLO
    assert "## Throughput under SLO" in md and "p99_slowdown <= 10" in md
    assert "| rain | 1,980 | 2,000 |" in md and "| pallas | 990 | 1,000 |" in md
    # verdicts: which points failed, which check, and why
    assert "10 of 12 points passed every check that ran." in md
    assert "| pallas-k3000-r1 | no | timed_out | timed_out: 6,000 of 60,000 requests timed out" in md
    assert "| rain-k1000-r1 | yes | - | - |" in md
    assert "check `interarrival` not run on some points: no trace" in md
    # provenance and figures
    assert "git revision: `0123456789abcdef` (clean)" in md and "- started: 2026-01-01 00:00:00 UTC" in md
    assert "| client0 | 2 | 6.1.0-18-amd64 |" in md and "Other manifest entries" not in md
    assert "| dpdk | `22.11.4` |" in md and "| rain.p4 | `sha256:abc` |" in md
    assert "![p99_vs_load](plots/p99_vs_load.png)" in md
    assert md.index("p99_vs_load.png") < md.index("quota_vs_load.png")
    html = (run / "report.html").read_text()
    assert "<table>" in html and '<img src="plots/p99_vs_load.png"' in html
    assert "pallas-k3000-r1" in html
