"""What the controller is asked to set up: slices, telemetry, the switch's RDMA identity.

    settings = Settings(
        slices={0: SliceSettings(task_types=[0, 1]),                 # GET-like tasks
                1: SliceSettings(task_types=[2], share=0.25, ring_slots=64)},   # SCAN-like
        int_enabled=True,
        service_mac="02:00:00:00:00:fe", service_ip="10.10.1.254")

The 128K queue entries (QUEUE_ENTRIES) are carved into one contiguous region per
slice, in slice order: a slice takes `entries`, or `share` of all entries, and the
slices that give neither split what is left equally. A slice's `ring_slots` is the
number of RDMA ring slots its large tasks cycle through (the switch's write offset
wraps there): None takes the smallest ring of the slice's workers, 0 turns
pre-writing off (a large task then waits only for a token, it is never queued).
Unmapped task types go to slice 0 (the P4's default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import addr
from .constants import MAX_SLICES, QUEUE_ENTRIES, TASK_TYPES
from .errors import ControllerError


@dataclass(frozen=True)
class SliceSettings:
    task_types: tuple[int, ...] = ()
    entries: int | None = None  # region size in queue entries
    share: float | None = None  # or: this fraction of QUEUE_ENTRIES
    ring_slots: int | None = None  # RDMA ring slots; None: the smallest of its workers'; 0: no pre-writing
    # Ring slots kept free for descriptors a worker holds dispatched but not yet run: a
    # large task queues only while fewer than ring_slots - ring_hold tasks wait. None:
    # the largest token quota the slice's workers registered (raise it to their quota
    # cap if the adaptive scheduler raises quotas).
    ring_hold: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "task_types", tuple(self.task_types))


@dataclass(frozen=True)
class Region:
    """A slice's entries [first, last] of the queue arrays."""

    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class Settings:
    slices: Mapping[int, SliceSettings] = field(default_factory=lambda: {0: SliceSettings()})
    int_enabled: bool = True
    # The switch's source MAC and IP in RoCEv2 WRITEs; None: the inventory's
    # switch.service_mac/service_ip (what workers get as --switch-mac/--switch-ip).
    service_mac: str | None = None
    service_ip: str | None = None
    port_up_timeout_s: float = 30.0

    def __post_init__(self):
        object.__setattr__(self, "slices", {s: self.slices[s] for s in sorted(self.slices)})
        self._validate()

    # -- derived ---------------------------------------------------------------------
    def regions(self) -> dict[int, Region]:
        """slice -> its region of the queue entries (contiguous, in slice order)."""
        sizes: dict[int, int] = {}
        for s, sl in self.slices.items():
            if sl.entries is not None:
                sizes[s] = sl.entries
            elif sl.share is not None:
                sizes[s] = int(sl.share * QUEUE_ENTRIES)
        taken = sum(sizes.values())
        rest = [s for s in self.slices if s not in sizes]
        if taken > QUEUE_ENTRIES:
            raise ControllerError(
                f"settings.slices: the regions ask for {taken} queue entries; the switch has {QUEUE_ENTRIES}",
                subject="slices",
                fix="lower the slices' entries or shares so they sum to at most QUEUE_ENTRIES",
            )
        if rest:
            each = (QUEUE_ENTRIES - taken) // len(rest)
            if each < 1:
                raise ControllerError(
                    f"settings.slices: no queue entries left for slice(s) {', '.join(map(str, rest))} "
                    f"(the others take {taken} of {QUEUE_ENTRIES})",
                    subject="slices",
                    fix="give those slices entries, or lower the others' shares",
                )
            for s in rest:
                sizes[s] = each
        out, first = {}, 0
        for s in self.slices:
            out[s] = Region(first, first + sizes[s] - 1)
            first += sizes[s]
        return out

    def slice_of_type(self) -> dict[int, int]:
        """task type -> slice."""
        return {t: s for s, sl in self.slices.items() for t in sl.task_types}

    @property
    def service_mac_int(self) -> int | None:
        return None if self.service_mac is None else addr.mac(self.service_mac, "settings.service_mac")

    @property
    def service_ip_int(self) -> int | None:
        return None if self.service_ip is None else addr.ipv4(self.service_ip, "settings.service_ip")

    # -- input -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Settings:
        """From plain data (an experiment spec's `switch:` block); keys as the fields."""
        if not isinstance(d, Mapping):
            raise ControllerError("settings: expected a mapping", subject="settings")
        unknown = set(d) - {"slices", "int_enabled", "service_mac", "service_ip", "port_up_timeout_s"}
        if unknown:
            raise ControllerError(
                f"settings: unknown key(s) {', '.join(sorted(unknown))}",
                subject="settings",
                fix="use slices, int_enabled, service_mac, service_ip, port_up_timeout_s",
            )
        kw = dict(d)
        if "slices" in d:
            slices = {}
            for s, sl in (d["slices"] or {}).items():
                sl = sl or {}
                bad = set(sl) - {"task_types", "entries", "share", "ring_slots", "ring_hold"}
                if bad:
                    raise ControllerError(
                        f"settings.slices.{s}: unknown key(s) {', '.join(sorted(bad))}",
                        subject=f"slices.{s}",
                        fix="use task_types, entries, share, ring_slots, ring_hold",
                    )
                try:
                    slices[int(s)] = SliceSettings(**sl)
                except (TypeError, ValueError):
                    raise ControllerError(f"settings.slices: {s!r} is not a slice number", subject="slices") from None
            kw["slices"] = slices
        return cls(**kw)

    def _validate(self) -> None:
        if not self.slices:
            raise ControllerError(
                "settings.slices is empty",
                subject="slices",
                fix="configure at least slice 0 (unmapped task types go there)",
            )
        seen: dict[int, int] = {}
        for s, sl in self.slices.items():
            where = f"settings.slices.{s}"
            if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < MAX_SLICES:
                raise ControllerError(
                    f"settings.slices: slice {s!r} is not in 0..{MAX_SLICES - 1}",
                    subject=s,
                    fix=f"the program has MAX_SLICES = {MAX_SLICES} slices",
                )
            if not isinstance(sl, SliceSettings):
                raise ControllerError(f"{where}: expected SliceSettings, got {type(sl).__name__}", subject=s)
            for t in sl.task_types:
                if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TASK_TYPES:
                    raise ControllerError(
                        f"{where}.task_types: {t!r} is not a task type (0..{TASK_TYPES - 1})", subject=s
                    )
                if t in seen:
                    raise ControllerError(
                        f"{where}.task_types: task type {t} is also in slice {seen[t]}",
                        subject=s,
                        fix="map each task type to one slice",
                    )
                seen[t] = s
            if sl.entries is not None and sl.share is not None:
                raise ControllerError(f"{where}: give entries or share, not both", subject=s)
            if sl.entries is not None and (
                not isinstance(sl.entries, int) or isinstance(sl.entries, bool) or not 1 <= sl.entries <= QUEUE_ENTRIES
            ):
                raise ControllerError(f"{where}.entries: {sl.entries!r} is not in 1..{QUEUE_ENTRIES}", subject=s)
            if sl.share is not None and (
                not isinstance(sl.share, (int, float))
                or isinstance(sl.share, bool)
                or not 0 < sl.share <= 1
                or int(sl.share * QUEUE_ENTRIES) < 1
            ):
                raise ControllerError(f"{where}.share: {sl.share!r} is not a fraction in (0, 1]", subject=s)
            if sl.ring_slots is not None and (
                not isinstance(sl.ring_slots, int) or isinstance(sl.ring_slots, bool) or sl.ring_slots < 0
            ):
                raise ControllerError(
                    f"{where}.ring_slots: {sl.ring_slots!r} is not a slot count",
                    subject=s,
                    fix="give a positive number of slots, 0 for no pre-writing, or leave it out",
                )
            if sl.ring_hold is not None and (
                not isinstance(sl.ring_hold, int) or isinstance(sl.ring_hold, bool) or sl.ring_hold < 0
            ):
                raise ControllerError(
                    f"{where}.ring_hold: {sl.ring_hold!r} is not a slot count",
                    subject=s,
                    fix="give the slots to keep free (0 or more), or leave it out",
                )
        if not isinstance(self.int_enabled, bool):
            raise ControllerError(
                f"settings.int_enabled: {self.int_enabled!r} is not true or false", subject="int_enabled"
            )
        if (self.service_mac is None) != (self.service_ip is None):
            raise ControllerError(
                "settings: give both service_mac and service_ip (the switch's RoCEv2 source), or neither",
                subject="service_mac",
            )
        _ = self.service_mac_int, self.service_ip_int
        if not isinstance(self.port_up_timeout_s, (int, float)) or self.port_up_timeout_s <= 0:
            raise ControllerError(
                f"settings.port_up_timeout_s: {self.port_up_timeout_s!r} is not a positive number of seconds",
                subject="port_up_timeout_s",
            )
        self.regions()
