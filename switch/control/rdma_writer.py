"""RdmaWriter (switch/p4/rdma_writer.p4): per worker (the replica's rid) what a RoCEv2
WRITE ONLY to its ring needs: the switch's source MAC/IP, the worker's MAC/IP, the
opcode (UC or RC WRITE ONLY, as its QP's type), QPN, rkey and the ring's VA split in
halves; its next PSN in a register; a counter of the WRITEs sent to it.

The writer adds slot << RDMA_SLOT_SHIFT to the VA's low 32 bits only, so a ring must
not cross a 4 GiB boundary, and its slots must be exactly 2^RDMA_SLOT_SHIFT bytes:
`check_ring` refuses anything else."""

from __future__ import annotations

from dataclasses import dataclass

from switch.bfrt.client import Client

from . import _cells
from .addr import ipv4_str, mac_str
from .constants import FOUR_GIB, MAX_WORKERS, RDMA_SLOT_BYTES, RDMA_SLOT_SHIFT, ROCE_DSCP, WRITE_OPCODE
from .errors import ControllerError


@dataclass(frozen=True)
class WriteTarget:
    """The RDMA state of one worker, as build_write holds it."""

    worker: int
    smac: int
    sip: int
    dmac: int
    dip: int
    qpn: int
    rkey: int
    va: int
    psn: int = 0  # initial PSN
    # The worker's QP type: UC takes UC WRITE ONLY (0x2A) and sends nothing back; RC
    # takes RC WRITE ONLY (0x0A) and ACKs each one (the switch drops the ACKs).
    qp_type: str = "rc"
    # IPv4 TOS of the WRITEs: the inventory's roce.dscp << 2 (the class the NICs keep
    # lossless with PFC), ECN bits 0 (Not-ECT: the switch is no DCQCN reaction point).
    tos: int = ROCE_DSCP << 2

    def __post_init__(self):
        if self.qp_type not in WRITE_OPCODE:
            raise ControllerError(
                f"worker {self.worker}: qp_type {self.qp_type!r} is not one of {', '.join(WRITE_OPCODE)}",
                subject=self.worker,
            )

    def params(self) -> dict[str, int]:
        return {
            "smac": self.smac,
            "dmac": self.dmac,
            "sip": self.sip,
            "dip": self.dip,
            "tos": self.tos,
            "opcode": WRITE_OPCODE[self.qp_type],
            "qpn": self.qpn,
            "rkey": self.rkey,
            "va_hi": self.va >> 32,
            "va_lo": self.va & 0xFFFFFFFF,
        }


def check_ring(worker: int, host: str, va: int, slot_size: int, slots: int, ring_slots: int) -> None:
    """The switch can write `ring_slots` slots of this worker's ring, or a ControllerError."""
    where = f"worker {worker} on {host}"
    if slot_size != RDMA_SLOT_BYTES:
        raise ControllerError(
            f"{where}: ring slots are {slot_size} bytes, but the switch writes slot << {RDMA_SLOT_SHIFT} "
            f"= {RDMA_SLOT_BYTES}-byte slots",
            subject=worker,
            fix=f"start rain-worker with --slot-size {RDMA_SLOT_BYTES}",
        )
    if slots < ring_slots:
        raise ControllerError(
            f"{where}: its ring has {slots} slots but its slice's ring cycles through {ring_slots}",
            subject=worker,
            fix=f"start rain-worker with --ring-slots {ring_slots} or more, or lower the slice's ring_slots",
        )
    end = (va & 0xFFFFFFFF) + slots * slot_size
    if end > FOUR_GIB:
        raise ControllerError(
            f"{where}: its ring at VA {va:#x} ({slots} x {slot_size} bytes) crosses a 4 GiB boundary; the switch "
            "adds the slot offset to the low 32 bits of the VA only",
            subject=worker,
            fix="allocate the ring aligned to its (power-of-two) size, or at least within one 4 GiB-aligned block",
        )


class RdmaWriter:
    TABLE = "pipe.SwitchEgress.rdma_writer.build_write"
    MAKE_WRITE = "SwitchEgress.rdma_writer.make_write"
    PSN = "pipe.SwitchEgress.rdma_writer.psn"
    WRITES = "pipe.SwitchEgress.rdma_writer.writes"

    def __init__(self, client: Client):
        self.client = client
        self.table = client.table(self.TABLE)
        self.psn = client.register(self.PSN)
        self.writes = client.counter(self.WRITES)

    def program(self, targets: list[WriteTarget]) -> None:
        """Exactly these workers' RDMA state, PSNs at their initial values (0 elsewhere)."""
        _cells.empty(self.table)
        batch = self.client.batch()
        for t in targets:
            batch.add(self.table, t.worker, self.MAKE_WRITE, t.params())
        batch.send()
        self.reset_psns({t.worker: t.psn for t in targets})
        self.writes.clear()

    def build_write(self, t: WriteTarget) -> None:
        """Install (or replace) one worker's RDMA state and set its initial PSN."""
        self.table.upsert(t.worker, self.MAKE_WRITE, t.params())
        _cells.write_cells(self.client, self.psn, {t.worker: t.psn})

    def remove(self, worker: int) -> None:
        """The worker gets no more WRITEs (its replicas are dropped); its PSN back to 0."""
        self.table.delete(worker)
        _cells.write_cells(self.client, self.psn, {worker: 0})

    def reset_psns(self, initial: dict[int, int]) -> None:
        """Every PSN cell to its worker's initial PSN (0 for unregistered ids): the register
        cleared in one request, then the workers' own PSNs. Writing every cell was 1,024
        entries twice a point, nine in ten of the entries a sweep point wrote."""
        self.psn.clear()
        _cells.write_cells(self.client, self.psn, {w: p for w, p in initial.items() if p and 0 <= w < MAX_WORKERS})

    def targets(self) -> dict[int, dict]:
        out = {}
        for e in self.table.entries():
            d = e.data
            out[e.key["eg_intr_md.egress_rid"]] = {
                "smac": mac_str(d["smac"]),
                "sip": ipv4_str(d["sip"]),
                "dmac": mac_str(d["dmac"]),
                "dip": ipv4_str(d["dip"]),
                "opcode": d["opcode"],
                "qpn": d["qpn"],
                "rkey": d["rkey"],
                "va": d["va_hi"] << 32 | d["va_lo"],
            }
        return out

    def clear(self) -> None:
        _cells.empty(self.table)
        self.reset_psns({})
        self.writes.clear()
