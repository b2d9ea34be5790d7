"""`rainmaker run SPEC --cluster ADDRESS [--testbed emulated[:N]]` and `--testbeds N`:
the options checked, the pool connected, the sweep handed to orchestrator/cluster."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..errors import UsageError, interrupted_status
from .app import console

TESTBED_KIND = re.compile(r"^emulated(?::(\d+))?$")


def testbeds_asked(kind: str | None) -> int | None:
    """`emulated` -> None (every worker that offers one); `emulated:N` -> N."""
    if kind is None:
        return None
    m = TESTBED_KIND.match(kind.strip())
    if not m:
        raise UsageError(
            f"--testbed {kind}: a cluster holds emulated testbeds only, given as emulated or emulated:N",
            fix="e.g. --testbed emulated:4 (four workers' testbeds); a hardware testbed runs without --cluster",
        )
    n = int(m.group(1)) if m.group(1) else None
    if n is not None and n < 1:
        raise UsageError(f"--testbed {kind}: N must be at least 1", fix="e.g. --testbed emulated:2")
    return n


def template_inventory(inv_path: str | None):
    """The inventory whose shape every testbed takes (-i, emulated only), or None."""
    if inv_path is None:
        return None
    from ..inventory import load

    inv = load(Path(inv_path))
    if not inv.is_emulated:
        raise UsageError(
            f"{inv_path} is a hardware testbed ({inv.switch.name}): hardware testbeds stay sequential, one "
            "switch and one sweep, so --cluster and --testbeds do not apply to them",
            fix=f"run it without --cluster/--testbeds: rainmaker run SPEC -i {inv_path}",
        )
    return inv


def run_on_cluster_cmd(
    spec: str,
    inv_path: str | None,
    *,
    resume: str | None,
    results: str,
    retries: int,
    retry_wait: float,
    analyze: bool,
    calibrate: bool,
    preflight: bool,
    cluster: str | None,
    testbed_kind: str | None,
    testbeds: int | None,
) -> None:
    from ..cluster.connect import Pool, need_distributed

    if cluster and testbeds:
        raise UsageError(
            "--cluster and --testbeds both given: the testbeds are a cluster's workers or this machine's",
            fix="--testbeds N for N testbeds here; --cluster ADDRESS --testbed emulated:N for a cluster's",
        )
    if testbed_kind and not cluster:
        raise UsageError(
            "--testbed names the testbeds of a cluster, and no --cluster was given",
            fix="add --cluster tcp://HOST:PORT, or use --testbeds N for testbeds on this machine",
        )
    at_most = testbeds_asked(testbed_kind) if cluster else testbeds
    inv = template_inventory(inv_path)
    need_distributed()  # a clear error before the modules that import it
    from ..cluster.coordinator import run_on_cluster

    pool = Pool.remote(cluster) if cluster else Pool.local(testbeds or 1)
    try:
        run_dir = run_on_cluster(
            spec,
            pool,
            at_most=at_most,
            inv=inv,
            resume=Path(resume) if resume else None,
            results_root=Path(results),
            retries=retries,
            retry_wait=retry_wait,
            console=console,
            progress=sys.stdout.isatty(),
            analyze_after=analyze,
            calibrate=calibrate,
            preflight=preflight,
        )
    except KeyboardInterrupt:
        sys.exit(interrupted_status())
    finally:
        pool.close()
    console.print(f"results: [bold]{run_dir}[/]")
