"""The progress bar of the long commands (orchestrator/progress.py): on a terminal it
shows done of total, what is being done and an ETA; anywhere else nothing, so the
commands' plain lines are all there is. Each command's bar: run's sweep, provision's
tasks, simulate's points (one spec, and several under one bar)."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from rich.console import Console

from orchestrator import provision as prov
from orchestrator.errors import Interrupted
from orchestrator.experiment.progress import Progress
from orchestrator.inventory import Inventory
from orchestrator.progress import Bar, Pace
from orchestrator.provision_events import EventAggregator
from tests.cli import rainmaker
from tests.unit.test_provision import EXAMPLE, FakeRunner, converge_events
from tests.unit.test_sim_run import TINY

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SHOW_CURSOR = "\x1b[?25h"


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160), out


def pipe() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=160, soft_wrap=True), out  # as the CLI's consoles


def frames(out: io.StringIO) -> str:
    return ANSI.sub("", out.getvalue())


# -- the bar -------------------------------------------------------------------------------


def test_pace_scales_the_time_so_far_to_the_work_left():
    pace = Pace(30)
    assert pace.left_s() is None  # nothing done: no pace to go by
    pace.did(10, 5.0)
    assert pace.left_s() == pytest.approx(10.0)
    pace.did(10, None)  # dropped (a refused point): less to do, the pace unchanged
    assert pace.left_s() == pytest.approx(5.0)


def test_a_bar_on_a_terminal_shows_done_of_total_what_and_a_rough_eta():
    console, out = terminal()
    with Bar(console) as bar:
        bar.start(4, label="fig6a")
        bar.update(doing="rain-f0.3-r1")
        bar.did(spent_s=30.0)
    text = frames(out)
    assert "fig6a" in text and "1/4" in text and "rain-f0.3-r1" in text
    assert "ETA 90 s (rough)" in text  # 30 s a unit, 3 units left
    assert text.rstrip().endswith("ETA 90 s (rough)")  # the last frame stays


def test_the_eta_counts_down_between_updates(monkeypatch):
    console, out = terminal()
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    with Bar(console) as bar:
        bar.start(2)
        bar.eta_in(600)
        now[0] += 300
        bar.rich.refresh()
        assert "ETA 5.0 min (rough)" in frames(out)
        now[0] += 301
    assert frames(out).rstrip().endswith("ETA soon (rough)")


def test_a_bar_off_a_terminal_shows_nothing():
    console, out = pipe()
    with Bar(console) as bar:
        bar.start(4, label="fig6a")
        bar.did(spent_s=1.0)
    assert out.getvalue() == ""


def test_ctrl_c_stops_the_live_display_and_gives_the_cursor_back():
    console, out = terminal()
    with pytest.raises(KeyboardInterrupt):
        with Bar(console) as bar:
            bar.start(3)
            raise KeyboardInterrupt
    assert not bar.rich.live.is_started and SHOW_CURSOR in out.getvalue()


# -- rainmaker run: the sweep's bar ----------------------------------------------------------


def test_the_runs_bar_shows_the_point_its_phase_and_the_runs_eta():
    console, out = terminal()
    with Progress(console) as prog:
        prog.start(5, 1)
        prog.point(SimpleNamespace(id="rain-f0.6-r1"), 7.5 * 60)
        prog.phase("measuring")
        prog.rich.refresh()
        assert re.search(r"rain-f0\.6-r1 .*1/5 measuring .*ETA 7\.[56] min", frames(out))
        # the ETA counts down between points: a point whose deadline is past says "soon"
        prog.point(SimpleNamespace(id="rain-f0.7-r1"), 0.0, " (at least)")
        prog.rich.refresh()
        assert re.search(r"rain-f0\.7-r1 .*ETA soon \(at least\)", frames(out))
        prog.advance()
    assert "2/5" in frames(out)
    console, out = pipe()
    with Progress(console) as prog:
        prog.start(5, 1)
        prog.point(SimpleNamespace(id="rain-f0.6-r1"), 450.0)
        prog.advance()
    assert out.getvalue() == ""


# -- rainmaker provision: tasks done of those the last run of its kind started ------------


@pytest.fixture
def inventory() -> Inventory:
    return Inventory.model_validate(yaml.safe_load(EXAMPLE.read_text()))


@pytest.fixture
def runner(monkeypatch):
    import ansible_runner

    fake = FakeRunner(converge_events().out)
    monkeypatch.setattr(ansible_runner, "run", fake.run)
    return fake


TASKS = 5  # converge_events() starts five tasks


def test_provision_on_a_terminal_counts_tasks_against_the_last_run(tmp_path, inventory, runner):
    console, out = terminal()
    prov.provision(inventory, work_dir=tmp_path, console=console)
    first = frames(out)
    assert f"{TASKS}/?" in first and "no ETA" in first  # nothing to count by yet
    assert "Provision the switch" in first and "client0" in first  # the hosts' table, under the bar
    assert list(json.loads((tmp_path / prov.TASKS_FILE).read_text()).values()) == [TASKS]
    console, out = terminal()
    prov.provision(inventory, work_dir=tmp_path, console=console)
    assert f"{TASKS}/{TASKS}" in frames(out)
    assert SHOW_CURSOR in out.getvalue()  # gone once done (transient), the cursor back
    console, out = terminal()
    prov.provision(inventory, work_dir=tmp_path, console=console, check=True)
    assert f"{TASKS}/?" in frames(out)  # a dry run is another kind of run


def test_provisions_bar_paces_the_tasks_it_follows(monkeypatch):
    console, out = terminal()
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])  # provision's and the bar's clock
    agg = EventAggregator()
    events = converge_events().out
    starts = [i for i, e in enumerate(events) if e["event"] == "playbook_on_task_start"]
    with Bar(console) as bar:
        bar.start(10, label="provision")
        handler = prov._following(agg, bar, planned=10)
        for e in events[: starts[2] + 1]:  # two tasks done, 20 s each
            now[0] += 20.0 if e["event"] == "playbook_on_task_start" else 0.0
            handler(e)
        bar.rich.refresh()
        assert "2/10" in frames(out) and "ETA 2.7 min (rough)" in frames(out)  # 8 tasks x 20 s


def test_provision_off_a_terminal_shows_nothing_until_its_summary(tmp_path, inventory, runner):
    console, out = pipe()
    report = prov.provision(inventory, work_dir=tmp_path, console=console)
    assert out.getvalue() == "" and report.ok


def test_a_run_that_did_not_finish_leaves_the_count_alone(tmp_path, inventory, monkeypatch):
    import ansible_runner

    partial = FakeRunner(converge_events().out[:8], status="canceled")
    monkeypatch.setattr(ansible_runner, "run", partial.run)
    with pytest.raises(Interrupted):
        prov.provision(inventory, work_dir=tmp_path, progress=False)
    assert not (tmp_path / prov.TASKS_FILE).exists()


# -- rainmaker simulate: points, paced by their wall times ------------------------------------


def specs(tmp_path: Path, *names: str) -> list[str]:
    """Tiny specs (tests/unit/test_sim_run.py's), each of two points."""
    out = []
    for name in names:
        p = tmp_path / f"{name}.yaml"
        p.write_text(TINY.replace("name: tiny", f"name: {name}"))
        out.append(str(p))
    return out


def test_simulate_on_a_terminal_shows_its_bar_under_its_lines(tmp_path):
    from orchestrator.simulate.runner import simulate

    console, out = terminal()
    simulate(*specs(tmp_path, "tiny"), results_root=tmp_path / "r", jobs=1, analyze_after=False, console=console)
    text = frames(out)
    assert "[2/2] rain-f0.6-r1" in text or "[2/2] rain-f0.3-r1" in text  # the plain lines, as ever
    assert re.search(r"tiny ━+ 2/2 ", text)  # and the bar, its last frame full


def test_simulate_off_a_terminal_prints_only_its_lines(tmp_path):
    from orchestrator.simulate.runner import simulate

    console, out = pipe()
    simulate(*specs(tmp_path, "tiny"), results_root=tmp_path / "r", jobs=1, analyze_after=False, console=console)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("· ") for line in lines), lines
    assert any("[2/2]" in line for line in lines) and "━" not in out.getvalue()


