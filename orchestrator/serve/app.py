"""The results browser's Starlette application: the runs page, a run's page (and its
live progress as JSON, polled by the page), the compare page and its image, and the
run folders' own files, read-only.

Every route answers 200 with what it could read, or 404 with what it could not find:
a damaged or half-written run folder is described on its page, never a server error.
Files are served only from inside a run folder under the root, after resolving the
path (so `..` and symbolic links cannot leave it).
"""

from __future__ import annotations

import datetime
import math
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .index import SORT_KEYS, Index, RunRow, sort_rows

HERE = Path(__file__).resolve().parent
POLL_MS = 2000  # how often a running run's page asks for its progress


def _when(t: float | None) -> str:
    if t is None or not math.isfinite(t):
        return "-"
    try:
        return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "-"


def _secs(s: float | None) -> str:
    from ..experiment.estimate import fmt

    return "-" if s is None or not math.isfinite(s) else fmt(s)


def _num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{digits}g}" if isinstance(x, float) else str(x)


class Browser:
    """The routes over one results folder; each answers from the files as they are."""

    def __init__(self, root: Path):
        self.index = Index(root)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters.update(when=_when, secs=_secs, num=_num)

    def page(self, request: Request, name: str, status: int = 200, **ctx) -> Response:
        ctx = {"root": str(self.index.root), **ctx}
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    def not_found(self, request: Request, what: str) -> Response:
        return self.page(request, "error.html", 404, message=what)

    def _run(self, request: Request) -> tuple[str, Path | None, RunRow | None]:
        run_id = request.path_params["run_id"]
        path = self.index.resolve(run_id)
        return run_id, path, (self.index.row(path) if path is not None else None)

    def runs(self, request: Request) -> Response:
        q = request.query_params
        rows = self.index.rows()
        exp, kind = q.get("experiment", ""), q.get("testbed", "")
        shown = [r for r in rows if (not exp or r.experiment == exp) and (not kind or r.kind == kind)]
        key = q.get("sort", "date") if q.get("sort") in SORT_KEYS else "date"
        desc = q.get("order", "desc" if key == "date" else "asc") == "desc"
        now = time.time()
        return self.page(
            request,
            "runs.html",
            rows=sort_rows(shown, key, desc, now),
            total=len(rows),
            experiments=sorted({r.experiment for r in rows}),
            kinds=sorted({r.kind for r in rows}),
            experiment=exp,
            testbed=kind,
            sort=key,
            desc=desc,
            now=now,
            exists=self.index.root.is_dir(),
        )

    def runs_json(self, request: Request) -> Response:
        now = time.time()
        return JSONResponse([r.as_dict(now) for r in self.index.rows()])

    def run(self, request: Request) -> Response:
        from .run_page import run_page

        run_id, path, row = self._run(request)
        if path is None:
            return self.not_found(request, f"no run folder {run_id!r} under {self.index.root}")
        now = time.time()
        state = row.state(now)
        ctx = run_page(path, row, state)
        return self.page(request, "run.html", row=row, state=state, now=now, poll_ms=POLL_MS, **ctx)

    def live(self, request: Request) -> Response:
        from .live import progress

        run_id, path, row = self._run(request)
        if path is None:
            return JSONResponse({"error": f"no run folder {run_id!r} under {self.index.root}"}, status_code=404)
        return JSONResponse(progress(path, row))

    def file(self, request: Request) -> Response:
        """A file of a run folder, as it is on disk (the report, its figures)."""
        rel, root = request.path_params["path"], self.index.root
        try:
            target = (root / rel).resolve()
            target.relative_to(root)
        except (OSError, ValueError):
            return self.not_found(request, f"no file {rel!r}: it is not under the results folder")
        inside = any(root in p.parents and self.index.resolve(self.index.run_id(p)) == p for p in target.parents)
        if not inside or not target.is_file():
            return self.not_found(request, f"no file {rel!r} in a run folder under {root}")
        return FileResponse(target)

    def _chosen(self, request: Request) -> tuple[list[str], list[str]]:
        """The runs a compare request names: those found under the root, and the others."""
        named = [r for r in request.query_params.getlist("runs") if r]
        return [r for r in named if self.index.resolve(r)], [r for r in named if not self.index.resolve(r)]

    def compare(self, request: Request) -> Response:
        from .overlay import overlay

        q = request.query_params
        rows = self.index.rows()
        found, missing = self._chosen(request)
        exp = q.get("experiment") or next((r.experiment for r in rows if r.id in found), "")
        result = overlay([self.index.resolve(r) for r in found], found, q.get("kind")) if found else None
        return self.page(
            request,
            "compare.html",
            experiments=sorted({r.experiment for r in rows}),
            experiment=exp,
            candidates=sort_rows([r for r in rows if not exp or r.experiment == exp], "date", True),
            chosen=found,
            missing=missing,
            result=result,
            kind=(result.kind if result else None),
        )

    def compare_png(self, request: Request) -> Response:
        from .overlay import overlay

        found, _ = self._chosen(request)
        result = (
            overlay([self.index.resolve(r) for r in found], found, request.query_params.get("kind")) if found else None
        )
        if result is None or result.png is None:
            why = "; ".join(result.problems) if result else "no run under the results folder was named"
            return Response(f"nothing to draw: {why}\n", status_code=404, media_type="text/plain")
        return Response(result.png, media_type="image/png")

    async def http_error(self, request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        return self.page(request, "error.html", exc.status_code, message=str(exc.detail))


def make_app(root: str | Path) -> Starlette:
    """The application over the results folder `root` (it need not exist yet)."""
    b = Browser(Path(root))
    routes = [
        Route("/", b.runs),
        Route("/api/runs", b.runs_json),
        Route("/run/{run_id:path}", b.run),
        Route("/api/live/{run_id:path}", b.live),
        Route("/file/{path:path}", b.file),
        Route("/compare", b.compare),
        Route("/compare.png", b.compare_png),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: b.http_error})
    app.state.index = b.index
    return app
