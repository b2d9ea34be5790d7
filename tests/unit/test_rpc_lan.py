"""A plain LAN (switch.kind: lan, CloudLab's xl170 nodes): the server-side systems run
over it with the hosts' own ARP, and the systems that schedule in the switch are refused
before anything starts."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml

from orchestrator.errors import UsageError
from orchestrator.experiment import agent_config
from orchestrator.experiment.machines import shape_of
from orchestrator.experiment.plan import plan
from orchestrator.experiment.run import systems_fit_network
from orchestrator.experiment.spec import load as load_spec
from orchestrator.inventory import load
from orchestrator.systems import get as get_system
from tests.unit.test_inventory import base, lan

ROOT = Path(__file__).resolve().parents[2]


def inventory(tmp_path: Path, data: dict):
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return load(p)


def test_rain_is_refused_on_a_plain_lan_naming_what_to_do(tmp_path):
    inv = inventory(tmp_path, lan())
    spec = load_spec(ROOT / "experiments/demo.yaml")
    with pytest.raises(UsageError) as e:
        systems_fit_network(spec, inv)
    assert "plain LAN" in str(e.value) and "rain" in str(e.value) and e.value.fix
    systems_fit_network(load_spec(ROOT / "experiments/rakaia-micro-100us.yaml"), inv)  # server-side: fine


def test_rpc_hosts_find_each_other_by_arp_on_a_lan_and_through_the_switch_otherwise(tmp_path):
    spec = load_spec(ROOT / "experiments/rakaia-micro-100us.yaml")
    for data, gateway in ((lan(), None), (base(), "02:52:4d:ff:ff:fe")):
        inv = inventory(
            tmp_path, {**data, "hosts": [{**h, "nic": {**h["nic"], "netdev": "eno1"}} for h in data["hosts"]]}
        )
        p = plan(spec, shape_of(inv))[0]
        cfg = agent_config.rpc_server(inv, spec, p, get_system(p.system), "worker0", PurePosixPath("/tmp/x"))
        assert cfg["net"] == {"iface": "eno1", "ip": "10.10.1.2", "peers": ["10.10.1.1"], "gateway_mac": gateway}
