"""Shared test set-up.

Integration tests (marked `integration`) build emulated testbeds: they need root and
run only then. They use their own state folder and the highest slots (7-15 under `make
test`), so a testbed a person has up (slot 0, then the lowest free) is never touched.

`make test` runs the suite in three processes (pytest-xdist, `-n 3 --dist loadfile`):
each process gets its own three slots (7-9, 10-12, 13-15) and so its own testbed, and a
test file runs whole in one process (its tests share fixtures and namespace names). Every
provisioning test is in tests/integration/test_provision_hosts.py, so one process
converges its testbed from scratch, once (`provisioned`). (`--dist loadgroup` would
keep several files together, but xdist 3.8 cannot regroup tests under pytest 9: it
rewrites a node id attribute pytest 9 no longer has.) The files start longest first
(LONGEST_FIRST); `--no-loadscope-reorder` keeps xdist (3.7 and later) from putting the
files with the most tests first instead.

A test marked `alone` measures timing on its testbed (an adaptation racing a load, the
CPU an idle testbed uses): the other processes would starve its testbed of this
machine's two cores. `make test` runs them afterwards in one process, on a quiet
machine (tests/quiet_machine.py); under a plain `pytest -n 3`, one runs while the
other processes wait between tests (a readers-writer lock on two files, shared by the
processes of one run).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest

import switch  # noqa: F401 - before any test imports grpc: it keeps gRPC's fork handlers off

REPO = Path(__file__).resolve().parent.parent
SLOT = 9  # the first test slot; RAINMAKER_TEST_SLOT moves it
SLOTS_PER_PROCESS = 3  # the shared testbed, and two spares (test_testbed.py, test_two_testbeds.py)

# The test files that take longest, longest first (`make test` prints every file's
# time): they start first, so that no process is left with one of them at the end
# while the others are idle (longest processing time first). The rest keep their order.
LONGEST_FIRST = (
    "tests/integration/test_provision_hosts.py",
    "tests/integration/test_tofino_sde.py",
    "tests/integration/test_points_back_to_back.py",
    "tests/switch/test_p4_compile.py",
    "tests/integration/test_serve_browser.py",
    "tests/integration/test_sweep.py",
    "tests/integration/test_bastion.py",
    "tests/unit/test_ansible_lint.py",
    "tests/unit/test_sim_rpc.py",
    "tests/integration/test_client.py",
    "tests/integration/test_remote_local_sshd.py",
    "tests/unit/test_preflight.py",
    "tests/integration/test_sweep_faults.py",
    "tests/integration/test_worker_ibverbs.py",
    "tests/integration/test_point_faults.py",
    "tests/unit/test_sim_run.py",
)


def pytest_configure(config):
    # An xdist worker (gw0, gw1, ...) moves to its own slots before any test module reads them.
    # The processes' slots end at 15, the last (SLOT, 9, alone; 10-15 for two processes,
    # 7-15 for three), away from the low slots a person's testbeds take first.
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is not None:
        count = int(config.workerinput.get("workercount", 1))
        base = int(os.environ.get("RAINMAKER_TEST_SLOT", str(min(SLOT, 16 - SLOTS_PER_PROCESS * count))))
        os.environ["RAINMAKER_TEST_SLOT"] = str(base + SLOTS_PER_PROCESS * int(worker.removeprefix("gw")))


def _locked(stack: ExitStack, path: Path, how: int) -> None:
    f = stack.enter_context(open(path, "a"))
    fcntl.flock(f, how)
    stack.callback(fcntl.flock, f, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _share_the_machine(request):
    """An `alone` test holds the machine; any other test waits for it (see the module's doc)."""
    run_id = getattr(request.config, "workerinput", {}).get("testrunuid")
    if run_id is None:  # one process: nothing to share with
        yield
        return
    base = Path(tempfile.gettempdir()) / f"rainmaker-tests-{run_id}"
    turnstile, room = base.with_suffix(".turnstile"), base.with_suffix(".room")
    with ExitStack() as stack:
        if request.node.get_closest_marker("alone"):
            _locked(stack, turnstile, fcntl.LOCK_EX)  # held: the other process's next test waits
            _locked(stack, room, fcntl.LOCK_EX)  # until its current test ends
        else:
            with ExitStack() as gate:
                _locked(gate, turnstile, fcntl.LOCK_EX)  # passes unless an alone test waits or runs
            _locked(stack, room, fcntl.LOCK_SH)
        yield


def pytest_addoption(parser):
    parser.addoption(
        "--file-durations",
        type=int,
        default=0,
        metavar="N",
        help="after the run, the N test files that took longest, each file's total of its tests' set-up, "
        "call and tear-down (0: none; make test shows them all)",
    )


_file_s: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # In the xdist controller too: it replays every worker's reports.
    if report.when in ("setup", "call", "teardown"):
        f = report.nodeid.split("::")[0]
        _file_s[f] = _file_s.get(f, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.getoption("file_durations")
    if not n or not _file_s:
        return
    rows = sorted(_file_s.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"time per test file ({len(rows)} files, {sum(_file_s.values()):.0f} s in all)")
    for f, s in rows[:n]:
        terminalreporter.write_line(f"{s:8.1f}s {f}")
    if len(rows) > n:
        terminalreporter.write_line(f"{sum(s for _, s in rows[n:]):8.1f}s the other {len(rows) - n} files")


def pytest_collection_modifyitems(config, items):
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
    if os.geteuid() == 0 and Path("/usr/sbin/sshd").exists():
        return
    skip = pytest.mark.skip(reason="integration tests need root and openssh-server (run `make test` as root)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def state_root():
    """A private state folder (root-owned, outside /tmp: sshd's StrictModes refuses /tmp)."""
    d = Path(f"/var/lib/rainmaker-test/{os.getpid()}")
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d.parent, 0o755)
    os.chmod(d, 0o755)
    old = os.environ.get("RAINMAKER_STATE_DIR")
    os.environ["RAINMAKER_STATE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("RAINMAKER_STATE_DIR", None)
    else:
        os.environ["RAINMAKER_STATE_DIR"] = old
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def testbed(state_root):
    """One emulated testbed (1 client, 2 workers) shared by the integration tests."""
    from orchestrator.inventory import load
    from orchestrator.testbed.emulated import EmulatedTestbed

    # RAINMAKER_TEST_SLOT: another slot, so that two test runs can share a machine.
    tb = EmulatedTestbed(slot=int(os.environ.get("RAINMAKER_TEST_SLOT", str(SLOT))))
    tb.down(log=lambda m: None)  # leftovers of an interrupted earlier run
    path = tb.up(clients=1, workers=2, log=lambda m: None)
    try:
        yield tb, load(path)
    finally:
        tb.down(log=lambda m: None)


@pytest.fixture(scope="session")
def provisioned(testbed):
    """The shared testbed converged once with the whole site playbook, and that first
    run's report. Tests that need a provisioned testbed share this run instead of each
    converging from scratch (each Ansible run costs seconds per host); a test that
    breaks something puts it back before it ends."""
    from orchestrator.provision import provision

    tb, inv = testbed
    return tb, inv, provision(inv, progress=False)
