"""The emulated testbed: a switch and hosts as network namespaces on this machine.

Layout for slot S (several slots can coexist; tests use their own):

    root namespace                     switch namespace rmS-sw0
      bridge rmSbr 10.79.S.254/24        mgmt0 10.79.S.250 (sshd; BFRuntime later)
        rmSm-0 ... rmSm-N (mgmt veths)   swp1 .. swpN (data ports, no IP)
      blackhole 10.64.0.0/10                 |
                                         host namespaces rmS-client0, rmS-worker0, ...
                                           mgmt0 10.79.S.i (sshd), data0 (no kernel IP)

Every machine runs its own sshd (own host keys, own hostname through a UTS namespace),
reached from the root namespace over the management bridge with a key the testbed
generates; host keys are pinned in the testbed's known_hosts. Data interfaces carry
no kernel IP (the kernel would answer DPDK's UDP with ICMP port-unreachable).
The blackhole route keeps stray testbed packets on this machine once the bridge is gone.

With a bastion (`up(bastion=True)`, `rainmaker testbed up --bastion`) the testbed is a
lab behind a gateway: the root namespace loses its address on the bridge, so it has no
route to the machines (the blackhole takes 10.79.S.0/24), and a namespace rmS-bastion
with its own sshd sits on the bridge (10.79.S.253) and on a link of its own to the root
namespace (10.81.S.1, the root end 10.81.S.254), forwarding no packets. Only SSH
through it reaches the machines; the inventory says so (ssh.jump, with the bastion's
key pinned in a known_hosts of its own) and tunnels BFRuntime over SSH to the switch
(switch.bfrt_via_ssh). Probes of the machines' sshd then run inside the bastion.

With cpus (`up(cpus=[2, 3])`, `rainmaker testbed up --cpus 2-3`) the testbed is confined
to those cores: every sshd (the bastion's too) starts under `taskset -c`, so everything
started over SSH inherits that affinity, and the inventory says so (emulation.cpus).
A testbed up on other cores stays as it is: `up` with other cpus is an error.

About 850 lines in one module: building a testbed is one ordered sequence of
namespace, link and sshd steps, and taking it down must undo exactly those, so both
directions live together.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ..errors import TestbedError
from . import state
from .cpu import format_cpus, online_cpus

BLACKHOLE = "10.64.0.0/10"
SSHD = "/usr/sbin/sshd"
SWITCH_NAME = "sw0"
DATA_IFACE = "data0"
MGMT_IFACE = "mgmt0"
MAX_HOSTS = 15
BASTION = "bastion"  # its namespace rmS-bastion, its state folder machines/bastion
_BANNERS = (  # run inside a namespace: print each address whose sshd greets
    "import socket, sys\n"
    "for a in sys.argv[1:]:\n"
    "    try:\n"
    "        with socket.create_connection((a, 22), timeout=0.5) as s:\n"
    "            s.settimeout(0.5)\n"
    "            if s.recv(64).startswith(b'SSH-2.0-'): print(a)\n"
    "    except OSError: pass\n"
)


@dataclass(frozen=True)
class Machine:
    name: str
    role: str  # switch | client | worker
    index: int  # 0 for the switch, 1.. for hosts (port number and address)

    def netns(self, slot: int) -> str:
        return f"rm{slot}-{self.name}"


@dataclass(frozen=True)
class Plan:
    """Names and addresses of one emulated testbed; pure, so `down` can recompute it."""

    slot: int
    clients: int
    workers: int
    bastion: bool = False  # the machines reachable only through a bastion namespace
    cpus: tuple[int, ...] = ()  # the cores every process of it may run on; (): every core

    @property
    def prefix(self) -> str:
        return f"rm{self.slot}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def mgmt_net(self) -> str:
        return f"10.79.{self.slot}"

    @property
    def data_net(self) -> str:
        return f"10.80.{self.slot}"

    @property
    def hosts(self) -> list[Machine]:
        out = [Machine(f"client{i}", "client", 1 + i) for i in range(self.clients)]
        out += [Machine(f"worker{i}", "worker", 1 + self.clients + i) for i in range(self.workers)]
        return out

    @property
    def switch(self) -> Machine:
        return Machine(SWITCH_NAME, "switch", 0)

    @property
    def machines(self) -> list[Machine]:
        return [self.switch, *self.hosts]

    @property
    def bastion_netns(self) -> str:
        return f"{self.prefix}-{BASTION}"

    @property
    def bastion_ip(self) -> str:
        """The bastion's address on its link to the root namespace (its sshd's)."""
        return f"10.81.{self.slot}.1"

    @property
    def bastion_mgmt_ip(self) -> str:
        return f"{self.mgmt_net}.253"

    def mgmt_ip(self, m: Machine) -> str:
        return f"{self.mgmt_net}.{250 if m.role == 'switch' else m.index}"

    def mgmt_veth(self, m: Machine) -> str:
        return f"{self.prefix}m-{m.index}"

    def data_ip(self, m: Machine) -> str:
        return f"{self.data_net}.{m.index}"

    def mac(self, m: Machine) -> str:
        # 02: locally administered, unicast; 52:4d = "RM".
        return f"02:52:4d:{self.slot:02x}:00:{m.index:02x}"

    @staticmethod
    def switch_port(m: Machine) -> str:
        return f"{m.index}/0"

    @staticmethod
    def switch_iface(m: Machine) -> str:
        return f"swp{m.index}"

    @staticmethod
    def dev_port(m: Machine) -> int:
        # The Wedge100BF-32X numbering of ports 1/0..8/0 (132, 140, ...): pipe 1.
        return 132 + 8 * (m.index - 1)


# -- small command helpers ----------------------------------------------------------


def _run(
    argv: list[str], *, check: bool = True, timeout: float = 30, input: str | None = None
) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError:
        raise TestbedError(
            f"`{argv[0]}` is not installed", fix="run `make setup` (it installs iproute2, openssh-server, ethtool)"
        ) from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{' '.join(argv)}` did not finish in {timeout:.0f} s") from None
    if check and r.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed (status {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def _ns(ns: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
    return _run(["ip", "netns", "exec", ns, *argv], **kw)


def _netns_list() -> list[str]:
    r = _run(["ip", "-j", "netns", "list"], check=False)
    try:
        return [n["name"] for n in json.loads(r.stdout or "[]")]
    except json.JSONDecodeError:
        return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _links() -> list[str]:
    r = _run(["ip", "-j", "link", "show"], check=False)
    return [link["ifname"] for link in json.loads(r.stdout or "[]")]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_pids(pids: list[int], grace: float = 3.0) -> None:
    """TERM, wait up to `grace`, then KILL whatever is left."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if _pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ssh_banner(addr: str, port: int = 22, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False


