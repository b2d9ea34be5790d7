"""The switch as a run holds it: the P4 program it runs, this run's BFRuntime session
(bound, as the program's one writer) and the controller for that program."""

from __future__ import annotations

import hashlib
import json
import time

from ..errors import RainmakerError, one_line
from ..inventory import Inventory
from ..systems import get as get_system


class PointFailed(RainmakerError):
    """A point could not be measured (after its retries)."""


def switch_session(inv: Inventory, log, program: str = "rain"):
    """Start the switch's software if it is known to be down, and open this run's
    BFRuntime session (bound, as the program's one writer). A switch whose state cannot
    be told (a status read that times out, a reader that holds a client id) is not
    restarted: killing a healthy switch mid-run loses every point's state on it."""
    from .. import switchd

    state, why = switchd.liveness(inv)
    if state == switchd.DOWN:
        log(f"switch {inv.switch.name} is down ({why}): (re)starting its software")
        switchd.start(inv, program, log=log, restart=inv.switch.kind == "emulated")  # a live one not serving: stop it
    elif state == switchd.UNKNOWN:
        log(f"switch {inv.switch.name}: state unknown ({why}); not restarting it, connecting")
    return switchd.connect(inv, program=program, bind=True, client_id=1)


class SwitchSide:
    """`ctl` is the controller of the program the switch runs (`program`), over `bfrt`,
    this run's session; None on a plain LAN (switch.kind: lan), which runs nothing."""

    def __init__(self, inv: Inventory, log):
        self.inv, self.log = inv, log
        self.bfrt = None
        self.ctl = None
        self.program: str | None = None  # the P4 program the switch runs for this run
        self.system: str | None = None  # the system it last ran for
        self.emulator_args: list[str] = []  # and the arguments its emulator was started with

    def use(self, system: str, k: float, settings) -> None:
        """The switch runs `system`'s P4 program (a server-side system's: the forwarder),
        and self.ctl is its controller with `settings`: at set-up the first point's, then
        another whenever a point's system needs it (points are planned system by system,
        so a run of five systems restarts the switch four times per repetition; the
        server-side systems share the forwarder, which stays)."""
        if not self.inv.switch.programmable:  # a plain LAN (only server-side systems: run.py)
            if self.system is None:
                self.log(f"network {self.inv.switch.name} is a plain LAN: no switch program to run")
            self.system = system
            return
        program = get_system(system).switch_program
        args = get_system(system).emulator_args(k) if self.inv.switch.kind == "emulated" else []
        # the same program started with other arguments (R2P2's pass time is k x 1 us, and
        # an automatic dilation chooses k after the set-up started the first program)
        if self.program == program and self.ctl is not None and args == self.emulator_args:
            self.system = system
            return
        from switch.control.registry import controller_class

        from .. import switchd

        if self.program is None and not args and switchd.status(self.inv).program in (program, None):
            # a healthy switch that runs this program (or is down, or cannot tell) is kept
            self.bfrt = switch_session(self.inv, self.log, program)
        else:
            self.close()
            self.log(f"switch {self.inv.switch.name}: starting the {program} program")
            switchd.start(self.inv, program, restart=True, log=self.log, emulator_args=args)
            self.bfrt = switchd.connect(self.inv, program=program, bind=True, client_id=1)
        self.ctl = controller_class(program)(self.bfrt, self.inv, settings)
        waited = self.ctl.bring_up_ports()
        self.program, self.system, self.emulator_args = program, system, args
        self.log(f"switch runs {program}; ports up ({waited:.1f} s)")

    def forget(self) -> str | None:
        """Drop the session (a retry reconnects: `use` again); the system it ran for."""
        system = self.system
        self.close()
        self.program, self.system, self.ctl = None, None, None
        return system

    def await_tokens(self, expected: int, timeout: float = 15.0) -> None:
        """Wait until the switch holds `expected` tokens over its slices: every worker
        thread has issued its quota (readiness probed, not slept for)."""
        deadline = time.monotonic() + timeout
        seen: dict[int, int] = {}
        while True:
            seen = self.ctl.balances()
            if sum(v for v in seen.values() if v > 0) >= expected:
                return
            if time.monotonic() > deadline:
                raise PointFailed(
                    f"the workers' tokens did not reach the switch in {timeout:g} s: {sum(seen.values())} "
                    f"of {expected} waiting (balance per slice {seen}); see the workers' worker.log"
                )
            time.sleep(0.01)

    def bfrt_sha(self) -> str | None:
        try:
            # The bf-rt.json the switch serves: the program's identity as the control plane sees it.
            return hashlib.sha256(json.dumps(self.bfrt.info.p4_json, sort_keys=True).encode()).hexdigest()
        except AttributeError:
            return None

    def close(self) -> None:
        if self.bfrt is not None:
            try:
                self.bfrt.close()
            except Exception as e:  # noqa: BLE001 - closing a session that is already gone
                self.log(f"closing the switch session: {one_line(e)}")
            self.bfrt = None
