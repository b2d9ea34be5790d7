"""Export an inventory to Ansible's YAML inventory format (for provisioning).

Groups: `switch`, `clients`, `workers` (and `hosts` = clients + workers). Host keys
are pinned: ssh is told to use the testbed's known_hosts and to refuse unknown keys.
Behind a gateway (ssh.jump) every connection goes through a ProxyCommand that pins the
gateway's key the same way: `ssh -J` would not, since it passes no -o option to the
jump hop (that ssh would read ~/.ssh/config and ask about an unknown key).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from .model import Host, Inventory, Mgmt


def _conn(inv: Inventory, mgmt: Mgmt) -> dict[str, Any]:
    v: dict[str, Any] = {"ansible_host": mgmt.address, "ansible_port": mgmt.port, "ansible_user": mgmt.user}
    key = inv.key_for(mgmt)
    if key is not None:
        v["ansible_ssh_private_key_file"] = str(key)
    return v


def _host_vars(inv: Inventory, h: Host) -> dict[str, Any]:
    v = _conn(inv, h.mgmt)
    v.update(
        {
            "rainmaker_role": h.role,
            "rainmaker_deploy_root": str(h.deploy_root),
            "rainmaker_numa_node": h.numa_node,
            "rainmaker_cores": list(h.cores),
            "rainmaker_hugepages_size_kb": h.hugepages.size_kb,
            "rainmaker_hugepages_count": h.hugepages.count,
            "rainmaker_nic": h.nic.model_dump(),
            "rainmaker_nic_kind": "pci" if h.nic.pci else "vdev",
            "rainmaker_rdma": h.nic.rdma_transport,
            # This host is a namespace of the machine running rainmaker (no hardware of its own).
            "rainmaker_host_emulated": h.netns is not None,
        }
    )
    return v


def _ssh_path(p: Path) -> str:
    """A file path as an ssh -o option's value: ssh splits UserKnownHostsFile at spaces
    unless the value is in double quotes (which a path then cannot hold)."""
    text = str(p)
    if '"' in text or "\n" in text:
        raise UsageError(f"the path {text!r} cannot be given to ssh", fix="use a path without '\"' or line breaks")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def proxy_command(inv: Inventory) -> str | None:
    """The ProxyCommand that reaches a machine through the inventory's gateway, pinning
    the gateway's host key (and no config file, agent or other key), or None without
    one. It is run by /bin/sh with %h and %p replaced, so each word is shell-quoted and
    a literal % doubled."""
    j = inv.ssh.jump
    if j is None:
        return None
    argv = ["ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
    argv += ["-o", "IdentitiesOnly=yes", "-o", "GlobalKnownHostsFile=/dev/null"]
    if inv.jump_known_hosts is not None:
        argv += ["-o", "UserKnownHostsFile=" + _ssh_path(inv.jump_known_hosts)]
    if inv.jump_key is not None:
        argv += ["-i", str(inv.jump_key)]
    argv += ["-p", str(j.port), "-l", j.user, "-W", "%h:%p", "--", j.address]
    words = [shlex.quote(a) if a == "%h:%p" else shlex.quote(a.replace("%", "%%")) for a in argv]
    return " ".join(words)


def ssh_common_args(inv: Inventory) -> str:
    """ansible_ssh_common_args: host keys pinned, one key, no prompts; and the gateway's
    ProxyCommand. Ansible splits it with shlex, so each option is one shell word."""
    common = ["-o StrictHostKeyChecking=yes", "-o IdentitiesOnly=yes", "-o BatchMode=yes"]
    if inv.ssh.known_hosts is not None:
        common.append("-o " + shlex.quote("UserKnownHostsFile=" + _ssh_path(inv.ssh.known_hosts)))
        common.append("-o GlobalKnownHostsFile=/dev/null")
    proxy = proxy_command(inv)
    if proxy is not None:
        common.append("-o " + shlex.quote("ProxyCommand=" + proxy))
    return " ".join(common)


def export(inv: Inventory) -> dict[str, Any]:
    sw = inv.switch
    sw_vars = _conn(inv, sw.mgmt) if sw.mgmt is not None else {}
    sw_vars.update(
        {
            "rainmaker_switch_kind": sw.kind,
            "rainmaker_switch_target": sw.target,
            "rainmaker_switch_chip": sw.chip,
            "rainmaker_switch_kernel_module": sw.kernel_module,
            "rainmaker_deploy_root": str(sw.deploy_root),
            "rainmaker_bfrt": sw.bfrt,
            "rainmaker_program": sw.program,
            "rainmaker_ports": [p.model_dump() for p in sw.ports],
            "rainmaker_hugepages_size_kb": sw.hugepages.size_kb,
            "rainmaker_hugepages_count": sw.hugepages.count,
            "rainmaker_host_emulated": sw.netns is not None,
        }
    )
    if sw.sde is not None:
        sw_vars["rainmaker_sde"] = str(sw.sde)
        sw_vars["rainmaker_sde_install"] = str(sw.sde_install_path)
    if sw.sde_version is not None:
        sw_vars["rainmaker_sde_version"] = sw.sde_version
    return {
        "all": {
            "vars": {
                "ansible_ssh_common_args": ssh_common_args(inv),
                "ansible_python_interpreter": "/usr/bin/python3",
                "rainmaker_testbed": inv.name,
                "rainmaker_emulated": inv.is_emulated,
                # lan: a plain network, no switch to provision and no RoCE to set up
                "rainmaker_switch_kind": sw.kind,
                # Emulated hosts share one file system and one kernel: system-wide
                # changes (packages, hugepages) must not race between them.
                "rainmaker_shared_system": inv.shared_system,
                # Where the hosts send tasks and tokens (and the source of the switch's
                # RoCEv2 WRITEs): the roce role pins its neighbour entry.
                "rainmaker_service_ip": sw.service_ip,
                "rainmaker_service_mac": sw.service_mac,
                "rainmaker_roce": inv.roce.model_dump(),
                "rainmaker_dpdk": inv.dpdk.model_dump(mode="json"),
                "rainmaker_deploy_build": inv.deploy.build,
            },
            "children": {
                "switch": {"hosts": {sw.name: sw_vars} if sw.programmable else {}},
                "hosts": {
                    "children": {
                        "clients": {"hosts": {h.name: _host_vars(inv, h) for h in inv.clients}},
                        "workers": {"hosts": {h.name: _host_vars(inv, h) for h in inv.workers}},
                    }
                },
            },
        }
    }


def export_yaml(inv: Inventory) -> str:
    return yaml.safe_dump(export(inv), sort_keys=False)
