"""The preflight: what an experiment needs of each machine, checked before it runs.

    report = preflight(inv, spec)         # one SSH command per machine, in parallel
    report.blocking                       # the needed checks that failed
    report.write(run_dir / layout.PREFLIGHT)  # preflight.json

`rainmaker preflight` prints the table (and -o writes the JSON); `rainmaker run` runs
it before the sweep unless --no-preflight, writes preflight.json into the run folder,
and does not start when a needed check fails (PreflightFailed lists them).

    probe.py    the machine side (standard library; sent, not deployed): reads the
                kernel, huge pages, clock, timestamps, the SDE, and runs the roles'
                inspection scripts (dpdk_host's inspect_host.py, roce's inspect_roce.py)
    collect.py  sends it to every machine at once and reads the answers
    needs.py    what a spec's systems need (DPDK, KCM, RDMA)
    checks.py   the answers judged against the inventory and the needs: Checks
    report.py   Check, Report (preflight.json), PreflightFailed
docs/preflight.md lists every check, what it reads and its fix.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..inventory import Inventory
from .checks import host_checks, switch_checks, unreachable
from .collect import collect as probe_machines
from .needs import Needs, needs_of
from .report import FAIL, NA, OK, WARN, Check, PreflightFailed, Report


def judge(inv: Inventory, needs: Needs, answers: dict[str, dict | str], liveness: tuple | None) -> list[Check]:
    """Every machine's checks, switch first, from the probes' answers (pure)."""
    checks: list[Check] = []
    sw = inv.switch
    if sw.programmable:
        a = answers.get(sw.name, "not probed")
        checks += [unreachable(sw.name, "switch", a)] if isinstance(a, str) else switch_checks(inv, a, liveness)
    for h in inv.hosts:
        a = answers.get(h.name, "not probed")
        checks += [unreachable(h.name, h.role, a)] if isinstance(a, str) else host_checks(inv, h, a, needs)
    # Only what the run needs can fail: anything else found missing is a warning.
    return [
        replace(c, status=WARN, detail=c.detail + " (not needed by this run)")
        if c.status == FAIL and not c.needed
        else c
        for c in checks
    ]


def preflight(inv: Inventory, spec=None, *, needs: Needs | None = None) -> Report:
    """Probe every machine of `inv` and judge it for `spec` (an experiment Spec; None:
    the main job's needs), or for `needs` when given (a run that is no sweep)."""
    t0 = time.monotonic()
    needs = needs or needs_of(spec)
    answers, liveness = probe_machines(inv)
    report = Report(inventory=inv.name, needs=needs.as_dict(), checks=judge(inv, needs, answers, liveness))
    report.probes = {n: a for n, a in answers.items()}
    report.seconds = time.monotonic() - t0
    return report


__all__ = [
    "FAIL",
    "NA",
    "OK",
    "WARN",
    "Check",
    "Needs",
    "PreflightFailed",
    "Report",
    "judge",
    "needs_of",
    "preflight",
]
