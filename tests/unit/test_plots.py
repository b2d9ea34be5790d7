"""Figures and the report of a small synthetic run: every kind is drawn as a
non-empty PNG and SVG with its caption, invalid points are marked, kinds without
inputs are skipped with a reason, and the report carries the tables, the verdicts,
the provenance and the figures."""

from __future__ import annotations

import pytest

from orchestrator.errors import UsageError
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
    assert "3,000 kRPS (invalid)" in (run / "plots" / "p99_over_time.svg").read_text()


def test_kinds_without_inputs_are_skipped(tmp_path):
    r = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0,), reps=1, n=4000, with_optional=False)
    analyze(r)
    skipped: dict = {}
    files = plot(r, ["queue_depth", "queuing_ratio", "quota_vs_load"], skipped=skipped)
    assert files == []
    assert set(skipped) == {"queue_depth", "queuing_ratio", "quota_vs_load"}
    assert "decisions.jsonl" in skipped["quota_vs_load"] and "snapshot" in skipped["queuing_ratio"]
    with pytest.raises(UsageError, match="unknown plot kind"):
        plot(r, ["pie_chart"])


def test_report(run, drawn):
    md_path = report(run)
    md = md_path.read_text()
    assert md_path == run / "report.md"
    assert md.startswith("# demo: run 20260101-000000")
    # the spec summary and the results table
    assert "- systems: rain, pallas" in md and "time dilation k = 100" in md
    # each system as its declaration names it, with the counters read from its points
    assert "  - `pallas`: Pallas-SW" in md and "    - counter `pipe.SwitchEgress.rdma_writer.writes`" in md
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


def test_queue_depth_reads_at_a_glance(run):
    """Fig. 9's queue depth against load (a worker's queue with its bound, the switch
    queue), then the switch queue over time as small multiples, one per curve and
    load on one scale; depths are integers, so are the ticks."""
    from orchestrator.experiment import plots

    figs: dict = {}
    ctx = plots._Ctx(run)
    ctx.save = lambda fig, name: figs.setdefault(name, fig) and []
    plots._queue_depth(ctx)
    axes = figs["queue_depth"].axes
    assert axes[0].get_title().startswith("worker queue depth vs load")
    assert axes[1].get_title().startswith("switch queue depth vs load")
    assert "load (kRPS, paper time)" in axes[0].get_xlabel() == axes[1].get_xlabel()
    small = axes[2:]
    assert [a.get_title() for a in small] == [
        "1000 kRPS, pallas",
        "2000 kRPS, pallas",
        "3000 kRPS, pallas (invalid)",
        "1000 kRPS, rain",
        "2000 kRPS, rain",
        "3000 kRPS, rain",
    ]
    assert len({a.get_ylim() for a in small}) == 1  # one scale
    lo, hi = small[0].get_ylim()
    assert lo < 0 < hi and hi >= 6  # tokens down, tasks up: pallas at 3000 kRPS queues 6 tasks
    for a in axes:
        y0, y1 = sorted(a.get_ylim())
        ticks = [t for t in a.get_yticks() if y0 <= t <= y1]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (a.get_title(), ticks)
    # each small panel: the tasks, the tokens, the warm-up; not a bundle of lines
    for a in small:
        assert len(a.lines) <= 1 and len(a.collections) <= 3
    # the mean switch queue against load, hollow where a repetition was invalid
    labels = [t.get_text() for t in axes[1].get_legend().get_texts()]
    assert {"rain", "pallas", "rain: max", "pallas: max", "invalid (hollow)"} <= set(labels)


def test_a_queue_of_thousands_does_not_hide_the_tokens(tmp_path):
    """An overloaded point's switch queue grows to thousands while a light one holds a
    few tokens: one scale, logarithmic beyond 1, integer ticks, both still visible."""
    from orchestrator.experiment import plots
    from orchestrator.experiment.layout import RunDir

    from .results_fixture import switch_queue_rows

    r = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0, 3000.0), reps=1, n=4000)
    rd = RunDir(r)
    rd.point("rain-k1000-r1").switch_queue.write_text(switch_queue_rows([8] * 20 + [6, 8] * 20, period_s=0.05))
    rd.point("rain-k3000-r1").switch_queue.write_text(switch_queue_rows([-40 * i for i in range(60)], period_s=0.05))
    analyze(r)
    figs: dict = {}
    ctx = plots._Ctx(r)
    ctx.save = lambda fig, name: figs.setdefault(name, fig) and []
    plots._queue_depth(ctx)
    light, heavy = figs["queue_depth"].axes[2:]
    assert light.get_yscale() == heavy.get_yscale() == "symlog"
    lo, hi = light.get_ylim()
    assert lo <= -8 and hi >= 2000  # the tokens below, the largest queue of the window (t <= 2.5 s) above
    ticks = [t for t in light.get_yticks() if lo <= t <= hi]
    assert {-8, 0, 1, 10, 100, 1000} <= set(ticks) and all(float(t).is_integer() for t in ticks)
    assert "log" in light.get_ylabel()
    assert any("window max: 2000 tasks" in t.get_text() for t in heavy.texts)
