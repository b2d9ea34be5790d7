"""How a point's agents ended: the acceptance of a measurement, before its validity.

A worker agent runs rain-worker until the runner stops it; a client agent runs
rain-client to the end of its schedule, then exits. So a point whose testbed held
together leaves, after the runner's stop:
- an agent.json from every host (an agent killed outright leaves none, and its
  series ends early);
- `worker_exit: 0` from every worker agent (a rain-worker killed during the
  measurement shows its status, -9 for SIGKILL, and `stopped_by: "worker exit"`);
- `client_exit: 0` from every client agent;
- no worker agent that had already exited when the runner came to stop it.
Anything else is a host that died while the point was measured: the runner fails
the point with `problems()`, one "host: what died" each, and the sweep retries it or
records that reason; it is never done.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

from .layout import AGENT_LOG, AGENT_OUTCOME, PointDir, read_json

# The line the remote start wrapper appends to an agent's log when the agent exits on
# its own (orchestrator/remote.py). A clean stop signals the whole process group, the
# wrapper with it, so its absence says nothing; its presence gives the status.
_EXITED = re.compile(r"\[rainmaker\] exited with status (\d+)")


def _status(code: object) -> str:
    """An exit status as Python's subprocess reports it: -N is signal N."""
    if isinstance(code, int) and code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)


def agent_exit(pd: PointDir, role: str, host: str) -> str | None:
    """How the agent's own process exited, from the wrapper's line in its log, or None."""
    try:
        text = (pd.host_dir(role, host) / AGENT_LOG).read_text(errors="replace")
    except OSError:
        return None
    m = _EXITED.findall(text)
    if not m:
        return None
    rc = int(m[-1])
    return f"it exited with status {rc}" + (f", killed by {_signame(rc - 128)}" if rc > 128 else "")


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _worker(pd: PointDir, host: str, gone_before_stop: bool) -> str | None:
    outcome = read_json(pd.worker(host) / AGENT_OUTCOME)
    how = agent_exit(pd, "worker", host)
    if not isinstance(outcome, dict):
        return f"the worker agent died during the measurement (no {AGENT_OUTCOME}" + (f"; {how})" if how else ")")
    code = outcome.get("worker_exit")
    if code != 0:
        when = "when the runner stopped it" if outcome.get("stopped_by") == "signal" else "during the measurement"
        return f"rain-worker exited with status {_status(code)} {when}"
    if gone_before_stop:
        return "the worker agent had exited before the measurement ended" + (f" ({how})" if how else "")
    return None


def _client(pd: PointDir, host: str) -> str | None:
    outcome = read_json(pd.client(host) / AGENT_OUTCOME)
    if not isinstance(outcome, dict):
        how = agent_exit(pd, "client", host)
        return f"the client agent left no {AGENT_OUTCOME}" + (f" ({how})" if how else "")
    code = outcome.get("client_exit")
    if code != 0:
        return f"rain-client exited with status {_status(code)}"
    return None


def problems(
    pd: PointDir, workers: Iterable[str], clients: Iterable[str], gone_before_stop: Iterable[str] = ()
) -> list[str]:
    """What died during the point, "host: what" per host (empty: every agent ended
    cleanly). `gone_before_stop`: the worker hosts whose agent the runner's stop found
    already exited. Reads the files collected into the point's folder."""
    gone = set(gone_before_stop)
    out = []
    for h in workers:
        p = _worker(pd, h, h in gone)
        if p:
            out.append(f"{h}: {p}")
    for h in clients:
        p = _client(pd, h)
        if p:
            out.append(f"{h}: {p}")
    return out
