"""`rainmaker serve`: the results browser's routes over synthetic run folders (Starlette's
TestClient, no socket), damaged and half-written folders at every route, the live
progress read from a run still going, the compare overlay, read-only serving of a
run's files, and the time to list 200 runs."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from orchestrator.serve import make_app  # noqa: E402
from orchestrator.serve.index import Index, find_runs  # noqa: E402
from orchestrator.serve.live import duration_s, parse_log  # noqa: E402
from tests.unit.results_fixture import synthetic_run  # noqa: E402

GOOD = "demo/20260101-000000"
SIM = "demo/20260102-000000"
LIVE = "demo/20260103-000000"
CLAIMS = [
    {
        "id": "tail-bound",
        "text": "rain's p99 stays under a second",
        "source": "test",
        "check": {"metric": "p99_us", "curve": "rain", "relation": "<", "value": 1e6, "at": [{"krps": 2000}]},
    },
    {
        "id": "impossible",
        "text": "rain's p99 is under a nanosecond",
        "source": "test",
        "check": {"metric": "p99_us", "curve": "rain", "relation": "<", "value": 0.001, "at": [{"krps": 2000}]},
    },
]

# Broken folders, each a run folder of its own: the name says what is wrong.
BROKEN = {
    "broken/manifest-cut": {"manifest.json": '{"experiment": "demo", "spec": {"name": "de'},
    "broken/sweep-cut": {"sweep.json": '{"points": {"rain-k1000-r1": {"status": "do'},
    "broken/sweep-list": {"manifest.json": "{}", "sweep.json": '{"points": ["a", "b"]}'},
    "broken/manifest-list": {"manifest.json": "[1, 2]", "sweep.json": '{"points": {}}'},
    "broken/points-damaged": {
        "manifest.json": json.dumps({"experiment": "demo", "testbed": {"kind": "emulated"}, "spec": {"x": 1}}),
        "sweep.json": json.dumps({"points": {"p1": {"status": "done", "valid": True}, "p2": {"status": "running"}}}),
        "points/p1/point.json": '{"id": "p1", "index": ',
        "points/p1/validity.json": '{"valid": tr',
        "points/p2/point.json": "[]",
        "points/p2/model/model.json": "not json",
        "points/p2/segments/1/validity.json": '{"valid": true, "checks": 3}',
        "summary.parquet": "PAR1 this is not a parquet table",
        "run.log": "garbage line\n12:00:00 point 1 of x, p1: elapsed ?, ETA ?\n99:99:99 point 1 of 2\n",
        "report.html": "<html><body>half a rep",
    },
    "broken/plots-a-file": {"manifest.json": json.dumps({"experiment": "demo"}), "plots": "a file", "points": "x"},
    "broken/empty-dirs": {"manifest.json": "", "sweep.json": ""},
}


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _with_claims(run: Path, kind: str = "emulated") -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["spec"]["claims"] = CLAIMS
    m["testbed"]["kind"] = kind
    (run / "manifest.json").write_text(json.dumps(m))


def _model_beside(point: Path, error: str | None = None) -> None:
    """model/ as model_beside.py lays it out: a simulated point's files (here the
    measured ones, in paper time by their point.json's k of 1) and model.json."""
    m = point / "model"
    if error:
        m.mkdir()
        (m / "model.json").write_text(json.dumps({"error": error}))
        return
    shutil.copytree(point / "clients", m / "clients")
    (m / "point.json").write_text(json.dumps({"id": point.name, "dilation": 1.0}))
    net = {"client_switch_ns": 350, "switch_worker_ns": 350, "switch_pkt_ns": 0, "worker_pkt_ns": 50}
    (m / "model.json").write_text(json.dumps({"network": net, "network_from": "the test"}))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """results/: an analysed run with a report and a figure, the same run as a
    simulated one, a run still going, and the broken folders."""
    from orchestrator.experiment.analyze import analyze
    from orchestrator.experiment.plots import plot
    from orchestrator.experiment.report import report

    base = tmp_path_factory.mktemp("serve")
    good = synthetic_run(base, systems=("rain", "pallas"), loads=(1000.0, 2000.0), reps=1, n=2000)
    _with_claims(good)
    _model_beside(good / "points" / "rain-k1000-r1")
    _model_beside(good / "points" / "rain-k2000-r1", error="the simulator ran out of patience")
    root = base / "results"
    analyze(good)
    plot(good, ["p99_vs_load"])
    report(good, make_plots=False)
    sim = root / SIM
    shutil.copytree(good, sim)
    _with_claims(sim, kind="simulated")
    (sim / "report.html").unlink()
    _live_run(root / LIVE, good)
    for rel, files in BROKEN.items():
        (root / rel).mkdir(parents=True)
        _write_tree(root / rel, files)
    (root / "broken" / "empty-dirs" / "points").mkdir()
    (root / GOOD / "escape").symlink_to("/etc/passwd")  # a link out of the run: never served
    return root