def test_several_specs_run_in_turn_under_one_bar(tmp_path, monkeypatch, capsys):
    from orchestrator.cli import simulate as cli_simulate

    console, out = terminal()
    monkeypatch.setattr(cli_simulate, "console", console)
    args = [
        "simulate",
        *specs(tmp_path, "tiny1", "tiny2"),
        "--results",
        str(tmp_path / "r"),
        "--no-analysis",
        "-j",
        "1",
    ]
    code, _, err = rainmaker(monkeypatch, capsys, *args)
    assert code == 0, err
    text = frames(out)
    assert re.search(r"tiny2 \(2 of 2\) ━+ 4/4 ", text)  # the last frame: 2 + 2 points
    assert text.count("results: ") == 2


def test_several_specs_off_a_terminal_print_only_their_lines(tmp_path, monkeypatch, capsys):
    args = [
        "simulate",
        *specs(tmp_path, "tiny1", "tiny2"),
        "--results",
        str(tmp_path / "r"),
        "--no-analysis",
        "-j",
        "1",
    ]
    code, out, err = rainmaker(monkeypatch, capsys, *args)
    assert code == 0, err
    runs = [Path(line.split("results: ", 1)[1].strip()) for line in out.splitlines() if line.startswith("results: ")]
    assert [r.parent.name for r in runs] == ["tiny1", "tiny2"]
    assert "━" not in out and "(1 of 2)" not in out


def test_several_specs_refuse_what_names_one_run_and_any_spec_the_simulator_refuses(tmp_path, monkeypatch, capsys):
    two = specs(tmp_path, "tiny1", "tiny2")
    code, _, err = rainmaker(monkeypatch, capsys, "simulate", *two, "--resume", str(tmp_path))
    assert code == 2 and "give one SPEC with it" in err
    code, _, err = rainmaker(monkeypatch, capsys, "simulate", *two, "--system", "r2p2", "--results", str(tmp_path))
    assert code == 2 and "has no such system" in err
    assert not (tmp_path / "tiny1").exists()  # refused before any spec ran
