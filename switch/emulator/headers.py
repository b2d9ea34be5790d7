"""Headers, metadata and constants of the Rain program (switch/p4/headers.p4, types.p4,
sizes.p4) as the emulator's data plane holds them.

One `Headers` and one `IngressMd` object are reused for every packet (no per-packet
allocation): the parser fills them, the controls read and write their fields, the
deparser writes them back into the frame. Field names follow the P4 (`hdr.rain.kind`
is `hdr.kind`, `hdr.ipv4.dst_addr` is `hdr.ip_dst`; MAC addresses are 6-byte `bytes`,
everything else an int of the P4 width). tests/unit/test_p4_emulator_contract.py holds
the constants here to switch/p4 (they are not read from it at run time: the emulator is
deployed without the P4 sources).
"""

from __future__ import annotations

# ---------------------------------------------------------------- sizes.p4
QUEUE_ENTRIES = 131072
MAX_SLICES = 16
SLICE_BITS = 4  # log2(MAX_SLICES)
MAX_WORKERS = 1024
MAX_CLIENT_HOSTS = 256
FORWARD_ENTRIES = 1024
TASK_TYPES = 256
RDMA_SLOT_SHIFT = 11
LARGE_UDP_MIN = 48  # sizes.p4: UDP 8 + rain 32 + >= 4 payload bytes + iCRC pad 4
LARGE_UDP_MAX = 2092  # ... + at most one ring slot (2^RDMA_SLOT_SHIFT) of payload
EVENT_COUNTERS = 32

# ---------------------------------------------------------------- types.p4
ETHERTYPE_IPV4 = 0x0800
IP_PROTO_UDP = 17
RAIN_UDP_PORT = 21057
ROCE_UDP_PORT = 4791
ROCE_SRC_PORT = 49152
RAIN_VERSION = 1

KIND_TASK = 1
KIND_DISPATCH = 2
KIND_TOKEN = 3
KIND_RESPONSE = 4
KIND_REJECT = 5
KIND_PULL = 6
KIND_EMPTY = 7
KIND_REPORT = 8
KIND_FETCH = 9
KIND_FETCH_REPLY = 10
KIND_MAX = 10  # kinds above it (and 0) are no message of the protocol

FLAG_LARGE = 0x01
FLAG_DESC = 0x02
FLAG_INT = 0x04

RAIN_HDR_BYTES = 32
ROCE_HDR_BYTES = 28
ICRC_BYTES = 4
UDP_HDR_BYTES = 8
ROCE_OP_RC_WRITE_ONLY = 0x0A

BALANCE_FULL = -2147483648
BAL_NONNEG = 0  # the top two bits of what the balance actions return (bidir_queue.p4)
BAL_FULL = 2
BAL_NEG = 3

QOP_NONE = 0
QOP_TASK_MATCHED = 1
QOP_TASK_QUEUED = 2
QOP_TOKEN_MATCHED = 3
QOP_TOKEN_QUEUED = 4
QOP_FULL = 5

# Every ingress packet counts once, under its outcome (types.p4): 0, 1 and 9 are unused.
EV_DISPATCH_DIRECT = 2
EV_DISPATCH_QUEUED = 3
EV_TASK_QUEUED = 4
EV_TOKEN_QUEUED = 5
EV_TASK_REJECTED = 6
EV_TOKEN_DROPPED = 7
EV_PREWRITE = 8
EV_NO_WORKER = 10
EV_LARGE_REJECTED = 11
EV_FORWARDED = 12
EV_NO_ROUTE = 13
EV_BAD_RAIN = 14
EV_PARSER_ERROR = 15

EVENT_NAMES = {v: k for k, v in globals().items() if k.startswith("EV_")}

# ---------------------------------------------------------------- wire layout
ETH_BYTES = 14
IPV4_BYTES = 20  # the parser takes IPv4 further only with ihl == 5
BTH_BYTES = 12
RETH_BYTES = 16
ETH_OFF = 0
IPV4_OFF = ETH_BYTES
UDP_OFF = IPV4_OFF + IPV4_BYTES
RAIN_OFF = UDP_OFF + UDP_HDR_BYTES

# Parser errors (ig_prsr_md.parser_err): a header ran past the end of the frame.
PARSER_ERR_NONE = 0
PARSER_ERR_TRUNCATED = 1