def _live_run(run: Path, good: Path) -> None:
    """A run measuring its second point, in segments: the first point done, a
    segment of the second landed (its validity.json written), the third to do."""
    run.mkdir(parents=True)
    m = json.loads((good / "manifest.json").read_text())
    m["created_unix"] = time.time() - 100
    (run / "manifest.json").write_text(json.dumps(m))
    now = time.time()
    states = {
        "rain-k1000-r1": {"status": "done", "valid": True, "attempts": 1, "started": now - 90, "finished": now - 60},
        "rain-k2000-r1": {"status": "running", "attempts": 1, "started": now - 60},
        "pallas-k1000-r1": {"status": "todo", "attempts": 0},
    }
    (run / "sweep.json").write_text(json.dumps({"points": states}))
    shutil.copytree(good / "points" / "rain-k1000-r1", run / "points" / "rain-k1000-r1")
    seg = run / "points" / "rain-k2000-r1" / "segments" / "1"
    shutil.copytree(good / "points" / "rain-k2000-r1" / "clients", seg / "clients")
    (seg / "point.json").write_text(json.dumps({"id": "rain-k2000-r1", "dilation": 100.0, "segment": 1}))
    (seg / "validity.json").write_text(json.dumps({"valid": True, "failed": [], "checks": []}))
    t = time.strftime("%H:%M:%S", time.localtime(now - 5))
    (run / "run.log").write_text(
        f"{t} run demo: 3 points, 0 done; results in {run}\n"
        f"{t} point 1 of 3, rain-k1000-r1: elapsed 13 s, ETA 14.9 min\n"
        f"{t} point 2 of 3, rain-k2000-r1: elapsed 43 s, ETA 2.0 min\n"
        f"{t} rain-k2000-r1: segment 1 of 3 (15.666 s)\n"
        f"{t} rain-k2000-r1: segment 2 of 3 (15.666 s), again (1)\n"
    )


@pytest.fixture(scope="module")
def client(root):
    with TestClient(make_app(root)) as c:
        yield c


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
    }


def test_every_run_folder_is_found_at_any_depth(root):
    ids = {p.relative_to(root).as_posix() for p in find_runs(root)}
    assert ids == {GOOD, SIM, LIVE, *BROKEN}


def test_the_runs_page_lists_each_run_with_its_numbers(client, root):
    r = client.get("/api/runs")
    assert r.status_code == 200
    rows = {row["id"]: row for row in r.json()}
    good = rows[GOOD]
    assert (good["experiment"], good["kind"], good["k"]) == ("demo", "emulated", 100.0)
    assert (good["total"], good["done"], good["state"]) == (4, 4, "finished")
    verdicts = [json.loads(p.read_text())["valid"] for p in (root / GOOD).glob("points/*/validity.json")]
    assert len(verdicts) == 4 and good["valid"] == sum(verdicts) < 4  # pallas at the highest load lost requests
    assert (good["claims_held"], good["claims_total"]) == (1, 2)
    assert rows[SIM]["kind"] == "simulated"
    live = rows[LIVE]
    assert (live["state"], live["done"], live["running"]) == ("running", 1, "rain-k2000-r1")
    assert live["claims_total"] is None  # no summary yet
    assert 90 <= live["duration_s"] < 200
    assert rows["broken/manifest-cut"]["problems"] and "damaged" in rows["broken/manifest-cut"]["problems"][0]

    page = client.get("/")
    assert page.status_code == 200
    for rid in (GOOD, SIM, LIVE, *BROKEN):
        assert f'href="/run/{rid}"' in page.text
    assert "1/2" in page.text and f"{good['valid']}/4" in page.text


def test_the_runs_page_filters_and_sorts(client):
    page = client.get("/", params={"testbed": "simulated"})
    assert SIM in page.text and GOOD not in page.text
    page = client.get("/", params={"experiment": "demo", "sort": "date", "order": "asc"})
    ids = [line.split('data-id="')[1].split('"')[0] for line in page.text.splitlines() if 'data-id="' in line]
    assert ids[:3] == [GOOD, SIM, LIVE], ids
    page = client.get("/", params={"sort": "date", "order": "desc", "experiment": "demo"})
    ids = [line.split('data-id="')[1].split('"')[0] for line in page.text.splitlines() if 'data-id="' in line]
    assert ids[0] == LIVE, ids


