"""`rainmaker serve`: a local, read-only browser of a results folder's runs.

    index     the runs under a results root, one row each, cached on the files' mtimes
    run_page  one run's page: validity, the model beside each point, figures, provenance
    measures  a point's p99 and its model's, paper time, cached on the latency logs
    live      a run still going: points done and to do, the current point and segment,
              elapsed and ETA (run.log's lines), the segments' p99 as they land
    overlay   runs of one spec overlaid, drawn as `rainmaker compare` draws them
    app       the Starlette application: routes, templates, the run folders' files
    server    uvicorn on a bound socket (127.0.0.1 by default), readiness probed

It only reads run folders: it never writes one, never starts or stops a run, and
never asks a running process anything; what a half-written folder lacks is said on
the page.
"""

from __future__ import annotations

from .app import make_app

__all__ = ["make_app"]
