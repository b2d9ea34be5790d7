"""An inventory that claims real hardware, pointed at the emulated testbed's machines.

The emulated testbed's sshds stand in for a Tofino switch's management CPU and for
servers with ConnectX NICs: the inventory written here names a `tofino` switch with an
SDE, PCI NICs with RDMA, and no `netns`, so every role takes its hardware path and must
find (and report) that the hardware is not there. Used by the provisioning tests of the
hardware roles (tofino_sde, dpdk_host, roce, rainmaker_deploy).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.inventory import Inventory, load

# PCI addresses that do not exist on this machine (bus 0xfe is not populated here).
FAKE_PCI = "0000:fe:00.{}"
FAKE_SDE = "/opt/rainmaker-test-no-sde/bf-sde-9.13.0"


def as_hardware(inv: Inventory, out: Path, *, sde: str = FAKE_SDE, target: str = "asic") -> Inventory:
    """Write `out`: `inv` (an emulated testbed's inventory) as a Tofino + ConnectX testbed."""
    data = inv.model_dump(mode="json", exclude_none=True)
    data.pop("emulation", None)
    data["name"] = f"{inv.name}-as-hw"
    sw = data["switch"]
    sw.update({"kind": "tofino", "sde": sde, "sde_version": "9.13.0", "target": target})
    sw.pop("netns", None)
    if target == "asic":
        for p in sw["ports"]:
            p.pop("iface", None)
            p["fec"] = "rs"
    for i, h in enumerate(data["hosts"]):
        h.pop("netns", None)
        nic = h["nic"]
        nic.pop("vdev", None)
        nic["pci"] = FAKE_PCI.format(i % 8)
        if h["role"] == "worker":
            nic["rdma"] = "ibverbs"
    out.write_text(
        "# tests/integration/hardware_view.py: real-hardware claims, emulated machines\n"
        + yaml.safe_dump(data, sort_keys=False)
    )
    return load(out)