def _banners(addrs: list[str], netns: str | None, cpus: tuple[int, ...] = ()) -> set[str]:
    """The addresses whose sshd greets, seen from this namespace or from `netns` (the
    bastion's: the only one that reaches the machines behind it; the probe runs there
    on the testbed's `cpus`, as everything in its namespaces does)."""
    if netns is None:
        return {a for a in addrs if _ssh_banner(a)}
    import sys

    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", _BANNERS, *addrs]
    r = _run(_confined(argv, cpus), check=False, timeout=30)
    return set(r.stdout.split()) & set(addrs)


def _confined(argv: list[str], cpus: tuple[int, ...]) -> list[str]:
    """argv run on `cpus` only (taskset -c), and so everything it starts; () as it is."""
    return ["taskset", "-c", format_cpus(cpus), *argv] if cpus else argv


def _check_cpus(cpus: list[int] | None) -> tuple[int, ...]:
    """The cores a testbed is to be confined to, in order, once this machine is known to
    have them online; () for none (every core)."""
    from ..inventory.model import CPUS_MAX

    if not cpus:
        return ()
    online = online_cpus()
    wrong = [c for c in cpus if not 0 <= c < CPUS_MAX]
    twice = sorted({c for c in cpus if list(cpus).count(c) > 1})
    missing = sorted(set(cpus) - set(online) - set(wrong))
    if wrong or twice:
        what = f"{wrong[0]} is not a CPU number" if wrong else f"CPU {twice[0]} is named twice"
        raise TestbedError(f"cpus {list(cpus)}: {what}", fix=f"give each core once, of {format_cpus(online)}")
    if missing:
        raise TestbedError(
            f"this machine has no CPU {format_cpus(missing)} online (its online CPUs: {format_cpus(online)})",
            fix=f"give cores it has, e.g. --cpus {format_cpus(online[-max(1, len(online) // 2) :])} "
            "(see /sys/devices/system/cpu/online)",
        )
    return tuple(sorted(cpus))


# -- the testbed ---------------------------------------------------------------------


class SlotTaken(TestbedError):
    """The slot is held by a testbed this state folder has no plan for: leftovers, or
    another testbed that claimed it after up_in_free_slot found it free (two stations of
    a cluster run bring theirs up at once), which then moves on to the next slot."""


