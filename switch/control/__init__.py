"""The Rain controller: programs a switch running switch/p4/rain.p4 through BFRuntime.

One module per P4 control, named as in the P4 and the emulator (forward, slice_map,
bidir_queue, rdma_engine, queue_entries, dispatch, telemetry, events, rdma_writer),
plus pre (multicast groups) and ports ($PORT); controller.py ties them together.
The baselines' controllers (r2p2.py, racksched.py, draconis.py, pallas.py) share
baseline.py; registry.py maps a program's name to its controller.
It reaches a switch only through switch.bfrt, so it runs unchanged against
bf_switchd. It imports nothing from orchestrator: the inventory is read by attribute.
"""

from .base import SwitchController
from .baseline import BaselineSettings, PoolSettings
from .controller import RainController
from .errors import ControllerError
from .registration import ClientRegistration, Ring, WorkerRegistration
from .registry import CONTROLLERS, controller_class, for_switch, settings_from
from .settings import Settings, SliceSettings
from .topology import Topology

__all__ = [
    "CONTROLLERS",
    "BaselineSettings",
    "PoolSettings",
    "SwitchController",
    "controller_class",
    "for_switch",
    "settings_from",
    "RainController",
    "ControllerError",
    "ClientRegistration",
    "Ring",
    "WorkerRegistration",
    "Settings",
    "SliceSettings",
    "Topology",
]
