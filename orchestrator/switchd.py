"""The switch's software: start it, stop it, ask how it is.

On an emulated switch that software is the emulator (`python -m switch.emulator`),
run as a background process on the switch machine over SSH like every other remote
program (orchestrator.remote). On a Tofino it is bf_switchd, run as a service by the
tofino_sde role (playbooks/roles/tofino_sde): `start` runs that role (it compiles and
installs the program if its sources changed, starts bf_switchd, and tofino-model on
switch.target: model, and probes readiness), `stop` runs its `switchd` tasks with
tofino_sde_state: stopped. `status` (and the table readers) work on any switch through
BFRuntime.

Readiness is probed: the emulator's ready line (or bf_switchd's BFRuntime port), its
BFRuntime port listening, a BFRuntime session that subscribes and reads the program,
every port's $PORT_UP.

Every BFRuntime user dials the address `bfrt_dial` gives: switch.bfrt, or, with
switch.bfrt_via_ssh, the local end of an SSH tunnel to the switch (bfrt_tunnel.py), so
a switch whose gRPC port answers only on its management network is programmed alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .errors import ProvisionError, RainmakerError, RemoteError, SwitchdError, UsageError
from .inventory.model import Inventory
from .remote import Remote, targets

PROCESS = "switch"  # the background process's name: run/switch.pid, run/switch.log
READY_TIMEOUT_S = 60.0
ROLE = "tofino_sde"  # runs bf_switchd on a Tofino; its start/stop/readiness tasks are tagged SWITCHD_TAG
SWITCHD_TAG = "switchd"
TOFINO_PROCESS = "bf_switchd, a service of the tofino_sde role"
CONNECT_TIMEOUT_S = 5.0
STOP_GRACE_S = 5.0
# Read-only sessions (status, tables, registers) never bind, and each takes the first
# client id from READER_CLIENT_ID on that no other session holds: several readers at
# once, and a hung one holds only its own id (until the switch ends its session).
READER_CLIENT_ID = 7
READER_CLIENT_IDS = 64


@dataclass
class SwitchStatus:
    name: str
    kind: str
    bfrt: str  # as the inventory gives it; with `via`, as the switch sees it
    process: str  # "running (process group N)", "not running", or TOFINO_PROCESS
    running: bool | None  # None: unknown (tofino: BFRuntime answering is what tells)
    answers: bool = False  # BFRuntime answered
    program: str | None = None
    ports: dict[int, dict] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # dev_port -> front-panel name
    error: str | None = None
    via: str | None = None  # the SSH tunnel BFRuntime is reached through (switch.bfrt_via_ssh)

    @property
    def ok(self) -> bool:
        return self.running is not False and self.answers


def need_switch(inv: Inventory, what: str = "this") -> None:
    """A plain LAN has no switch software: say so rather than fail on a missing field."""
    if not inv.switch.programmable:
        raise UsageError(
            f"{what} needs a switch rainmaker programs, and {inv.switch.name} is a plain LAN (switch.kind: lan)",
            fix="run server-side systems (rpc-server, memcached) on it, or use an inventory with a tofino "
            "or emulated switch",
        )


def _remote(inv: Inventory) -> Remote:
    need_switch(inv)
    (t,) = targets(inv, role="switch")
    return Remote(t)


def _tofino_role(
    inv: Inventory,
    state: str,
    program: str | None,
    *,
    tags: list[str],
    log: Callable[[str], None],
    progress: bool,
    extra: dict | None = None,
):
    """Run the tofino_sde role on the switch alone; its report, or a SwitchdError naming what failed."""
    from .provision import provision

    sw = inv.switch
    extra_vars = {"tofino_sde_state": state, "tofino_sde_program": program or sw.program, **(extra or {})}
    try:
        report = provision(inv, tags=tags, limit=sw.name, extra_vars=extra_vars, progress=progress)
    except ProvisionError as e:
        rep = getattr(e, "report", None)
        missing = (rep.missing or {}).get(sw.name, []) if rep is not None else []
        if missing:  # what the switch lacks, one thing a line, each with its fix
            why = f"{sw.name} lacks:\n  - " + "\n  - ".join(missing)
        else:
            why = "\n  ".join(f"task '{f.task}': {f.message}" for f in e.failures) or e.message
        raise SwitchdError(
            f"switch {sw.name}: the {ROLE} role could not {'stop' if state == 'stopped' else 'start'} bf_switchd:\n  "
            + why,
            switch=sw.name,
            fix=(
                "provide what is missing, then run `rainmaker switch start` again"
                if missing
                else f"the role's full log is in {rep.run_dir / 'artifacts'}"
                if rep is not None and rep.run_dir
                else None
            ),
        ) from e
    for label, _hosts in report.changed_by_task():
        log(label.removeprefix(f"{ROLE} : "))
    for text in report.notes:
        log(text)
    return report


EMULATOR_RT_PRIORITY = 20


def emulator_argv(inv: Inventory, program: str, log_path: str, extra: Sequence[str] = ()) -> list[str]:
    """The command that runs the emulator on the switch machine.

    The emulated switch is a namespace of this machine, sharing its file system, so the
    orchestrator's own Python (sys.executable, with rainmaker installed) is the switch's
    software: nothing is copied to it."""
    sw = inv.switch
    argv = [sys.executable, "-m", "switch.emulator", "--program", program]
    for p in sw.ports:
        if p.iface is None:
            raise SwitchdError(
                f"switch port {p.port} (dev_port {p.dev_port}) has no iface",
                switch=sw.name,
                fix="an emulated switch's ports name their interfaces: rebuild the testbed inventory",
            )
        argv += ["--port", f"{p.dev_port}={p.iface}:{p.port}"]  # the front-panel name for $PORT_STR_INFO
    # The emulated switch shares this machine's cores with every host: while frames flow
    # its data plane runs at a real-time priority (below the client's 30, the measuring
    # instrument), so a frame is switched when it arrives, not when the scheduler gets
    # round to it; bounded so that it never holds a core (docs/emulation.md). Not on a
    # testbed confined to one core (Inventory.realtime_fits).
    argv += ["--grpc", sw.bfrt, "--log", log_path]
    if inv.realtime_fits:
        argv += ["--realtime", str(EMULATOR_RT_PRIORITY)]
    delay = inv.emulation.link_delay_us if inv.emulation is not None else 0.0
    if delay:  # a slower testbed on purpose (docs/emulation.md)
        argv += ["--link-delay-us", str(delay)]  # str: every digit of the float, unrounded
    return argv + list(extra)


def bfrt_dial(inv: Inventory):
    """Where to dial the switch's BFRuntime, as a bfrt_tunnel.Dial (its `address`; close
    it when done): switch.bfrt, or the local end of an SSH tunnel to the switch, open
    while the dial is (switch.bfrt_via_ssh). Every BFRuntime user goes through here."""
    from . import bfrt_tunnel

    need_switch(inv, "BFRuntime")
    return bfrt_tunnel.dial(inv)


def connect(
    inv: Inventory,
    *,
    program: str | None = None,
    bind: bool = False,
    client_id: int = READER_CLIENT_ID,
    timeout: float = CONNECT_TIMEOUT_S,
):
    """A BFRuntime session to the inventory's switch (a switch.bfrt.Client dialled
    through `bfrt_dial`: it holds the tunnel, if any, until closed). A reader (no
    `bind`) on the reader id takes the first free one of READER_CLIENT_IDS ids."""
    from .bfrt_tunnel import session_class

    need_switch(inv, "a BFRuntime session")
    spare = READER_CLIENT_IDS - 1 if not bind and client_id == READER_CLIENT_ID else 0
    return session_class()(
        inv, p4_name=program, client_id=client_id, spare_ids=spare, bind=bind, connect_timeout=timeout
    )


def known_programs() -> tuple[str, ...]:
    """The P4 programs the switch can run: each is a top file switch/p4/<name>.p4 with
    an emulator of the same name (switch/emulator/programs.py) and a controller."""
    from switch.emulator.programs import NAMES

    return NAMES


def check_program(program: str, switch: str) -> None:
    """A SwitchdError naming the known programs, before anything starts, for any other name."""
    if program not in known_programs():
        raise SwitchdError(
            f"switch {switch}: there is no P4 program {program!r}; the switch runs one of: "
            f"{', '.join(known_programs())}",
            switch=switch,
            fix="give --program one of those (or set the inventory's switch.program to one)",
        )


def start(
    inv: Inventory,
    program: str | None = None,
    *,
    log: Callable[[str], None] = lambda m: None,
    ready_timeout: float | None = None,
    port_timeout: float = 30.0,
    restart: bool = False,
    progress: bool = False,
    emulator_args: Sequence[str] = (),
) -> SwitchStatus:
    """Start the switch's software and bring its ports up; returns its status.

    Emulated: runs the emulator over SSH (`restart` stops a running one first; without
    it a running one is an error); a start that fails half-way stops what it started and
    raises with the switch's log tail. Tofino: runs the tofino_sde role, which leaves a
    running bf_switchd alone unless its program or configuration changed (or `restart`),
    and fails naming what the switch lacks or which ports stayed down. `emulator_args`:
    more options for an emulated switch (a run's `--recirc-delay-us`); none on a Tofino."""
    from switch.control.ports import Ports
    from switch.control.topology import Topology

    need_switch(inv, "starting the switch")
    sw = inv.switch
    program = program or sw.program
    check_program(program, sw.name)
    if sw.kind == "tofino":
        extra = {"tofino_sde_port_timeout": int(max(1, port_timeout))}
        if ready_timeout is not None:
            extra["tofino_sde_ready_timeout"] = int(max(1, ready_timeout))
        log(f"running the {ROLE} role on {sw.name} (bf_switchd, {program}, target {sw.target})")
        _tofino_role(
            inv, "restarted" if restart else "started", program, tags=[ROLE], log=log, progress=progress, extra=extra
        )
        return status(inv)
    ready_timeout = READY_TIMEOUT_S if ready_timeout is None else ready_timeout
    if restart:
        log(f"stopping the switch software on {sw.name}: {stop(inv)}")
    with _remote(inv) as r:
        running = r.find(PROCESS)
        if running is not None:
            raise SwitchdError(
                f"the switch software already runs on {sw.name} (process group {running.pgid})",
                switch=sw.name,
                fix="stop it first (rainmaker switch stop), or start it with --restart",
            )
        run_dir = str(r.target.run_dir)
        argv = emulator_argv(inv, program, f"{run_dir}/emulator.log", emulator_args)
        log(f"starting the {program} emulator on {sw.name} ({len(sw.ports)} ports, BFRuntime on {sw.bfrt})")
        bg = r.start(PROCESS, argv, cwd=str(sw.deploy_root))
        try:
            waited = r.wait_ready(bg, log_regex=f"^{program} emulator ready$", port=sw.bfrt_port, timeout=ready_timeout)
            log(f"emulator ready after {waited:.1f} s (process group {bg.pgid})")
            with connect(inv, program=program, bind=True, client_id=0) as client:
                ports = Topology.from_inventory(inv).ports
                up = Ports(client).bring_up(ports, port_timeout)
                log(f"{len(ports)} ports up after {up:.1f} s")
        except BaseException as e:
            tail = r.log_tail(bg, 15).rstrip() if not isinstance(e, RemoteError) else ""
            how = r.stop(bg, grace=STOP_GRACE_S)
            if not isinstance(e, Exception):
                raise
            why = e.render() if isinstance(e, RainmakerError) else f"{type(e).__name__}: {e}"
            raise SwitchdError(
                f"switch {sw.name}: the {program} emulator did not come up "
                f"({'it had exited' if how == 'not running' else 'stopped it again'}):\n  {why}"
                + (f"\n  log {bg.log}:\n    " + tail.replace("\n", "\n    ") if tail else ""),
                switch=sw.name,
            ) from e
    return status(inv)


def stop(
    inv: Inventory, *, grace: float = STOP_GRACE_S, log: Callable[[str], None] = lambda m: None, progress: bool = False
) -> str:
    """Stop the switch's software (TERM, then KILL after `grace`): "terminated",
    "killed" or "not running" (emulated); "stopped" or "not running" (tofino: the
    tofino_sde role's switchd tasks, tofino-model too)."""
    need_switch(inv, "stopping the switch")
    if inv.switch.kind == "tofino":
        report = _tofino_role(
            inv,
            "stopped",
            None,
            tags=[SWITCHD_TAG],
            log=log,
            progress=progress,
            extra={"tofino_sde_stop_timeout": int(max(1, grace))},
        )
        stopped = any(c.task.startswith("Stop ") for c in report.changed)
        return "stopped" if stopped else "not running"
    with _remote(inv) as r:
        bg = r.find(PROCESS)
        if bg is None:
            return "not running"
        return r.stop(bg, grace=grace)


def status(inv: Inventory, *, timeout: float = 3.0) -> SwitchStatus:
    """Whether the switch's software runs, answers BFRuntime, its program and ports."""
    from switch.errors import SwitchError

    need_switch(inv, "the switch's status")
    sw = inv.switch
    st = SwitchStatus(sw.name, sw.kind, sw.bfrt, TOFINO_PROCESS, None, names={p.dev_port: p.port for p in sw.ports})
    if sw.bfrt_via_ssh:
        st.via = f"an SSH tunnel to {sw.name}" + (f" through {inv.ssh.jump.address}" if inv.ssh.jump else "")
    if sw.kind == "emulated":
        with _remote(inv) as r:
            bg = r.find(PROCESS)
        st.running = bg is not None
        st.process = f"running (process group {bg.pgid})" if bg else "not running"
        if bg is None:
            return st
    try:
        with connect(inv, timeout=timeout) as client:
            from switch.control.ports import Ports

            st.answers = True
            st.program = client.p4_name
            st.ports = Ports(client).status()
    except SwitchError as e:
        st.error = e.render()
    return st


UP, DOWN, UNKNOWN = "up", "down", "unknown"


def liveness(inv: Inventory, *, timeout: float = 3.0) -> tuple[str, str]:
    """Whether the switch's software is known to be up (UP), known to be down (DOWN), or
    neither (UNKNOWN), and why, without a BFRuntime session: no client id is taken, so
    readers that hold ids, hung or not, change nothing here.

    DOWN: the emulator's process is not running, or the BFRuntime port refuses
    connections (nothing listens). UP: its gRPC server completes a connection handshake
    within `timeout`. Anything else (the switch machine's SSH fails, the handshake times
    out, as with a frozen server) is UNKNOWN, and unknown is not down: a switch is only
    restarted when it is down."""
    import socket

    import grpc

    sw = inv.switch
    if not sw.programmable:
        return UP, "a plain LAN: no switch software to be down"
    if sw.kind == "emulated":
        try:
            with Remote(targets(inv, role="switch")[0], connect_timeout=timeout) as r:
                running = r.find(PROCESS) is not None
        except RemoteError as e:
            return UNKNOWN, f"cannot look for the emulator's process on {sw.name}: {e.result.error or e.message}"
        if not running:
            return DOWN, f"the emulator's process is not running on {sw.name}"
    with bfrt_dial(inv) as dial:
        if dial.tunnel is not None:  # the port as the switch sees it, asked of its sshd
            try:
                dial.tunnel.probe()
            except RemoteError as e:
                why = e.result.error or e.message
                if "refused" in why.lower() and "could not connect" in why:
                    return DOWN, f"its BFRuntime port {sw.bfrt} refuses connections (asked through {dial.tunnel})"
                return UNKNOWN, f"cannot reach its BFRuntime port {sw.bfrt} through {dial.tunnel}: {why}"
        else:
            host, _, port = sw.bfrt.rpartition(":")
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            except ConnectionRefusedError:
                return DOWN, f"its BFRuntime port {sw.bfrt} refuses connections"
            except OSError as e:
                return UNKNOWN, f"its BFRuntime port {sw.bfrt} did not accept a connection ({e.strerror or e})"
        channel = grpc.insecure_channel(dial.address)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return UNKNOWN, f"BFRuntime at {dial} accepts connections but did not answer within {timeout:g} s"
        finally:
            channel.close()
        return UP, f"BFRuntime at {dial} answers"


# -- reading the switch (any switch that answers BFRuntime) ------------------------------

BIG_REGISTER = 4096  # cells: larger registers are summarised unless asked for


# The fixed tables rainmaker's controllers write. bf_switchd serves many more (TM,
# mirror, pktgen, LAG, ...), some with an entry per queue or port; `everything` lists them.
WRITTEN_FIXED = ("$PORT", "$pre.mgid", "$pre.node")


def _fixed(name: str) -> bool:
    """A table of the device, not of the P4 program: `$PORT`, `$pre.*`, `tf1.tm.*`, ..."""
    return name.startswith(("$", "tf1.", "tf2.", "tf3."))


def tables(client, *, everything: bool = False) -> list[dict]:
    """Every match-action table of the program and the fixed ones rainmaker writes
    ($PORT, $pre.mgid, $pre.node; `everything`: every fixed table the switch serves):
    [{name, size, keys: [field names], entries: [{key, action, data}], default}]."""
    out = []
    infos = sorted(client.info.tables.values(), key=lambda t: (_fixed(t.name), t.name))
    for info in infos:
        if info.table_type in ("Register", "Counter", "PortStat"):
            continue
        if _fixed(info.name) and info.name not in WRITTEN_FIXED and not everything:
            continue
        t = client.table(info.name)
        rows = [{"key": e.key, "action": _short(e.action), "data": e.data, "priority": e.priority} for e in t.entries()]
        default = None
        if info.actions:
            d = t.default()
            default = {"action": _short(d.action), "data": d.data}
        out.append(
            {
                "name": info.name,
                "type": info.table_type,
                "size": info.size,
                "keys": [k.name for k in info.keys if k.name != "$MATCH_PRIORITY"],
                "widths": {
                    **{k.name: k.width for k in info.keys},
                    **{d.name: d.width for d in info.data},
                    **{p.name: p.width for a in info.actions for p in a.params},
                },
                "entries": rows,
                "default": default,
            }
        )
    return out


def registers(client, inv: Inventory, *, everything: bool = False) -> dict:
    """Registers and counters as plain data. The Rain program gets the controller's
    snapshot (queues summarised from head and balance); any other program every register
    up to BIG_REGISTER cells, larger ones only with `everything`."""
    if _is_rain(client):
        from switch.control import RainController

        return RainController(client, inv).snapshot("all" if everything else "summary")
    from switch.control import _cells

    regs, counters = {}, {}
    for info in sorted(client.info.tables.values(), key=lambda t: t.name):
        if info.table_type == "Register":
            reg = client.register(info.name)
            if info.size > BIG_REGISTER and not everything:
                regs[info.name] = {"size": info.size, "width": reg.field.width, "skipped": True}
            else:
                regs[info.name] = {
                    "size": info.size,
                    "width": reg.field.width,
                    "pipes": _cells.values_per_pipe(reg.read_all()),
                }
        elif info.table_type == "Counter":
            counters[info.name] = {
                str(i): {"packets": v.packets, "bytes": v.bytes}
                for i, v in enumerate(client.counter(info.name).read_all())
                if v.packets or v.bytes
            }
    return {"program": client.p4_name, "registers": regs, "counters": counters}


def _is_rain(client) -> bool:
    names = set(client.info.tables)
    return "pipe.SwitchIngress.bidir_queue.balance" in names and "pipe.SwitchEgress.rdma_writer.build_write" in names


def _short(action: str | None) -> str | None:
    return action.rsplit(".", 1)[-1] if action else action
