"""The worker agent's command line for rain-worker: the RDMA options from the agent
config's worker.rdma, and the roce role's facts file as the fallback for what the
inventory does not say (hosts/agent/worker.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hosts.agent.common import AgentError
from hosts.agent.worker import worker_argv

BASE = {
    "switch_mac": "02:00:00:00:00:fe",
    "switch_ip": "10.10.1.254",
    "src_ip": "10.10.1.2",
    "threads": 2,
    "worker_base": 0,
}


def argv(rdma: dict | None, tmp_path: Path) -> list[str]:
    cfg = {
        "binary": "/opt/rainmaker/bin/rain-worker",
        "out_dir": str(tmp_path),
        "eal": {"file_prefix": "w0", "devices": ["-a", "0000:3b:00.0"]},
        "worker": {**BASE, **({"rdma": rdma} if rdma is not None else {})},
    }
    return worker_argv(cfg, tmp_path)


def after_dashes(a: list[str]) -> list[str]:
    return a[a.index("--") + 1 :]


def opt(a: list[str], name: str) -> str | None:
    a = after_dashes(a)
    return a[a.index(name) + 1] if name in a else None


def test_no_rdma_config_leaves_the_workers_default(tmp_path):
    a = after_dashes(argv(None, tmp_path))
    assert "--rdma" not in a and "--qp-type" not in a


def test_emulated_passes_transport_and_qp_type_only(tmp_path):
    a = argv({"transport": "emulated", "qp_type": "uc", "mtu": 4096, "dscp": 26}, tmp_path)
    assert opt(a, "--rdma") == "emulated" and opt(a, "--qp-type") == "uc"
    # rain-worker refuses ibverbs options on the emulated path
    assert not {"--rdma-mtu", "--dscp", "--rdma-dev", "--gid-index"} & set(after_dashes(a))


def test_ibverbs_from_the_inventory(tmp_path):
    a = argv(
        {
            "transport": "ibverbs",
            "qp_type": "rc",
            "device": "mlx5_1",
            "gid_index": 3,
            "mtu": 2048,
            "dscp": 46,
            "roce_facts": str(tmp_path / "none.json"),
        },
        tmp_path,
    )
    assert [opt(a, o) for o in ("--rdma", "--qp-type", "--rdma-dev", "--gid-index", "--rdma-mtu", "--dscp")] == [
        "ibverbs",
        "rc",
        "mlx5_1",
        "3",
        "2048",
        "46",
    ]
    assert after_dashes(a)[-1] == "--start-disabled"


def test_ibverbs_falls_back_to_the_roce_facts_then_to_the_worker(tmp_path):
    facts = tmp_path / "roce.json"
    facts.write_text(
        json.dumps(
            {"transport": "ibverbs", "rdma_device": "mlx5_0", "netdev": "ens1f0np0", "gid_index": "5", "mtu": 4096}
        )
    )
    a = argv({"transport": "ibverbs", "qp_type": "uc", "gid_index": None, "roce_facts": str(facts)}, tmp_path)
    assert opt(a, "--rdma-dev") == "mlx5_0" and opt(a, "--gid-index") == "5"
    # the inventory wins over the facts
    a = argv({"transport": "ibverbs", "gid_index": 1, "device": "mlx5_3", "roce_facts": str(facts)}, tmp_path)
    assert opt(a, "--rdma-dev") == "mlx5_3" and opt(a, "--gid-index") == "1"
    # no facts file (the roce role has not run): rain-worker finds both itself
    a = argv({"transport": "ibverbs", "roce_facts": str(tmp_path / "missing.json")}, tmp_path)
    assert opt(a, "--rdma") == "ibverbs" and opt(a, "--rdma-dev") is None and opt(a, "--gid-index") is None


def test_icrc_check_is_passed_when_the_nic_checks(tmp_path):
    for transport in ("emulated", "ibverbs"):
        on = after_dashes(argv({"transport": transport, "icrc_check": True}, tmp_path))
        off = after_dashes(argv({"transport": transport, "icrc_check": False}, tmp_path))
        unset = after_dashes(argv({"transport": transport}, tmp_path))
        assert "--icrc-check" in on and "--icrc-check" not in off and "--icrc-check" not in unset


@pytest.mark.parametrize(
    "rdma, match",
    [
        ({"transport": "emulated", "icrc_check": "on"}, "icrc_check 'on': expected true or false"),
        ({"transport": "rxe"}, "transport 'rxe': expected emulated or ibverbs"),
        ({"transport": "ibverbs", "qp_type": "ud"}, "qp_type 'ud': expected uc or rc"),
        ({"transport": "ibverbs", "mtu": 9000}, "mtu 9000: expected 1024, 2048 or 4096"),
        ({"transport": "ibverbs", "gid_index": 300}, "gid_index 300: expected an integer in 0..255"),
    ],
)
def test_bad_rdma_config_is_refused(rdma, match, tmp_path):
    with pytest.raises(AgentError, match=match):
        argv(rdma, tmp_path)


def test_unreadable_facts_name_the_fix(tmp_path):
    facts = tmp_path / "roce.json"
    facts.write_text("{not json")
    with pytest.raises(AgentError, match="roce.json.*run `rainmaker provision` again"):
        argv({"transport": "ibverbs", "roce_facts": str(facts)}, tmp_path)


def test_a_ready_line_left_by_an_earlier_attempt_is_not_taken(tmp_path):
    """A retried point reuses its output folder: the old worker.log says "rain-worker
    ready", and the new rain-worker may die before it does."""
    import sys

    from hosts.agent.common import AgentError, Child

    log = tmp_path / "worker.log"
    log.write_text("EAL: ...\nrain-worker ready\n")
    child = Child([sys.executable, "-c", "import sys; print('EAL: cannot lock'); sys.exit(1)"], log)
    with pytest.raises(AgentError, match="exited with status 1 before 'rain-worker ready'"):
        child.wait_line("rain-worker ready", timeout=10)


def baseline_argv(tmp_path: Path, **worker) -> list[str]:
    cfg = {
        "binary": "/opt/rainmaker/bin/rain-worker",
        "out_dir": str(tmp_path),
        "eal": {"file_prefix": "w0"},
        "worker": {**BASE, **worker},
    }
    return after_dashes(worker_argv(cfg, tmp_path))


def test_baseline_options_are_passed(tmp_path):
    a = baseline_argv(tmp_path, mode="report", dispatcher=True)
    assert "--dispatcher" in a and "--fetch-timeout" not in a
    a = baseline_argv(tmp_path, mode="pull", fetch_timeout_ns=2_000_000)
    assert opt(["--", *a], "--fetch-timeout") == "2000000" and "--dispatcher" not in a
    a = baseline_argv(tmp_path, mode="report", dispatcher=False)  # the one-layer default
    assert "--dispatcher" not in a


@pytest.mark.parametrize(
    "worker, match",
    [
        ({"mode": "rain", "dispatcher": True}, "needs mode report or push"),
        ({"mode": "pull", "dispatcher": True}, "needs mode report or push"),
        ({"mode": "report", "dispatcher": "yes"}, "expected true or false"),
        ({"mode": "pull", "fetch_timeout_ns": 10}, "1000..60000000000"),
        ({"mode": "pull", "fetch_timeout_ns": 1.5}, "expected an integer"),
        ({"mode": "report", "fetch_timeout_ns": 1_000_000}, "is for modes pull"),
    ],
)
def test_bad_baseline_options_are_refused(worker, match, tmp_path):
    with pytest.raises(AgentError, match=match):
        baseline_argv(tmp_path, **worker)