def test_a_runs_page_shows_report_figures_verdicts_model_and_provenance(client):
    r = client.get(f"/run/{GOOD}")
    assert r.status_code == 200
    t = r.text
    assert f'src="/file/{GOOD}/report.html"' in t
    assert f'src="/file/{GOOD}/plots/p99_vs_load.png"' in t
    # each failed check with its message
    assert "<b>timed_out</b>: 4,000 of 40,000 requests timed out" in t
    assert "<b>model_agreement</b>: measured p99" in t
    assert "the simulator ran out of patience" in t  # the model's error, beside its point
    assert "from the test" in t  # the model's network
    assert "0123456789abcdef" in t  # the git revision (provenance)
    report = client.get(f"/file/{GOOD}/report.html")
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert report.content == (client.app.state.index.root / GOOD / "report.html").read_bytes()  # as it is
    png = client.get(f"/file/{GOOD}/plots/p99_vs_load.png")
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


def test_live_progress_reads_the_sweep_the_log_and_the_landed_segments(client):
    r = client.get(f"/api/live/{LIVE}")
    assert r.status_code == 200
    p = r.json()
    assert p["state"] == "running"
    assert p["counts"] == {"done": 1, "running": 1, "todo": 1, "failed": 0}
    cur = p["current"]
    assert (cur["point"], cur["index"], cur["of"], cur["segment"], cur["segments"], cur["again"]) == (
        "rain-k2000-r1",
        2,
        3,
        2,
        3,
        "1",
    )
    assert p["eta"]["text"] == "ETA 2.0 min"
    assert 100 <= p["eta_left_s"] <= 120  # 2 min as of 5 s ago
    landed = {(x["point"], x["segment"]): x for x in p["landed"]}
    seg = landed[("rain-k2000-r1", 1)]
    assert seg["p99_us"] > 0 and seg["requests"] > 0 and seg["valid"] is True
    whole = landed[("rain-k1000-r1", None)]
    assert whole["model_p99_us"] > 0 and whole["ratio"] > 0  # the model beside the done point
    page = client.get(f"/run/{LIVE}")
    assert f'data-url="/api/live/{LIVE}"' in page.text and 'data-state="running"' in page.text


def test_a_run_quiet_too_long_is_stopped_not_running(root, tmp_path):
    run = tmp_path / "results" / "demo" / "20260104-000000"
    shutil.copytree(root / LIVE, run)
    old = time.time() - 3600
    for f in ("run.log", "sweep.json", "manifest.json"):
        os.utime(run / f, (old, old))
    rows = {r.id: r for r in Index(tmp_path / "results").rows()}
    assert rows["demo/20260104-000000"].state() == "stopped"


def test_compare_overlays_runs_of_one_spec(client):
    r = client.get("/compare", params=[("runs", GOOD), ("runs", SIM)])
    assert r.status_code == 200
    overlay = r.text.split('id="overlay"')[1]
    assert GOOD in overlay and SIM in overlay
    assert "rain (emulated)" in overlay and "rain (simulated)" in overlay
    img = client.get("/compare.png", params=[("runs", GOOD), ("runs", SIM)])
    assert img.status_code == 200 and img.headers["content-type"] == "image/png" and img.content[:4] == b"\x89PNG"
    # a run not analysed is named, not drawn (analysing it would write into it)
    r = client.get("/compare", params=[("runs", GOOD), ("runs", LIVE)])
    assert f"{LIVE}: not analysed" in r.text


@pytest.mark.parametrize("rid", sorted(BROKEN))
def test_broken_folders_answer_at_every_route_with_what_is_readable(client, rid):
    for url in (
        f"/run/{rid}",
        f"/api/live/{rid}",
        f"/compare?runs={rid}",
        f"/compare?runs={rid}&runs={GOOD}",
        f"/compare.png?runs={rid}",
        f"/file/{rid}/manifest.json",
        f"/file/{rid}/report.html",
        "/",
        "/api/runs",
    ):
        r = client.get(url)
        assert r.status_code in (200, 404), (url, r.status_code, r.text[:2000])
        assert r.text.strip() or url.startswith("/file/"), url  # (a run's file may be empty)
        if r.status_code == 404:
            assert "no " in r.text or "nothing to draw" in r.text, (url, r.text[:500])
    page = client.get(f"/run/{rid}").text
    assert "Provenance" in page and "Validity" in page
    for name in ("manifest", "sweep"):
        if rid in (f"broken/{name}-cut", f"broken/{name}-list"):
            assert f"{name}.json is damaged" in page, page


def test_a_damaged_points_folder_says_what_it_lacks(client):
    t = client.get("/run/broken/points-damaged").text
    assert "validity.json is unreadable" in t  # p1's verdict cut mid-write
    assert "being measured" in t  # p2
    p = client.get("/api/live/broken/points-damaged").json()
    assert p["current"] is None or p["current"]["point"] in ("p1", "p2")


