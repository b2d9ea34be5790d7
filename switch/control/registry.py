"""Which controller programs which P4 program, by the program's name
(switch/p4/<name>.p4, what `rainmaker switch start --program` runs).

    ctl = controller_class(name)(client, inventory, settings_from(name, params))
    ctl = for_switch(client, inventory, settings)     # by the program the switch serves

Rain takes Settings; the baselines take BaselineSettings. Every class offers the same
calls: bring_up_ports(), program(workers), register_worker(reg), deregister_worker(id),
reset(), snapshot(), links(), links_between(), ensure_session(), workers.
"""

from __future__ import annotations

from typing import Any

from switch.bfrt.client import Client

from .base import SwitchController
from .baseline import BaselineSettings
from .controller import RainController
from .draconis import DraconisController
from .errors import ControllerError
from .ipv4_forward import Ipv4ForwardController
from .pallas import PallasController
from .r2p2 import R2p2Controller
from .racksched import RackSchedController
from .settings import Settings

CONTROLLERS: dict[str, type[SwitchController]] = {
    c.PROGRAM: c
    for c in (
        RainController,
        R2p2Controller,
        RackSchedController,
        DraconisController,
        PallasController,
        Ipv4ForwardController,
    )
}


def controller_class(program: str) -> type[SwitchController]:
    """The controller of a program, or a ControllerError naming the known ones."""
    cls = CONTROLLERS.get(program)
    if cls is None:
        raise ControllerError(
            f"no controller for the P4 program {program!r}",
            subject=program,
            fix=f"known programs: {', '.join(CONTROLLERS)}",
        )
    return cls


def settings_from(program: str, data: Any = None) -> Settings | BaselineSettings:
    """A program's settings from plain data (None: its defaults): Rain's `switch:`
    block, or a baseline's {jbsq_n, k, max_passes, queue_capacity, pools}."""
    controller_class(program)
    if program == RainController.PROGRAM:
        return Settings() if data is None else Settings.from_dict(data)
    return BaselineSettings() if data is None else BaselineSettings.from_dict(data)


def for_switch(client: Client, inventory: Any, settings: Settings | BaselineSettings | None = None) -> SwitchController:
    """The controller of the program the switch serves (client.p4_name)."""
    cls = controller_class(client.p4_name)
    want = Settings if cls is RainController else BaselineSettings
    if settings is not None and not isinstance(settings, want):
        raise ControllerError(
            f"the switch runs {client.p4_name!r}, whose controller takes {want.__name__}, not {type(settings).__name__}",
            subject="settings",
            fix=f"build them with settings_from({client.p4_name!r}, ...)",
        )
    return cls(client, inventory, settings)
