"""The Dask cluster a run's testbeds come from: a scheduler someone started
(`--cluster tcp://HOST:PORT`), or N worker processes on this machine, each a testbed on
its own cores (`--testbeds N`, a LocalCluster).

A worker offers a testbed by its Dask resource `testbed` (`dask worker ADDRESS
--nthreads 1 --resources testbed=1`, as root on a machine with rainmaker installed and
set up: `make setup`): only such workers are given points, one at a time each.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager

from ..errors import UsageError
from ..testbed.cpu import online_cpus

RESOURCE = "testbed"  # the Dask worker resource of a machine that offers one: `--resources testbed=1`

WORKER_FIX = (
    "start each testbed's worker as root on a machine with rainmaker set up: "
    "`dask worker ADDRESS --nthreads 1 --resources testbed=1` (docs/cluster.md)"
)


def need_distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError(
            "--cluster and --testbeds need Dask's distributed scheduler, which is not installed",
            fix="pip install 'rainmaker[cluster]' (or: pip install 'dask[distributed]>=2024')",
        ) from None
    return distributed


def split_cores(n: int, cpus: list[int] | None = None) -> list[list[int]]:
    """This machine's cores in n sets of equal size (contiguous, the rest unused)."""
    cpus = sorted(cpus if cpus is not None else online_cpus())
    each = len(cpus) // n
    if each < 1:
        raise UsageError(
            f"--testbeds {n}: this machine has {len(cpus)} core(s), fewer than one per testbed",
            fix=f"run at most {len(cpus)} testbed(s) here, or spread them over machines with --cluster",
        )
    return [cpus[i * each : (i + 1) * each] for i in range(n)]


@contextmanager
def _ctrl_c_for_the_coordinator():
    """SIGINT ignored while the workers start, so that they ignore it too (an ignored
    signal stays ignored across exec, and Python then installs no KeyboardInterrupt):
    Ctrl-C in the terminal reaches the whole process group, and a worker it killed
    mid-point would leave its testbed to the coordinator, which stops them in order."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class Pool:
    """A connected Dask client, the workers that offer a testbed and, for `--testbeds`,
    the LocalCluster this process started (closed with the pool)."""

    def __init__(self, client, where: str, cluster=None):
        self.client, self.where, self.cluster = client, where, cluster
        self.cpus: dict[str, list[int]] = {}
        self.option = "--cluster ADDRESS"  # how `rainmaker run` asks for this pool again

    @classmethod
    def remote(cls, address: str) -> Pool:
        need_distributed()
        from ..simulate.runner import _probe

        _probe(address)  # a clear error at once where nothing listens
        from distributed import Client

        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise UsageError(
                f"--cluster {address}: no Dask scheduler answers there ({e})",
                fix="give the scheduler's address as `dask scheduler` prints it, e.g. tcp://10.0.0.1:8786",
            ) from None
        pool = cls(client, f"Dask cluster {address}")
        pool.option = f"--cluster {address}"
        return pool

    @classmethod
    def local(cls, n: int, *, confine: bool = True, cpus: list[int] | None = None) -> Pool:
        """n worker processes on this machine, each a testbed; with `confine`, each on
        its own set of this machine's cores (split_cores)."""
        need_distributed()
        from distributed import Client, LocalCluster

        sets = split_cores(n, cpus) if confine else [[] for _ in range(n)]
        with _ctrl_c_for_the_coordinator():
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                resources={RESOURCE: 1},
                host="127.0.0.1",  # the scheduler and workers answer this machine only
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        client = Client(cluster)
        pool = cls(client, f"{n} testbed(s) on this machine (a Dask LocalCluster)", cluster)
        pool.cpus = dict(zip(sorted(pool.workers()), sets, strict=True))
        pool.option = f"--testbeds {n}"
        return pool

    def workers(self) -> dict[str, dict]:
        """Every worker the scheduler knows now: address -> its info."""
        return dict(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def testbed_workers(self, at_most: int | None = None) -> list[str]:
        """The workers that offer a testbed (the resource), at most `at_most` of them."""
        every = self.workers()
        offer = sorted(a for a, w in every.items() if (w.get("resources") or {}).get(RESOURCE, 0) >= 1)
        if not offer:
            raise UsageError(
                f"{self.where}: none of its {len(every)} worker(s) offers a testbed (the Dask resource `{RESOURCE}`)",
                fix=WORKER_FIX,
            )
        if at_most is not None and len(offer) < at_most:
            raise UsageError(
                f"{self.where}: {len(offer)} worker(s) offer a testbed, fewer than the {at_most} asked for",
                fix=f"start more workers ({WORKER_FIX}), or ask for emulated:{len(offer)}",
            )
        return offer[:at_most] if at_most is not None else offer

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()
