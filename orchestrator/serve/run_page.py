"""One run's page: its report (report.html as `rainmaker report` wrote it), its
figures, every point's verdict with each failed check's message (validity.json, read
through layout's PointDir), the model beside each measured point (measures.py), and
the manifest's provenance as the report renders it. Whatever a file lacks is said
beside it; nothing here raises on a damaged run folder."""

from __future__ import annotations

from pathlib import Path

from ..experiment.layout import PLOTS, RunDir
from ..experiment.points import is_measured, spec_of
from .index import RunRow
from .measures import p99_of

_WAITING = {
    "todo": "not measured yet",
    "running": "being measured",
}


def _point_ids(rd: RunDir, sweep: dict) -> list[str]:
    """The sweep's points in its order, then any other point folder."""
    ids = list(sweep)
    try:
        ids += [d.id for d in rd.points() if d.id not in sweep]
    except OSError:
        pass
    return ids


def validity_rows(rd: RunDir, sweep: dict) -> list[dict]:
    rows = []
    for pid in _point_ids(rd, sweep):
        pd, st = rd.point(pid), sweep.get(pid, {})
        status = str(st.get("status") or "-")
        v = pd.read_verdict()
        row = {"point": pid, "status": status, "valid": None, "failed": [], "not_run": [], "note": ""}
        if v is not None:
            checks = v.get("checks", [])
            row["valid"] = bool(v["valid"])
            row["failed"] = [
                {"name": c["name"], "message": str(c.get("message", ""))} for c in checks if c.get("passed") is False
            ]
            row["not_run"] = [c["name"] for c in checks if c.get("passed") is None]
        elif pd.validity.exists():
            row["note"] = "validity.json is unreadable or not what validity.py writes (cut mid-write?)"
        elif status in _WAITING:
            row["note"] = _WAITING[status]
        elif status == "failed":
            row["note"] = f"not measured: {st.get('reason') or 'its attempts failed'}"
        else:
            row["note"] = "no validity.json"
        rows.append(row)
    return rows


def model_rows(rd: RunDir, sweep: dict, manifest: dict) -> tuple[list[dict], float | None]:
    """Each measured point's p99 beside its model's, and the spec's tolerance; a point
    being measured is skipped (its files are being written)."""
    if manifest and not is_measured(manifest):
        return [], None
    spec = spec_of(manifest)
    tol = spec.validity.model_tolerance if spec is not None else None
    rows = []
    for pid in _point_ids(rd, sweep):
        if sweep.get(pid, {}).get("status") in ("todo", "running"):
            continue
        pd = rd.point(pid)
        if not pd.path.is_dir():
            continue
        m = p99_of(pd)
        within = None if tol is None or m.ratio is None else abs(m.ratio - 1.0) <= tol
        rows.append(
            {
                "point": pid,
                "p99_us": m.p99_us,
                "model_p99_us": m.model_p99_us,
                "ratio": m.ratio,
                "within": within,
                "note": m.model_note,
                "problems": list(m.problems),
            }
        )
    return rows, tol


def figures(rd: RunDir) -> list[dict]:
    """plots/*.png (and the SVG beside each), in the report's order."""
    from ..experiment.spec import PLOTS as KINDS

    rank = {k: i for i, k in enumerate(KINDS)}
    try:
        pngs = sorted(rd.plots.glob("*.png"), key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    except OSError:
        return []
    return [
        {
            "title": p.stem.replace("_", " "),
            "png": f"{PLOTS}/{p.name}",
            "svg": f"{PLOTS}/{p.stem}.svg" if p.with_suffix(".svg").is_file() else None,
        }
        for p in pngs
        if p.is_file()
    ]


def provenance_html(manifest: dict) -> str:
    """The report's provenance section (report.py), rendered to HTML."""
    from markdown_it import MarkdownIt

    from ..experiment.report import _provenance_section

    md = "\n".join(_provenance_section(manifest)[2:])  # without its heading: the page has its own
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(md)


FILES = ("report.html", "report.md", "run.log", "manifest.json", "sweep.json", "preflight.json")


def run_page(run_dir: Path, row: RunRow, state: str) -> dict:
    rd = RunDir(run_dir)
    manifest, sweep = rd.read_manifest(), rd.read_sweep()
    problems = list(row.problems)
    notes = []
    if not rd.manifest.exists():
        if state == "running":
            notes.append("no manifest.json yet: the run writes it once its testbed is ready")
        else:
            problems.append("no manifest.json: the run's spec and provenance are not known")
    if state == "running":
        notes.append("The run is going: its summary, figures and report are written when the sweep ends.")
    else:
        if not rd.report_html.is_file():
            notes.append(
                "no report.html: `rainmaker run` writes it when the sweep ends (`rainmaker report RUN_DIR` "
                "writes it for a run analysed since)"
            )
        if not rd.summary.is_file():
            notes.append("no summary.parquet: the run is not analysed")
    models, tol = model_rows(rd, sweep, manifest)
    try:
        prov = provenance_html(manifest)
    except Exception as e:  # a manifest the report's renderer cannot read: the page goes on
        prov, _ = "", problems.append(f"the provenance cannot be shown: {e}")
    return {
        "report": rd.report_html.is_file(),
        "figures": figures(rd),
        "validity": validity_rows(rd, sweep),
        "models": models,
        "tolerance": tol,
        "measured": not manifest or is_measured(manifest),
        "provenance": prov,
        "problems": problems,
        "notes": notes,
        "files": [f for f in FILES if (rd.path / f).is_file()],
    }