def slot_in_use(slot: int) -> bool:
    """Whether anything of a testbed holds `slot` on this machine: state in this state
    folder, or its namespaces or bridge (which another state folder's testbed may own)."""
    prefix = Plan(slot, 0, 0).prefix
    return (
        state.slot_dir(slot).exists()
        or any(n.startswith(prefix + "-") for n in _netns_list())
        or f"{prefix}br" in _links()
    )


def up_in_free_slot(
    clients: int,
    workers: int,
    *,
    link_delay_us: float = 0.0,
    bastion: bool = False,
    cpus: list[int] | None = None,
    log=print,
    slots=state.SLOTS,
) -> Path:
    """`up` in the lowest of `slots` nothing uses, so a testbed someone has up is never
    reused (nor later taken down with this one). A slot lost to a race moves on."""
    _check_cpus(cpus)  # before any slot is looked at
    confine = {"cpus": cpus} if cpus else {}
    for slot in slots:
        if slot_in_use(slot):
            continue
        try:
            return EmulatedTestbed(slot).up(
                clients, workers, link_delay_us=link_delay_us, bastion=bastion, log=log, **confine
            )
        except SlotTaken:
            continue
    raise TestbedError(
        f"every slot ({state.SLOTS.start}..{state.SLOTS.stop - 1}) holds a testbed",
        fix="take one down: `rainmaker testbed down --slot N` (`rainmaker testbed status --slot N` shows it)",
    )