def test_files_are_served_only_from_inside_run_folders(client, root):
    for url in (
        "/file/%2e%2e/%2e%2e/etc/passwd",
        f"/file/{GOOD}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"/file/{GOOD}/escape",  # a symbolic link out of the run
        "/file//etc/passwd",
        "/file/demo",  # a folder, not a run's file
        "/file/broken",
        f"/file/{GOOD}",
        f"/file/{GOOD}/points",
    ):
        r = client.get(url)
        assert r.status_code == 404, (url, r.status_code)
        assert "root:" not in r.text
    for url in ("/run/%2e%2e", "/run/%2e%2e/%2e%2e/etc", "/run/demo", "/run/nothing/here", "/api/live/%2e%2e"):
        r = client.get(url)
        assert r.status_code == 404, url
        assert "no run folder" in r.text


def test_the_browser_never_writes(root):
    before = _tree(root)
    with TestClient(make_app(root)) as c:
        for url in ("/", "/api/runs", "/compare", f"/compare?runs={GOOD}&runs={SIM}&runs={LIVE}"):
            c.get(url)
        for rid in (GOOD, SIM, LIVE, *BROKEN):
            c.get(f"/run/{rid}")
            c.get(f"/api/live/{rid}")
            c.get(f"/compare.png?runs={rid}")
    assert _tree(root) == before


def test_log_times_and_durations():
    start = time.mktime((2026, 1, 1, 23, 59, 0, 0, 0, -1))
    lines = parse_log("23:59:30 a\n00:00:10 b\nno time\n", start)
    assert [ln.text for ln in lines] == ["a", "b", "no time"]
    assert lines[1].t - lines[0].t == 40  # past midnight: the next day
    assert lines[2].t is None
    assert (duration_s("ETA 12 s"), duration_s("ETA 7.5 min"), duration_s("ETA 1 h 05 min")) == (12, 450, 3900)
    assert duration_s("ETA ?") is None


def test_listing_200_runs_is_fast(root, tmp_path):
    """200 run folders (5 points each; one in four analysed, with claims): listed
    cold once, then again from the cache. The numbers are printed; the bound is loose."""
    base = tmp_path / "results"
    good = root / GOOD
    manifest = (good / "manifest.json").read_text()
    verdict = (good / "points" / "rain-k1000-r1" / "validity.json").read_text()
    for i in range(200):
        run = base / f"exp{i % 7}" / f"20260101-{i:06d}"
        (run / "points").mkdir(parents=True)
        (run / "manifest.json").write_text(manifest)
        states = {}
        for j in range(5):
            pid = f"rain-k{j}-r1"
            (run / "points" / pid).mkdir()
            (run / "points" / pid / "validity.json").write_text(verdict)
            states[pid] = {"status": "done", "valid": True, "finished": 1.0 + j}
        (run / "sweep.json").write_text(json.dumps({"points": states}))
        if i % 4 == 0:
            shutil.copy(good / "summary.parquet", run / "summary.parquet")
    index = Index(base)
    t0 = time.perf_counter()
    rows = index.rows()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = index.rows()
    warm = time.perf_counter() - t0
    with TestClient(make_app(base)) as c:
        c.get("/")
        t0 = time.perf_counter()
        r = c.get("/")
        page = time.perf_counter() - t0
    assert len(rows) == len(again) == 200 and r.status_code == 200
    assert sum(1 for x in rows if x.claims_total) == 50
    print(f"\nlisting 200 runs: cold {cold:.3f} s, cached {warm:.3f} s; the runs page (cached) {page:.3f} s")
    assert warm < 2.0 and page < 3.0


def test_serve_binds_locally_and_warns_elsewhere(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import orchestrator.serve.server as server
    from orchestrator.cli import cli

    seen = []
    monkeypatch.setattr(server, "serve", lambda app, host, port, announce: seen.append((host, port)))
    r = CliRunner().invoke(cli, ["serve", str(tmp_path), "--port", "0"])
    assert r.exit_code == 0, r.output
    assert seen == [("127.0.0.1", 0)] and "warning" not in r.output
    r = CliRunner().invoke(cli, ["serve", str(tmp_path), "--host", "0.0.0.0"])
    assert r.exit_code == 0 and seen[-1] == ("0.0.0.0", 8765)
    assert "warning: listening on 0.0.0.0" in r.output


def test_the_server_answers_on_an_ephemeral_port_and_refuses_a_busy_one(root):
    import httpx

    from orchestrator.errors import UsageError
    from orchestrator.serve.server import bind, start

    running = start(make_app(root))
    try:
        assert running.url.startswith("http://127.0.0.1:")
        assert httpx.get(running.url + "/", timeout=10).status_code == 200
        port = int(running.url.rsplit(":", 1)[1])
        with pytest.raises(UsageError, match="cannot listen"):
            bind("127.0.0.1", port).listen()
    finally:
        running.stop()