class Headers:
    """headers_t: validity bits and the header fields the controls read or write, plus
    where the payload starts.

    IPv4 fields no control writes (version/ihl, identification, flags/frag offset,
    protocol) are kept only in `ipv4`, the tuple the parser read (ethernet's three
    fields then IPv4's ten, in wire order, which also gives the deparsers the old
    values for the checksum update); the fields controls write (diffserv as `ip_tos`,
    ...) have their own attributes. `bridged_*` is bridged_md_h (it travels
    beside the frame from ingress to egress, never on a wire); `bth_*`/`reth_*` are
    built only by the egress (rdma_writer).
    """

    __slots__ = (
        "eth_valid",
        "eth_dst",
        "eth_src",
        "ether_type",
        "ipv4_valid",
        "ipv4",
        "ip_total_len",
        "ip_tos",
        "ip_ttl",
        "ip_src",
        "ip_dst",
        "udp_valid",
        "udp_src_port",
        "udp_dst_port",
        "udp_length",
        "udp_checksum",
        "rain_valid",
        "version",
        "kind",
        "flags",
        "task_type",
        "slice",
        "client_id",
        "request_id",
        "worker_id",
        "report",
        "data",
        "int_qdelay_ns",
        "int_qlen",
        "bth_valid",
        "bth_opcode",
        "bth_se",
        "bth_migreq",
        "bth_pad_count",
        "bth_tver",
        "bth_pkey",
        "bth_resv8",
        "bth_dst_qp",
        "bth_ack_req",
        "bth_resv7",
        "bth_psn",
        "reth_valid",
        "reth_va_hi",
        "reth_va_lo",
        "reth_rkey",
        "reth_dma_len",
        "bridged_valid",
        "bridged_prewrite",
        "bridged_slot",
        "bridged_desc_len",
        "payload_off",
    )

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)
        self.eth_dst = self.eth_src = bytes(6)
        self.data = bytes(8)  # data0..data7, data0 first

    def __repr__(self) -> str:
        return "Headers(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


class IngressMd:
    """ingress_md_t plus the intrinsic metadata the Rain controls use.

    From TNA: `ingress_port` (ig_intr_md), `parser_err` and `global_tstamp`
    (ig_prsr_md; the emulator keeps its low 32 bits, `now`), `drop_ctl` (ig_dprsr_md),
    `ucast_egress_port` (ig_tm_md; None = not set) and `mcast_grp_a` (ig_tm_md; 0 = none).
    """

    __slots__ = (
        "event",
        "slice",
        "queue_op",
        "bad_length",
        "balance",
        "neg_cap",
        "neg_large_cap",
        "region_first",
        "region_last",
        "qidx",
        "now",
        "entry_tstamp",
        "entry_meta",
        "owner",
        "peer_worker",
        "last_slot",
        "mgid",
        "stamp_int",
        "ingress_port",
        "parser_err",
        "drop_ctl",
        "ucast_egress_port",
        "mcast_grp_a",
    )

    def __init__(self):
        self.reset_rain()
        self.event = EV_NO_ROUTE
        self.ingress_port = self.parser_err = self.drop_ctl = self.mcast_grp_a = 0
        self.ucast_egress_port = None

    def reset_rain(self) -> None:
        """Every ingress_md_t field to its start value (the parser's start state sets
        event, queue_op, bad_length, stamp_int and mgid; bf-p4c zero-initialises the
        rest)."""
        self.event = EV_NO_ROUTE
        self.slice = self.queue_op = self.bad_length = self.balance = self.neg_cap = self.neg_large_cap = 0
        self.region_first = self.region_last = self.qidx = self.now = self.entry_tstamp = self.entry_meta = 0
        self.owner = self.peer_worker = self.last_slot = self.mgid = 0
        self.stamp_int = False

    def __repr__(self) -> str:
        return "IngressMd(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


class EgressMd:
    """egress_md_t plus the egress intrinsics RdmaWriter uses (egress_rid, egress_port, drop_ctl)."""

    __slots__ = ("offset", "egress_rid", "egress_port", "drop_ctl")

    def __init__(self):
        self.offset = self.egress_rid = self.egress_port = self.drop_ctl = 0


def wrap32(value: int) -> int:
    """bit<32> arithmetic."""
    return value & 0xFFFFFFFF


def wrap_s32(value: int) -> int:
    """int<32> arithmetic (two's complement)."""
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000