class EmulatedTestbed:
    def __init__(self, slot: int = 0):
        if not 0 <= slot <= 15:
            raise TestbedError(f"slot {slot} is out of range", fix="use a slot from 0 to 15")
        self.slot = slot
        self.dir = state.slot_dir(slot)

    # Paths ---------------------------------------------------------------------------
    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    @property
    def plan_path(self) -> Path:
        return self.dir / "plan.json"

    @property
    def ssh_dir(self) -> Path:
        return self.dir / "ssh"

    @property
    def key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    def machine_dir(self, m: Machine) -> Path:
        return self.dir / "machines" / m.name

    def deploy_root(self, m: Machine) -> Path:
        return self.machine_dir(m) / "root"

    @property
    def bastion_known_hosts(self) -> Path:
        """The bastion's pinned host key: a file of its own, as a lab's gateway often has."""
        return self.ssh_dir / "bastion_known_hosts"

    def _saved_plan(self) -> Plan | None:
        try:
            d = json.loads(self.plan_path.read_text())
            return Plan(self.slot, d["clients"], d["workers"], d.get("bastion", False), tuple(d.get("cpus", ())))
        except (OSError, ValueError, KeyError):
            return None

    # Up ------------------------------------------------------------------------------
    def up(
        self,
        clients: int = 1,
        workers: int = 2,
        *,
        link_delay_us: float = 0.0,
        bastion: bool = False,
        cpus: list[int] | None = None,
        log=print,
    ) -> Path:
        """Build the testbed and write its inventory. `link_delay_us`: the emulated
        switch holds every frame it sends that long (emulation.link_delay_us); on a
        testbed already up it only rewrites the inventory. `bastion`: the machines are
        reachable only through a bastion namespace (the module's docstring). `cpus`:
        every sshd of the testbed starts confined to these cores, and so does everything
        started over SSH (emulation.cpus); None or []: every core of this machine."""
        from ..inventory.model import LINK_DELAY_US_MAX

        if not 0 <= link_delay_us <= LINK_DELAY_US_MAX:
            raise TestbedError(
                f"a link delay of {link_delay_us:g} us is not 0..{LINK_DELAY_US_MAX:.0f}",
                fix="give microseconds, e.g. --link-delay-us 2000 for 2 ms",
            )
        confined = _check_cpus(cpus)
        if os.geteuid() != 0:
            raise TestbedError(
                "the emulated testbed needs root (network namespaces, veths, sshd)", fix="run as root, e.g. with sudo"
            )
        if clients < 1 or workers < 1 or clients + workers > MAX_HOSTS:
            raise TestbedError(
                f"{clients} clients + {workers} workers is not a testbed this can build",
                fix=f"use at least 1 client and 1 worker, at most {MAX_HOSTS} hosts in all",
            )
        for tool in ("ip", "ssh-keygen", "unshare", "ethtool", SSHD, *(["taskset"] if confined else [])):
            if shutil.which(tool) is None:
                raise TestbedError(
                    f"`{tool}` is missing", fix="run `make setup` (apt: iproute2 openssh-server ethtool util-linux)"
                )
        plan = Plan(self.slot, clients, workers, bastion, confined)
        existing = self._saved_plan()
        if existing is not None:
            return self._already_up(existing, plan, link_delay_us, log)
        stray = [n for n in _netns_list() if n.startswith(plan.prefix + "-")]
        if stray or plan.bridge in _links():
            raise SlotTaken(
                f"slot {self.slot} is in use on this machine ({', '.join(stray + [plan.bridge])}) by a testbed "
                f"{state.root()} has no state for: another state folder's (RAINMAKER_STATE_DIR), or leftovers",
                fix=f"use another slot (--slot free); if they are leftovers, clean them with: "
                f"rainmaker testbed down --slot {self.slot}",
            )

        # The bridge claims the slot for the whole machine, whatever state folder another
        # `up` uses: `ip link add` is atomic, so of two racing for a slot one stops here
        # having made nothing. Then record the plan: a crash from here on leaves enough
        # for `down`.
        t0 = time.monotonic()
        claim = _run(["ip", "link", "add", plan.bridge, "type", "bridge"], check=False)
        if claim.returncode != 0:
            raise SlotTaken(
                f"slot {self.slot} was taken while this testbed was being built: {claim.stderr.strip()}",
                fix="use another slot (--slot N, or --slot free)",
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        shape = {"clients": clients, "workers": workers, "bastion": bastion, "cpus": list(confined)}
        self.plan_path.write_text(json.dumps({**shape, "complete": False}))
        self._network(plan, log)
        if bastion:
            self._bastion_network(plan, log)
        self._keys(plan, log)
        self._sshd(plan, log)
        self._wait_ssh(plan, log)
        inv = self._write_inventory(plan, link_delay_us)
        self.plan_path.write_text(json.dumps({**shape, "complete": True}))
        log(f"testbed slot {self.slot} up in {time.monotonic() - t0:.1f} s; inventory: {inv}")
        return inv

    def _already_up(self, existing: Plan, plan: Plan, link_delay_us: float, log) -> Path:
        """`up` of a slot that holds a testbed: the same one, healthy, keeps running (a
        new link delay goes to its inventory); any other is an error that says how."""

        def on(cpus: tuple[int, ...]) -> str:
            return f"cores {format_cpus(cpus)}" if cpus else "every core"

        healthy = self.healthy(existing)
        if existing == plan and healthy:
            log(f"testbed slot {self.slot} is already up ({plan.clients} client(s), {plan.workers} worker(s))")
            if self.link_delay_us() != link_delay_us:
                self._write_inventory(plan, link_delay_us)
                log(
                    f"link delay now {link_delay_us:g} us in its inventory: a switch that runs takes it "
                    f"when it starts again (rainmaker switch start --restart)"
                )
            return self.inventory_path
        if replace(existing, cpus=plan.cpus) == plan and healthy:
            # Its processes took their cores from their sshd when they started: only a
            # new testbed moves them.
            raise TestbedError(
                f"the testbed in slot {self.slot} is up on {on(existing.cpus)}, not {on(plan.cpus)}: "
                "every process in it inherited its cores from its machine's sshd when it started",
                fix=f"take it down and bring it up again: rainmaker testbed down --slot {self.slot}; "
                f"rainmaker testbed up --slot {self.slot} --clients {plan.clients} --workers {plan.workers}"
                + (" --bastion" if plan.bastion else "")
                + (f" --cpus {format_cpus(plan.cpus)}" if plan.cpus else ""),
            )
        raise TestbedError(
            f"a testbed already exists in slot {self.slot} ({existing.clients} client(s), "
            f"{existing.workers} worker(s){', behind a bastion' if existing.bastion else ''}"
            f"{f', on {on(existing.cpus)}' if existing.cpus else ''}{'' if healthy else ', not healthy'})",
            fix=f"take it down first: rainmaker testbed down --slot {self.slot}",
        )

    def _network(self, plan: Plan, log) -> None:
        log(f"network: bridge {plan.bridge} {plan.mgmt_net}.254/24, blackhole {BLACKHOLE}")
        _run(["ip", "route", "replace", "blackhole", BLACKHOLE])
        _run(["ip", "addr", "add", f"{plan.mgmt_net}.254/24", "dev", plan.bridge])
        _run(["ip", "link", "set", plan.bridge, "up"])
        sw_ns = plan.switch.netns(plan.slot)
        for m in plan.machines:
            ns = m.netns(plan.slot)
            _run(["ip", "netns", "add", ns])
            # No IPv6 anywhere: router solicitations and DAD would be noise on data ports.
            _ns(ns, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
            _ns(ns, ["ip", "link", "set", "lo", "up"])
            root_end = plan.mgmt_veth(m)
            _run(["ip", "link", "add", root_end, "type", "veth", "peer", "name", f"{root_end}x"])
            _run(["ip", "link", "set", f"{root_end}x", "netns", ns])
            _ns(ns, ["ip", "link", "set", f"{root_end}x", "name", MGMT_IFACE])
            _ns(ns, ["ip", "addr", "add", f"{plan.mgmt_ip(m)}/24", "dev", MGMT_IFACE])
            _ns(ns, ["ip", "link", "set", MGMT_IFACE, "up"])
            _run(["ip", "link", "set", root_end, "master", plan.bridge])
            _run(["ip", "link", "set", root_end, "up"])
        for m in plan.hosts:
            ns = m.netns(plan.slot)
            tmp_host, tmp_sw = f"{plan.prefix}d{m.index}h", f"{plan.prefix}d{m.index}s"
            _run(["ip", "link", "add", tmp_host, "type", "veth", "peer", "name", tmp_sw])
            _run(["ip", "link", "set", tmp_host, "netns", ns])
            _run(["ip", "link", "set", tmp_sw, "netns", sw_ns])
            _ns(ns, ["ip", "link", "set", tmp_host, "name", DATA_IFACE])
            _ns(ns, ["ip", "link", "set", DATA_IFACE, "address", plan.mac(m)])
            _ns(sw_ns, ["ip", "link", "set", tmp_sw, "name", plan.switch_iface(m)])
            for nsn, ifc in ((ns, DATA_IFACE), (sw_ns, plan.switch_iface(m))):
                # Kernel-built UDP would leave veths with a partial checksum (bad on the wire).
                _ns(nsn, ["ethtool", "-K", ifc, "tx", "off"], check=False)
                _ns(nsn, ["ip", "link", "set", ifc, "up"])
        log(f"network: {len(plan.machines)} namespaces, {len(plan.hosts)} data links")

    def _bastion_network(self, plan: Plan, log) -> None:
        """The root namespace leaves the management network, and a bastion joins it: on
        the bridge, and on a link of its own to the root namespace. It forwards nothing,
        so only connections it makes itself (SSH's) reach the machines."""
        ns = plan.bastion_netns
        _run(["ip", "addr", "del", f"{plan.mgmt_net}.254/24", "dev", plan.bridge])
        _run(["ip", "netns", "add", ns])
        _ns(ns, ["sysctl", "-qw", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.disable_ipv6=1"])
        _ns(ns, ["ip", "link", "set", "lo", "up"])
        inside, outside = f"{plan.prefix}m-b", f"{plan.prefix}m-gw"  # `down` removes rmSm-* links
        for root_end, ifname, addr in ((inside, MGMT_IFACE, plan.bastion_mgmt_ip), (outside, "gw0", plan.bastion_ip)):
            _run(["ip", "link", "add", root_end, "type", "veth", "peer", "name", f"{root_end}x"])
            _run(["ip", "link", "set", f"{root_end}x", "netns", ns])
            _ns(ns, ["ip", "link", "set", f"{root_end}x", "name", ifname])
            _ns(ns, ["ip", "addr", "add", f"{addr}/24", "dev", ifname])
            _ns(ns, ["ip", "link", "set", ifname, "up"])
        _run(["ip", "link", "set", inside, "master", plan.bridge])
        _run(["ip", "link", "set", inside, "up"])
        _run(["ip", "addr", "add", f"10.81.{plan.slot}.254/24", "dev", outside])
        _run(["ip", "link", "set", outside, "up"])
        log(f"network: bastion {ns} at {plan.bastion_ip}; no route from here to {plan.mgmt_net}.0/24")

    def _keys(self, plan: Plan, log) -> None:
        self.ssh_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.ssh_dir, 0o700)
        if not self.key.exists():
            _run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rainmaker-slot{self.slot}", "-f", str(self.key)]
            )
        (self.ssh_dir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        os.chmod(self.ssh_dir / "authorized_keys", 0o600)
        lines = []
        for m in plan.machines:
            d = self.machine_dir(m)
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)
            self.deploy_root(m).mkdir(exist_ok=True)
            hk = d / "ssh_host_ed25519_key"
            if not hk.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", m.name, "-f", str(hk)])
            pub = hk.with_suffix(".pub").read_text().split()
            lines.append(f"{plan.mgmt_ip(m)} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        log(f"ssh: orchestrator key and {len(plan.machines)} host keys; pinned in {self.known_hosts}")
        if plan.bastion:
            d = self.dir / "machines" / BASTION
            d.mkdir(parents=True, exist_ok=True)
            hk = d / "ssh_host_ed25519_key"
            if not hk.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", BASTION, "-f", str(hk)])
            pub = hk.with_suffix(".pub").read_text().split()
            self.bastion_known_hosts.write_text(f"{plan.bastion_ip} {pub[0]} {pub[1]}\n")
            log(f"ssh: the bastion's host key pinned in {self.bastion_known_hosts}")

    def _sshd(self, plan: Plan, log) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        for m in plan.machines:
            # Behind a bastion the switch forwards its BFRuntime port over SSH
            # (switch.bfrt_via_ssh); otherwise no machine forwards anything.
            forward = plan.bastion and m.role == "switch"
            env = f"RAINMAKER_HOST={m.name} RAINMAKER_DEPLOY_ROOT={self.deploy_root(m)} SHLVL=1"
            ns = m.netns(plan.slot)
            self._start_sshd(ns, m.name, self.machine_dir(m), plan.mgmt_ip(m), env, forward, plan.cpus)
        if plan.bastion:  # a gateway: it forwards connections to the machines, and runs nothing of ours
            d = self.dir / "machines" / BASTION
            self._start_sshd(plan.bastion_netns, BASTION, d, plan.bastion_ip, "SHLVL=1", True, plan.cpus)
        on = f" on cores {format_cpus(plan.cpus)}" if plan.cpus else ""
        log(f"ssh: {len(plan.machines) + plan.bastion} sshd started{on}")

    def _start_sshd(
        self, ns: str, name: str, d: Path, listen: str, env: str, forward: bool, cpus: tuple[int, ...] = ()
    ) -> None:
        """An sshd in namespace `ns` with hostname `name`, its files in `d`, on `listen`:22,
        confined to `cpus` (every process it starts inherits them; (): every core)."""
        cfg = d / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    f"ListenAddress {listen}",
                    "Port 22",
                    f"HostKey {d / 'ssh_host_ed25519_key'}",
                    f"PidFile {d / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.ssh_dir / 'authorized_keys'}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "X11Forwarding no",
                    # local: direct-tcpip channels (ssh -L, -W, a jump), never remote listeners
                    f"AllowTcpForwarding {'local' if forward else 'no'}",
                    "PrintMotd no",
                    "Subsystem sftp internal-sftp",
                    # Processes started over SSH see where their deploy root is. SHLVL=1:
                    # sshd runs every command through root's login shell, and Debian's
                    # bash reads ~/.bashrc for a command sshd starts unless it is a nested
                    # shell. This machine's root ~/.bashrc is a person's interactive set-up
                    # (here `pyenv init`: 130 ms a command, and once a `pyenv rehash` race
                    # that broke a probe's output), not the emulated host's: with it every
                    # SSH command took 136 ms, without it 48 ms (a run's short point: 3.7 s
                    # -> 2.1 s; every Ansible task on a host pays it too).
                    f"SetEnv {env}",
                    "MaxStartups 64:30:128",
                    "MaxSessions 64",
                    "",
                ]
            )
        )
        os.chmod(cfg, 0o600)
        _run([SSHD, "-t", "-f", str(cfg)])
        # A UTS namespace gives each machine its own hostname (Ansible's ansible_hostname).
        # -r: no re-execution of sshd for each connection. Re-executing (fresh ASLR per
        # connection) cost 12.6 ms of CPU before the greeting, 1.1 ms without, on this
        # machine's two shared cores: under load a greeting took over 1 s, and every
        # SSH connection of a run or a provisioning paid it. These sshds listen only on
        # the testbed's own bridge and take only the testbed's key. taskset -c: on a
        # testbed confined to some cores, sshd and every process it starts (agents,
        # programs, the switch and its data plane thread) inherit its affinity.
        in_ns = ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c"]
        hostname_then_sshd = 'hostname "$1" && exec "$2" -r -f "$3" -E "$4"'
        _run(_confined([*in_ns, hostname_then_sshd, "sh", name, SSHD, str(cfg), str(d / "sshd.log")], cpus))

    def _wait_ssh(self, plan: Plan, log, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        pending = {plan.mgmt_ip(m): m.name for m in plan.machines}
        outside = {plan.bastion_ip: BASTION} if plan.bastion else {}
        seen_from = plan.bastion_netns if plan.bastion else None  # only the bastion reaches the machines
        while (pending or outside) and time.monotonic() < deadline:
            for addr in _banners(list(outside), None) if outside else ():
                del outside[addr]
            if not outside:  # (the bastion's namespace exists: its sshd answers)
                for addr in _banners(list(pending), seen_from, plan.cpus):
                    del pending[addr]
            if pending or outside:
                time.sleep(0.05)
        if pending or outside:
            names = ", ".join([*outside.values(), *pending.values()])
            raise TestbedError(
                f"sshd did not answer on {names} within {timeout:.0f} s",
                fix=f"see the sshd logs under {self.dir / 'machines'}; then `rainmaker testbed down --slot {self.slot}`",
            )

    def _write_inventory(self, plan: Plan, link_delay_us: float = 0.0) -> Path:
        sw = plan.switch
        emulation: dict = {"state_dir": str(self.dir), "slot": self.slot}
        if link_delay_us:
            emulation["link_delay_us"] = float(link_delay_us)
        if plan.cpus:
            emulation["cpus"] = list(plan.cpus)
        inv = {
            "name": f"emulated{self.slot}",
            "switch": {
                "name": sw.name,
                "kind": "emulated",
                "mgmt": {"address": plan.mgmt_ip(sw), "user": "root"},
                "bfrt": f"{plan.mgmt_ip(sw)}:50052",
                "service_ip": f"{plan.data_net}.254",
                "service_mac": f"02:52:4d:{self.slot:02x}:ff:fe",
                "deploy_root": str(self.deploy_root(sw)),
                "netns": sw.netns(plan.slot),
                "ports": [
                    {
                        "port": plan.switch_port(m),
                        "dev_port": plan.dev_port(m),
                        "speed": "100G",
                        "fec": "none",
                        "iface": plan.switch_iface(m),
                    }
                    for m in plan.hosts
                ],
            },
            "hosts": [
                {
                    "name": m.name,
                    "role": m.role,
                    "mgmt": {"address": plan.mgmt_ip(m), "user": "root"},
                    "nic": {
                        "vdev": f"net_af_packet0,iface={DATA_IFACE}",
                        "mac": plan.mac(m),
                        "ip": plan.data_ip(m),
                        "switch_port": plan.switch_port(m),
                    },
                    "cores": [0, 1] if m.role == "worker" else [0],
                    "hugepages": {"size": "2M", "count": 64},
                    "deploy_root": str(self.deploy_root(m)),
                    "netns": m.netns(plan.slot),
                }
                for m in plan.hosts
            ],
            "ssh": {"key": str(self.key), "known_hosts": str(self.known_hosts)},
            "emulation": emulation,
        }
        if plan.bastion:  # a lab behind a gateway: every SSH connection through it, BFRuntime tunnelled
            inv["ssh"]["jump"] = {
                "address": plan.bastion_ip,
                "user": "root",
                "known_hosts": str(self.bastion_known_hosts),
            }
            inv["switch"]["bfrt_via_ssh"] = True
        header = (
            f"# Written by `rainmaker testbed up --slot {self.slot}`: the emulated testbed on this machine.\n"
            f"# It is the default inventory while it is the only testbed up; `rainmaker testbed down\n"
            f"# --slot {self.slot}` removes it.\n"
            "# roce.icrc_check unset: emulated NICs ignore the switch's zero iCRCs, as a ConnectX must (`on`: drop them)\n"
        )
        self.inventory_path.write_text(header + yaml.safe_dump(inv, sort_keys=False))
        from ..inventory import load  # validate what we wrote, as any user file

        load(self.inventory_path)
        return self.inventory_path

    # Status --------------------------------------------------------------------------
    def link_delay_us(self) -> float:
        """The link delay its inventory gives the switch (0 without one, or no inventory)."""
        try:
            emulation = (yaml.safe_load(self.inventory_path.read_text()) or {}).get("emulation") or {}
            return float(emulation.get("link_delay_us", 0.0))
        except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
            return 0.0

    def healthy(self, plan: Plan | None = None) -> bool:
        plan = plan or self._saved_plan()
        if plan is None:
            return False
        return all(row["sshd"] == "up" for row in self.status(plan)["machines"])

    def status(self, plan: Plan | None = None) -> dict:
        plan = plan or self._saved_plan()
        if plan is None:
            return {"slot": self.slot, "up": False, "machines": []}
        names = set(_netns_list())
        seen_from = plan.bastion_netns if plan.bastion and plan.bastion_netns in names else None
        greeting = (
            _banners([plan.mgmt_ip(m) for m in plan.machines], seen_from, plan.cpus)
            if seen_from or not plan.bastion
            else set()
        )
        machines = [(m.name, m.role, m.netns(plan.slot), plan.mgmt_ip(m), self.machine_dir(m)) for m in plan.machines]
        if plan.bastion:
            greeting |= _banners([plan.bastion_ip], None)
            machines.append((BASTION, BASTION, plan.bastion_netns, plan.bastion_ip, self.dir / "machines" / BASTION))
        rows = []
        for name, role, ns, addr, d in machines:
            try:
                alive = _pid_alive(int((d / "sshd.pid").read_text().strip()))
            except (OSError, ValueError):
                alive = False
            m = next((x for x in plan.hosts if x.name == name), None)
            rows.append(
                {
                    "name": name,
                    "role": role,
                    "netns": ns if ns in names else "missing",
                    "mgmt": addr,
                    "sshd": "up" if alive and addr in greeting else "down",
                    "data": "-" if m is None else f"{plan.data_ip(m)} via {plan.switch_port(m)}",
                }
            )
        try:
            complete = json.loads(self.plan_path.read_text()).get("complete", False)
        except (OSError, ValueError):
            complete = False
        return {
            "slot": self.slot,
            "up": True,
            "complete": complete,
            "inventory": str(self.inventory_path),
            "link_delay_us": self.link_delay_us(),
            "cpus": list(plan.cpus),  # [] : every core of this machine
            "machines": rows,
        }

    # Down ----------------------------------------------------------------------------
    def down(self, *, log=print) -> list[str]:
        """Remove everything this slot made, in the order that leaves nothing behind.

        Works from what exists (namespaces and links with this slot's prefix), not only
        from the recorded plan, so it also cleans a half-built or crashed `up`.
        """
        if os.geteuid() != 0:
            raise TestbedError("taking the emulated testbed down needs root", fix="run as root")
        plan = Plan(self.slot, 0, 0)
        prefix = plan.prefix
        removed: list[str] = []
        # 1. Ansible's ControlPersist masters would keep sessions (and namespaces) alive.
        for sock in self._control_sockets():
            _run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "rainmaker-testbed"], check=False, timeout=5)
        # 2. Every process inside our namespaces (sshd, programs started over SSH).
        mine = [n for n in _netns_list() if n.startswith(prefix + "-")]
        pids: list[int] = []
        for ns in mine:
            r = _run(["ip", "netns", "pids", ns], check=False)
            pids += [int(p) for p in r.stdout.split() if p.isdigit()]
        for pidf in self.dir.glob("machines/*/sshd.pid"):
            try:
                pids.append(int(pidf.read_text().strip()))
            except (OSError, ValueError):
                pass
        pids = sorted(set(p for p in pids if p != os.getpid()))
        if pids:
            _kill_pids(pids)
            removed.append(f"{len(pids)} processes")
        # 3. Sockets still open in the namespaces; 4. the namespaces (their veths go with them).
        for ns in mine:
            _ns(ns, ["ss", "-K", "state", "all"], check=False)
            _run(["ip", "netns", "del", ns], check=False)
            removed.append(f"netns {ns}")
        # 5. The bridge and any root-side veth a half-built `up` left behind.
        for link in _links():
            if link == plan.bridge or link.startswith(f"{prefix}m-") or link.startswith(f"{prefix}d"):
                _run(["ip", "link", "del", link], check=False)
                removed.append(f"link {link}")
        # 6. Orphaned TCP sockets towards the management network (and a bastion's link).
        _run(["ss", "-K", "dst", f"{plan.mgmt_net}.0/24"], check=False)
        _run(["ss", "-K", "dst", f"10.81.{self.slot}.0/24"], check=False)
        # DPDK runtime dirs of programs that ran on this slot's hosts.
        for d in Path("/var/run/dpdk").glob(f"{prefix}-*") if Path("/var/run/dpdk").is_dir() else []:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"dpdk runtime {d.name}")
        # The blackhole stays while another slot still uses the range.
        others = [n for n in _netns_list() if n.startswith("rm") and "-" in n and not n.startswith(prefix + "-")]
        if not others:
            if _run(["ip", "route", "del", "blackhole", BLACKHOLE], check=False).returncode == 0:
                removed.append(f"route blackhole {BLACKHOLE}")
        if self.dir.exists():
            shutil.rmtree(self.dir)
            removed.append(f"state {self.dir}")
        log(
            f"testbed slot {self.slot} down" + (f": removed {', '.join(removed)}" if removed else ": nothing to remove")
        )
        return removed

    def _control_sockets(self) -> list[Path]:
        out = []
        for d in (self.dir / "ansible" / "cp", self.dir / "cp"):
            if d.is_dir():
                out += [p for p in d.iterdir() if p.is_socket()]
        return out
