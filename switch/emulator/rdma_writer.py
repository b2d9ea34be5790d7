"""RdmaWriter (switch/p4/rdma_writer.p4): the egress half of the RDMA engine. Each
multicast replica of a pre-written task becomes one RoCEv2 WRITE ONLY to one worker,
keyed on the replica's egress rid (= the worker id)."""

from __future__ import annotations

from .headers import MAX_WORKERS, RAIN_HDR_BYTES, RDMA_SLOT_SHIFT, ROCE_HDR_BYTES, ROCE_SRC_PORT, ROCE_UDP_PORT
from .schema import Action, Counter, Key, Param, Register, Table

BUILD_WRITE = Table(
    "pipe.SwitchEgress.rdma_writer.build_write",
    keys=[Key("eg_intr_md.egress_rid", 16)],
    actions=[
        Action(
            "SwitchEgress.rdma_writer.make_write",
            [
                Param("smac", 48),
                Param("dmac", 48),
                Param("sip", 32),
                Param("dip", 32),
                Param("tos", 8),
                Param("opcode", 8),
                Param("qpn", 24),
                Param("rkey", 32),
                Param("va_hi", 32),
                Param("va_lo", 32),
            ],
        ),
        Action("SwitchEgress.rdma_writer.skip_replica"),
    ],
    size=MAX_WORKERS,
    default_action="skip_replica",
)

PSN = Register("pipe.SwitchEgress.rdma_writer.psn", width=32, size=MAX_WORKERS)
WRITES = Counter("pipe.SwitchEgress.rdma_writer.writes", size=MAX_WORKERS)

TABLES = (BUILD_WRITE,)
REGISTERS = (PSN,)
COUNTERS = (WRITES,)

_RID_MASK = MAX_WORKERS - 1
_SHRINK = RAIN_HDR_BYTES - ROCE_HDR_BYTES


class RdmaWriter:
    """control RdmaWriter: a multicast replica of a pre-written task becomes one RoCEv2
    WRITE ONLY to the worker whose id is the replica's rid."""

    def __init__(self, store):
        self.table = store.table(BUILD_WRITE.name)
        self._find = self.table.finder
        self.psn = store.register(PSN.name).values
        ctr = store.counter(WRITES.name)
        self.writes_packets, self.writes_bytes = ctr.packets, ctr.bytes

    def next_psn(self, rid: int) -> int:
        i = rid & _RID_MASK
        value = self.psn[i]
        self.psn[i] = (value + 1) & 0xFFFFFFFF
        return value

    @staticmethod
    def make_write(hdr, p) -> None:
        hdr.eth_src = p["smac"].to_bytes(6, "big")
        hdr.eth_dst = p["dmac"].to_bytes(6, "big")
        hdr.ip_src = p["sip"]
        hdr.ip_dst = p["dip"]
        hdr.ip_tos = p["tos"]
        hdr.ip_total_len = (hdr.ip_total_len - _SHRINK) & 0xFFFF
        hdr.udp_length = (hdr.udp_length - _SHRINK) & 0xFFFF
        hdr.udp_src_port = ROCE_SRC_PORT
        hdr.udp_dst_port = ROCE_UDP_PORT
        hdr.udp_checksum = 0
        hdr.rain_valid = False
        hdr.bth_valid = True
        hdr.bth_opcode = p["opcode"]
        hdr.bth_se = 0
        hdr.bth_migreq = 1
        hdr.bth_pad_count = 0
        hdr.bth_tver = 0
        hdr.bth_pkey = 0xFFFF
        hdr.bth_resv8 = 0
        hdr.bth_dst_qp = p["qpn"]
        hdr.bth_ack_req = 0
        hdr.bth_resv7 = 0
        hdr.bth_psn = 0
        hdr.reth_valid = True
        hdr.reth_va_hi = p["va_hi"]
        hdr.reth_va_lo = p["va_lo"]
        hdr.reth_rkey = p["rkey"]
        hdr.reth_dma_len = hdr.bridged_desc_len

    def apply(self, hdr, eg_md, nbytes: int) -> None:
        if hdr.bridged_prewrite == 1:
            eg_md.offset = (hdr.bridged_slot << RDMA_SLOT_SHIFT) & 0xFFFFFFFF
            rid = eg_md.egress_rid
            entry = self._find((rid,))
            call = self.table.default if entry is None else entry.call
            if call.action == "make_write":
                self.make_write(hdr, call.params)
            else:  # skip_replica
                eg_md.drop_ctl = 1
            if entry is not None:  # .hit (even if the entry's action is skip_replica)
                hdr.reth_va_lo = (hdr.reth_va_lo + eg_md.offset) & 0xFFFFFFFF
                hdr.bth_psn = self.next_psn(rid) & 0xFFFFFF
                i = rid & _RID_MASK
                self.writes_packets[i] += 1
                self.writes_bytes[i] += nbytes
