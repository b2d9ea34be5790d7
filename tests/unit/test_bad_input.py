"""Bad input never shows a traceback: every command that reads a file a person gives
(a spec, an inventory, a run folder and the files in it) answers a file that is not
what it should be with one message naming the file and a fix, and exit status 2.
Commands that read a run folder refuse before they write anything into it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli import rainmaker

from .results_fixture import synthetic_run

REPO = Path(__file__).resolve().parents[2]
RACK1 = REPO / "orchestrator/inventory/examples/rack1.yaml"
DEMO = REPO / "experiments/demo.yaml"
BINARY = bytes(range(256)) * 4  # NULs and bytes that are not UTF-8
LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)  # 10^9 fields in 9 lines


@pytest.fixture(scope="module")
def analysed_run(tmp_path_factory):
    """A small analysed run (one point), copied by each case that damages it."""
    from orchestrator.experiment.analyze import analyze

    r = synthetic_run(
        tmp_path_factory.mktemp("bad-input"), systems=("rain",), loads=(1000.0,), reps=1, n=400, with_optional=False
    )
    analyze(r)
    return r


def _run(tmp: Path, analysed_run: Path, damage=None) -> Path:
    d = tmp / "results" / "demo" / "run"
    shutil.copytree(analysed_run, d)
    if damage:
        damage(d)
    return d


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _binary(tmp: Path, name: str = "blob.yaml") -> Path:
    return _write(tmp / name, BINARY)


def _dir(tmp: Path, name: str) -> Path:
    (tmp / name).mkdir()
    return tmp / name


def _corrupt(name: str):
    return lambda d: _write(d / name, b"PAR1 this is not a parquet file PAR1")


def _remove(name: str):
    return lambda d: (d / name).unlink()


def _replace_with_dir(name: str):
    def damage(d: Path) -> None:
        (d / name).unlink()
        (d / name).mkdir()

    return damage


# Each case: tmp folder, analysed run -> (command line, the file the message must name).
# The run-folder cases also check that nothing in the folder changed.
CASES = {
    # -- specs ---------------------------------------------------------------------------
    "run a binary spec": lambda t, r: (["run", str(_binary(t)), "-i", str(RACK1)], "blob.yaml"),
    "run /bin/ls as the spec": lambda t, r: (["run", "/bin/ls", "-i", str(RACK1)], "/bin/ls"),
    "plan a binary spec": lambda t, r: (["plan", str(_binary(t))], "blob.yaml"),
    "plan a spec in Latin-1": lambda t, r: (
        ["plan", str(_write(t / "s.yaml", "name: caf\xe9\n".encode("latin-1")))],
        "s.yaml",
    ),
    "plan an empty spec": lambda t, r: (["plan", str(_write(t / "empty.yaml", ""))], "empty.yaml"),
    "plan a spec that is a list": lambda t, r: (["plan", str(_write(t / "list.yaml", "- a\n- b\n"))], "list.yaml"),
    "plan /dev/zero as the spec": lambda t, r: (["plan", "/dev/zero"], "/dev/zero"),
    "plan a spec nested too deeply": lambda t, r: (
        ["plan", str(_write(t / "deep.yaml", "[" * 600 + "]" * 600))],
        "deep.yaml",
    ),
    "plan a spec whose aliases explode": lambda t, r: (
        ["plan", str(_write(t / "laughs.yaml", LAUGHS))],
        "laughs.yaml",
    ),
    "plan a folder as the spec": lambda t, r: (["plan", str(_dir(t, "specdir"))], "specdir"),
    "plan a missing spec": lambda t, r: (["plan", str(t / "nope.yaml")], "nope.yaml"),
    # -- inventories -----------------------------------------------------------------------
    "inventory check a binary file": lambda t, r: (["inventory", "check", str(_binary(t))], "blob.yaml"),
    "inventory check /bin/ls": lambda t, r: (["inventory", "check", "/bin/ls"], "/bin/ls"),
    "inventory check a folder": lambda t, r: (["inventory", "check", str(_dir(t, "invdir"))], "invdir"),
    "inventory check an empty file": lambda t, r: (["inventory", "check", str(_write(t / "e.yaml", ""))], "e.yaml"),
    "inventory check a list": lambda t, r: (["inventory", "check", str(_write(t / "l.yaml", "[1, 2]\n"))], "l.yaml"),
    "inventory export -i binary": lambda t, r: (["inventory", "export", "-i", str(_binary(t))], "blob.yaml"),
    "plan -i binary": lambda t, r: (["plan", str(DEMO), "-i", str(_binary(t))], "blob.yaml"),
    "run -i binary": lambda t, r: (["run", str(DEMO), "-i", str(_binary(t))], "blob.yaml"),
    "exec -i binary": lambda t, r: (["exec", "-i", str(_binary(t)), "--", "true"], "blob.yaml"),
    "exec -i a folder": lambda t, r: (["exec", "-i", str(_dir(t, "invdir")), "--", "true"], "invdir"),
    "provision -i binary": lambda t, r: (["provision", "--check", "-i", str(_binary(t))], "blob.yaml"),
    "switch status -i binary": lambda t, r: (["switch", "status", "-i", str(_binary(t))], "blob.yaml"),
    "testbed down -i binary": lambda t, r: (["testbed", "down", "-i", str(_binary(t))], "blob.yaml"),
    "cloudlab import a binary manifest": lambda t, r: (
        ["cloudlab", "import", str(_binary(t, "m.xml")), "-o", str(t / "o.yaml")],
        "m.xml",
    ),
    "cloudlab import --map binary": lambda t, r: (
        [
            "cloudlab",
            "import",
            str(REPO / "tests/fixtures/cloudlab/p2p.xml"),
            "--map",
            str(_binary(t)),
            "-o",
            str(t / "o.yaml"),
        ],
        "blob.yaml",
    ),
    # -- where a run's results go ------------------------------------------------------------
    "run --results is a file": lambda t, r: (
        ["run", str(DEMO), "-i", str(RACK1), "--results", str(_write(t / "f", "x"))],
        str(t / "f"),
    ),
    # -- run folders -------------------------------------------------------------------------
    "analyze an empty folder": lambda t, r: (["analyze", str(_dir(t, "empty"))], "empty"),
    "report an empty folder": lambda t, r: (["report", str(_dir(t, "empty"))], "empty"),
    "plot an empty folder": lambda t, r: (["plot", str(_dir(t, "empty"))], "empty"),
    "plot a run without manifest.json": lambda t, r: (
        ["plot", str(_run(t, r, _remove("manifest.json")))],
        "manifest.json",
    ),
    "report a run without manifest.json": lambda t, r: (
        ["report", str(_run(t, r, _remove("manifest.json")))],
        "manifest.json",
    ),
    "plot a corrupt summary.parquet": lambda t, r: (
        ["plot", str(_run(t, r, _corrupt("summary.parquet")))],
        "summary.parquet",
    ),
    "report a corrupt summary.parquet": lambda t, r: (
        ["report", str(_run(t, r, _corrupt("summary.parquet")))],
        "summary.parquet",
    ),
    "plot a corrupt timeseries.parquet": lambda t, r: (
        ["plot", str(_run(t, r, _corrupt("timeseries.parquet")))],
        "timeseries.parquet",
    ),
    "report: summary.parquet is a folder": lambda t, r: (
        ["report", str(_run(t, r, _replace_with_dir("summary.parquet")))],
        "summary.parquet",
    ),
    "analyze: manifest.json is not JSON": lambda t, r: (
        ["analyze", str(_run(t, r, lambda d: _write(d / "manifest.json", "{not json")))],
        "manifest.json",
    ),
    "plot: manifest.json is a list": lambda t, r: (
        ["plot", str(_run(t, r, lambda d: _write(d / "manifest.json", "[]")))],
        "manifest.json",
    ),
    "report: manifest.json is binary": lambda t, r: (
        ["report", str(_run(t, r, lambda d: _write(d / "manifest.json", BINARY)))],
        "manifest.json",
    ),
    "analyze: sweep.json is not JSON": lambda t, r: (
        ["analyze", str(_run(t, r, lambda d: _write(d / "sweep.json", "{")))],
        "sweep.json",
    ),
    "report: sweep.json's points are a list": lambda t, r: (
        ["report", str(_run(t, r, lambda d: _write(d / "sweep.json", '{"points": []}')))],
        "sweep.json",
    ),
    "analyze: manifest.json is a folder": lambda t, r: (
        ["analyze", str(_run(t, r, _replace_with_dir("manifest.json")))],
        "manifest.json",
    ),
    "analyze: points is a file": lambda t, r: (
        ["analyze", str(_run(t, r, lambda d: (shutil.rmtree(d / "points"), _write(d / "points", "x"))))],
        "points",
    ),
    "analyze: summary.parquet is a folder": lambda t, r: (
        ["analyze", str(_run(t, r, _replace_with_dir("summary.parquet")))],
        "summary.parquet",
    ),
    "report: report.md is a folder": lambda t, r: (
        ["report", str(_run(t, r, lambda d: (d / "report.md").mkdir()))],
        "report.md",
    ),
    "run --resume a file": lambda t, r: (
        ["run", str(DEMO), "-i", str(RACK1), "--resume", str(_write(t / "notarun", "x"))],
        "notarun",
    ),
    "report: plots is a file": lambda t, r: (["report", str(_run(t, r, lambda d: _write(d / "plots", "x")))], "plots"),
    "plot an unknown kind": lambda t, r: (["plot", str(_run(t, r)), "--kind", "pie_chart"], "pie_chart"),
}


def _tree(d: Path) -> dict[str, tuple[int, int]]:
    if not d.is_dir():
        return {}
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_with_the_file_and_a_fix(case, tmp_path, analysed_run, monkeypatch, capsys):
    monkeypatch.delenv("RAINMAKER_INVENTORY", raising=False)
    monkeypatch.delenv("RAINMAKER_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    args, name = CASES[case](tmp_path, analysed_run)
    folder = Path(args[1]) if args[0] in ("analyze", "plot", "report") else None
    before = _tree(folder) if folder else None
    try:
        code, out, err = rainmaker(monkeypatch, capsys, *args)
    except Exception as e:  # noqa: BLE001 - what a person would see as a traceback
        pytest.fail(f"`rainmaker {' '.join(args)}` raised {type(e).__name__}: {e}")
    text = out + err
    assert "Traceback" not in text
    assert code == 2, text
    assert name in text, text
    assert "fix:" in text, text
    if folder is not None:
        assert _tree(folder) == before, "a refused command wrote into the folder"


# A point's own files are measured data: a damaged one marks that point (its verdict
# names the file), the rest of the run is analysed and reported as usual.
DAMAGED_POINTS = {  # case: (file in the point's folder, its new content, the name its verdict gives)
    "point.json is a list": ("point.json", "[1, 2]", "point.json"),
    "point.json has a word for a number": ("point.json", '{"id": "x", "repetition": "two", "load_krps": "?"}', None),
    "point.json is binary": ("point.json", BINARY, "point.json"),
    "validity.json's failed is a number": ("validity.json", '{"valid": true, "failed": 3}', None),
    "validity.json's checks lack messages": ("validity.json", '{"valid": false, "checks": [{"name": "x"}]}', None),
    "a client's summary.json is binary": ("clients/client0/summary.json", BINARY, "summary.json"),
    "a client's latency log is binary": ("clients/client0/latency.hlog", BINARY, "latency.hlog"),
    "point.json has objects for names": ("point.json", '{"id": "x", "index": {}, "system": {}}', "point.json"),
    "a client's summary.json has no classes": ("clients/client0/summary.json", '{"classes": "x"}', "summary.json"),
    "the worker's samples hold an object": ("workers/w0/timeseries.jsonl", '{"t": 1, "workers": {"a": 1}}\n', None),
    "the switch queue has a word for a time": ("switch/queue.jsonl", '{"t_s": "x", "balance": {"0": 1}}\n', None),
}


def test_a_damaged_point_file_marks_the_point(tmp_path, monkeypatch, capsys):
    """One run, one point per case (one sweep: the analysis and the report are the
    costly part), plus one intact point."""
    from orchestrator.experiment.layout import PointDir, RunDir

    loads = tuple(1000.0 * (i + 1) for i in range(len(DAMAGED_POINTS) + 1))
    run = synthetic_run(tmp_path, systems=("rain",), loads=loads, reps=1, n=400, with_optional=False)
    rainmaker(monkeypatch, capsys, "analyze", str(run))  # the runner's verdicts, written whole
    points = {d.id: d for d in RunDir(run).points()}
    ids = sorted(points, key=lambda i: int(i.split("-k")[1].split("-")[0]))
    for pid, (name, content, _) in zip(ids, DAMAGED_POINTS.values()):
        _write(points[pid].path / name, content)
    (run / "summary.parquet").unlink()
    for verb in (["analyze"], ["analyze", "--recheck"], ["report"]):  # the runner's verdict stands without --recheck
        try:
            code, out, err = rainmaker(monkeypatch, capsys, *verb, str(run))
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"`rainmaker {' '.join(verb)}` raised {type(e).__name__}: {e}")
        assert code == 0 and "Traceback" not in out + err, out + err
    report = (run / "report.md").read_text()
    for pid, (case, (_, _, named)) in zip(ids, DAMAGED_POINTS.items()):
        verdict = PointDir(run / "points" / pid).read_verdict()
        assert verdict is not None, case  # checked again and written whole
        if named:
            assert not verdict["valid"] and "complete" in verdict["failed"], case
            assert named in next(c["message"] for c in verdict["checks"] if c["name"] == "complete"), case
        assert pid in report, case
    assert "complete" not in PointDir(run / "points" / ids[-1]).read_verdict()["failed"]  # the intact point


def test_an_unwritable_run_folder_is_an_error_not_a_traceback(tmp_path, analysed_run, monkeypatch, capsys):
    """The machine's errors (a read-only folder, a full disk) name the path, exit 1."""
    import subprocess

    run = _run(tmp_path, analysed_run)
    if subprocess.run(["chattr", "+i", str(run)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")  # root ignores permissions; immutability it does not
    try:
        code, out, err = rainmaker(monkeypatch, capsys, "analyze", str(run))
    finally:
        subprocess.run(["chattr", "-i", str(run)], check=True)
    assert code == 1 and "Traceback" not in out + err
    assert err.startswith("error:") and f"{run}/.summary.parquet.tmp" in err and "fix:" in err


def test_a_damaged_start_time_in_the_manifest_is_reported_as_such(tmp_path, analysed_run, monkeypatch, capsys):
    run = _run(tmp_path, analysed_run)
    m = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(m | {"created_unix": 1e20}))
    (run / "plots").mkdir()
    (run / "plots" / "p99_vs_load.png").write_bytes(b"")  # as if drawn: only the report is written
    code, out, err = rainmaker(monkeypatch, capsys, "report", str(run))
    assert code == 0, out + err
    assert "- started: 1e+20 (not a time)" in (run / "report.md").read_text()
