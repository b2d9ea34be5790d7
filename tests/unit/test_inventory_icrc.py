"""roce.icrc_check: whether the workers' NICs check the RoCEv2 iCRC, which the switch's
WRITEs leave zero. A ConnectX checks unless turned off; a testbed whose NICs check is
named as a warning with its fix, and a contradiction is refused."""

from __future__ import annotations

import pytest

from orchestrator.errors import InventoryError
from orchestrator.inventory import load, warnings
from orchestrator.inventory.model import Roce

from .test_inventory import base, write


def icrc_warnings(inv, tmp_path) -> list[str]:
    return [f"{w.message} | fix: {w.fix}" for w in warnings(inv, tmp_path) if w.path == "roce.icrc_check"]


@pytest.mark.parametrize(
    "roce, transport, checks",
    [
        ({}, "ibverbs", True),  # a ConnectX's default
        ({"icrc_disable_command": "disable-icrc mlx5_0"}, "ibverbs", False),  # the role turns it off
        ({"icrc_check": "off"}, "ibverbs", False),  # turned off by hand
        ({"icrc_check": "on"}, "ibverbs", True),
        ({}, "emulated", False),  # rain-worker's RX loop checks only when told
        ({"icrc_check": "on"}, "emulated", True),
        ({"icrc_check": "off", "icrc_disable_command": "x"}, "ibverbs", False),
    ],
)
def test_who_checks(roce, transport, checks):
    assert Roce(**roce).nic_checks_icrc(transport) is checks


def test_connectx_workers_that_check_are_named_with_the_fix(tmp_path):
    inv = load(write(tmp_path, base()))  # PCI NICs: ibverbs workers, no roce section
    (w,) = icrc_warnings(inv, tmp_path)
    assert "the NICs of worker0, worker1 check the RoCEv2 iCRC" in w
    assert "roce.icrc_disable_command is not given" in w and "zero iCRC" in w
    assert "give roce.icrc_disable_command" in w and "set roce.icrc_check: off" in w

    on = load(write(tmp_path, {**base(), "roce": {"icrc_check": "on"}}))
    assert "(roce.icrc_check is on)" in icrc_warnings(on, tmp_path)[0]

    for roce in ({"icrc_disable_command": "/opt/disable-icrc mlx5_0"}, {"icrc_check": "off"}):
        assert icrc_warnings(load(write(tmp_path, {**base(), "roce": roce})), tmp_path) == []


def test_emulated_workers_check_only_when_told(tmp_path):
    d = base()
    del d["switch"]["sde"]
    d["switch"]["kind"] = "emulated"
    for i, p in enumerate(d["switch"]["ports"]):
        p["iface"] = f"veth{i}"
    for h in d["hosts"]:
        del h["nic"]["pci"]
        h["nic"]["vdev"] = "net_af_packet0,iface=data0"
    inv = load(write(tmp_path, d))
    assert all(not inv.roce.nic_checks_icrc(h.nic.rdma_transport) for h in inv.workers)
    assert icrc_warnings(inv, tmp_path) == []
    on = load(write(tmp_path, {**d, "roce": {"icrc_check": "on"}}))
    assert (
        "the NICs of worker0, worker1 check the RoCEv2 iCRC (roce.icrc_check is on)" in icrc_warnings(on, tmp_path)[0]
    )


def test_on_with_the_disable_command_is_refused(tmp_path):
    with pytest.raises(InventoryError) as e:
        load(write(tmp_path, {**base(), "roce": {"icrc_check": "on", "icrc_disable_command": "disable-icrc"}}))
    text = str(e.value)
    assert "roce" in text and "icrc_check is on, but roce.icrc_disable_command turns" in text
    assert "remove icrc_check" in text


def test_a_typo_in_the_value_is_refused(tmp_path):
    with pytest.raises(InventoryError) as e:
        load(write(tmp_path, {**base(), "roce": {"icrc_check": "disabled"}}))
    assert "roce.icrc_check" in str(e.value)
