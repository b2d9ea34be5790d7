"""What a worker server and a client host tell the controller when they join.

A `WorkerRegistration` is one rain-worker process: its worker threads' global ids,
the slice of each, its data NIC's MAC and IP, and its RDMA ring (one region per
thread, one QP per thread, one rkey per server). `from_json` reads the registration
file rain-worker writes with --registration (hosts/dpdk/worker/report.c).

A `ClientRegistration` is one client host: the host id that forms the high byte of
its client_ids (rain-client --client-id) and the IP address responses go back to.

Field checks live here; checks against the switch (host cabled, slice configured,
ring reachable by the RDMA engine) are the controller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import addr
from .constants import MAX_CLIENT_HOSTS, MAX_WORKERS, QPN_MASK, RAIN_UDP_PORT, WRITE_OPCODE
from .errors import ControllerError

TRANSPORTS = ("emulated", "ibverbs")


def _uint(v: Any, bits: int, what: str, subject: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << bits):
        raise ControllerError(f"{what}: {v!r} is not an unsigned {bits}-bit integer", subject=subject)
    return v


@dataclass(frozen=True)
class Ring:
    """A worker server's RDMA ring: per worker thread its region's VA and its QPN."""

    va: Mapping[int, int]  # worker id -> VA of that thread's ring region
    qpn: Mapping[int, int]  # worker id -> its QP number (24 bits)
    size: int  # bytes of each thread's region (slots * slot_size)
    slot_size: int
    slots: int
    rkey: int
    psn: int = 0  # initial PSN of every QP
    # Who applies the WRITEs: the worker itself (emulated) or its NIC (ibverbs); and the
    # QP type, which decides the opcode the switch sends. "rc" is what a registration
    # without the field meant (the switch sent RC WRITE ONLY before qp_type existed).
    transport: str = "emulated"
    qp_type: str = "rc"

    def __post_init__(self):
        object.__setattr__(self, "va", dict(self.va))
        object.__setattr__(self, "qpn", dict(self.qpn))


@dataclass(frozen=True)
class WorkerRegistration:
    host: str  # inventory host name
    worker_ids: tuple[int, ...]
    mac: str
    ip: str
    slices: Mapping[int, int]  # worker id -> slice
    udp_port: int = RAIN_UDP_PORT
    ring: Ring | None = None
    switch_mac: str | None = None  # what the worker was told the switch is (checked if given)
    switch_ip: str | None = None
    # The token quota its threads start with (rain-worker's "quota"): a thread holds at
    # most that many tasks dispatched but not yet run, each pinning its descriptor's
    # ring slot until it runs. None: not reported.
    quota: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "worker_ids", tuple(self.worker_ids))
        object.__setattr__(self, "slices", dict(self.slices))
        self._validate()

    @property
    def where(self) -> str:
        return f"worker registration of {self.host}"

    def slice_of(self, wid: int) -> int:
        return self.slices[wid]

    @property
    def mac_int(self) -> int:
        return addr.mac(self.mac, f"{self.where}: mac")

    @property
    def ip_int(self) -> int:
        return addr.ipv4(self.ip, f"{self.where}: ip")

    @classmethod
    def from_json(
        cls, host: str, data: Mapping[str, Any], *, slices: Mapping[int, int] | int | None = None
    ) -> WorkerRegistration:
        """From rain-worker's --registration JSON. `slices` overrides its one "slice" for
        every thread (an int) or per worker id (a mapping)."""
        try:
            ids = [int(w) for w in data["worker_ids"]]
            ring = data.get("ring")
            if slices is None:
                slices = int(data.get("slice", 0))
            per = {w: slices for w in ids} if isinstance(slices, int) else {int(k): int(v) for k, v in slices.items()}
            r = None
            if ring:
                r = Ring(
                    va=dict(zip(ids, (int(v) for v in ring["va"]))),
                    qpn=dict(zip(ids, (int(q) for q in ring["qpn"]))),
                    size=int(ring.get("region_size", ring.get("size"))),
                    slot_size=int(ring["slot_size"]),
                    slots=int(ring["slots"]),
                    rkey=int(ring["rkey"]),
                    psn=int(ring.get("psn", 0)),
                    transport=ring.get("transport", "emulated"),
                    qp_type=ring.get("qp_type", "rc"),
                )
            sw = data.get("switch") or {}
            return cls(
                host=host,
                worker_ids=tuple(ids),
                mac=data["mac"],
                ip=data["ip"],
                slices=per,
                udp_port=int(data.get("udp_port", RAIN_UDP_PORT)),
                ring=r,
                switch_mac=sw.get("mac"),
                switch_ip=sw.get("ip"),
                quota=int(data["quota"]) if data.get("quota") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ControllerError(
                f"worker registration of {host}: malformed ({type(e).__name__}: {e})",
                subject=host,
                fix="pass the JSON rain-worker wrote with --registration",
            ) from None

    def _validate(self) -> None:
        w = self.where
        if not self.worker_ids:
            raise ControllerError(f"{w}: no worker ids", subject=self.host)
        for wid in self.worker_ids:
            if isinstance(wid, bool) or not isinstance(wid, int) or not 0 <= wid < MAX_WORKERS:
                raise ControllerError(
                    f"{w}: worker id {wid!r} is not in 0..{MAX_WORKERS - 1}",
                    subject=wid,
                    fix=f"the program knows MAX_WORKERS = {MAX_WORKERS} workers: lower rain-worker's --worker-base",
                )
        dup = sorted({x for x in self.worker_ids if self.worker_ids.count(x) > 1})
        if dup:
            raise ControllerError(f"{w}: worker id {dup[0]} listed twice", subject=dup[0])
        missing = [x for x in self.worker_ids if x not in self.slices]
        if missing:
            raise ControllerError(
                f"{w}: no slice for worker(s) {', '.join(map(str, missing))}",
                subject=missing[0],
                fix="give a slice for every worker id",
            )
        extra = sorted(set(self.slices) - set(self.worker_ids))
        if extra:
            raise ControllerError(
                f"{w}: slices given for unknown worker(s) {', '.join(map(str, extra))}", subject=extra[0]
            )
        _ = self.mac_int, self.ip_int
        if self.udp_port != RAIN_UDP_PORT:
            raise ControllerError(
                f"{w}: the worker listens on UDP port {self.udp_port}, but the switch dispatches "
                f"to {RAIN_UDP_PORT} (RAIN_UDP_PORT)",
                subject=self.host,
                fix=f"run the worker on UDP port {RAIN_UDP_PORT}",
            )
        if self.switch_mac is not None:
            addr.mac(self.switch_mac, f"{w}: switch.mac")
        if self.switch_ip is not None:
            addr.ipv4(self.switch_ip, f"{w}: switch.ip")
        r = self.ring
        if r is None:
            return
        for name in ("va", "qpn"):
            got = getattr(r, name)
            lost = [x for x in self.worker_ids if x not in got]
            if lost or set(got) - set(self.worker_ids):
                raise ControllerError(
                    f"{w}: ring.{name} must give one value per worker id ({len(self.worker_ids)}), got {len(got)}",
                    subject=self.host,
                )
        for wid in self.worker_ids:
            _uint(r.va[wid], 64, f"{w}: ring.va of worker {wid}", wid)
            if not 0 < _uint(r.qpn[wid], 24, f"{w}: ring.qpn of worker {wid}", wid) <= QPN_MASK:
                raise ControllerError(f"{w}: ring.qpn of worker {wid} is 0 (QP 0 is reserved)", subject=wid)
        shared = sorted({q for q in r.qpn.values() if list(r.qpn.values()).count(q) > 1})
        if shared:
            # The switch keeps one PSN per worker id (rdma_writer.p4): workers sharing a
            # QP would each count its PSNs from the same start and the NIC drop WRITEs.
            raise ControllerError(
                f"{w}: workers share QP(s) {', '.join(hex(q) for q in shared)}; the switch keeps one PSN per "
                "worker, so each worker needs its own QP",
                subject=self.host,
                fix="give each worker thread its own QP (rain-worker does)",
            )
        _uint(r.rkey, 32, f"{w}: ring.rkey", self.host)
        _uint(r.psn, 24, f"{w}: ring.psn", self.host)
        if r.transport not in TRANSPORTS:
            raise ControllerError(
                f"{w}: ring.transport {r.transport!r} is not one of {', '.join(TRANSPORTS)}",
                subject=self.host,
                fix="pass the JSON rain-worker wrote with --registration",
            )
        if r.qp_type not in WRITE_OPCODE:
            raise ControllerError(
                f"{w}: ring.qp_type {r.qp_type!r} is not one of {', '.join(WRITE_OPCODE)}",
                subject=self.host,
                fix="start rain-worker with --qp-type uc or rc",
            )
        for name in ("size", "slot_size", "slots"):
            v = getattr(r, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ControllerError(f"{w}: ring.{name} {v!r} is not a positive integer", subject=self.host)
        if r.size < r.slots * r.slot_size:
            raise ControllerError(
                f"{w}: ring.size {r.size} is smaller than slots x slot_size ({r.slots} x {r.slot_size})",
                subject=self.host,
            )


@dataclass(frozen=True)
class ClientRegistration:
    host: str  # inventory host name
    host_id: int  # high byte of its client_ids (rain-client --client-id)
    ip: str

    def __post_init__(self):
        if (
            isinstance(self.host_id, bool)
            or not isinstance(self.host_id, int)
            or not 0 <= self.host_id < MAX_CLIENT_HOSTS
        ):
            raise ControllerError(
                f"client {self.host}: host id {self.host_id!r} is not in 0..{MAX_CLIENT_HOSTS - 1}",
                subject=self.host,
                fix=f"the program knows MAX_CLIENT_HOSTS = {MAX_CLIENT_HOSTS}",
            )
        addr.ipv4(self.ip, f"client {self.host}: ip")

    @property
    def ip_int(self) -> int:
        return addr.ipv4(self.ip, f"client {self.host}: ip")
