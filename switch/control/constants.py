"""The sizes and constants of the Rain P4 program (switch/p4/sizes.p4, types.p4), read
from the sources so the controller cannot drift from the program it drives."""

from __future__ import annotations

from switch.p4.source import constants

P4 = constants()

QUEUE_ENTRIES: int = P4["QUEUE_ENTRIES"]
MAX_SLICES: int = P4["MAX_SLICES"]
MAX_WORKERS: int = P4["MAX_WORKERS"]
MAX_CLIENT_HOSTS: int = P4["MAX_CLIENT_HOSTS"]
FORWARD_ENTRIES: int = P4["FORWARD_ENTRIES"]
TASK_TYPES: int = P4["TASK_TYPES"]
RDMA_SLOT_SHIFT: int = P4["RDMA_SLOT_SHIFT"]
RDMA_SLOT_BYTES: int = 1 << RDMA_SLOT_SHIFT
EVENT_COUNTERS: int = P4["EVENT_COUNTERS"]
RAIN_UDP_PORT: int = P4["RAIN_UDP_PORT"]
ROCE_OP_RC_WRITE_ONLY: int = P4["ROCE_OP_RC_WRITE_ONLY"]
# The P4 takes the opcode from build_write's action data, so it declares only RC; the
# UC opcode is the wire protocol's (hosts/dpdk/include/rain_proto.h, tested against it).
ROCE_OP_UC_WRITE_ONLY: int = 0x2A
# Which WRITE ONLY a worker's QP takes (its registration's ring.qp_type).
WRITE_OPCODE: dict[str, int] = {"uc": ROCE_OP_UC_WRITE_ONLY, "rc": ROCE_OP_RC_WRITE_ONLY}

# Tofino: a dev_port's pipe is its bits 8:7 (docs/tofino.md, "Pipes, ports").
PIPE_SHIFT = 7
PSN_MASK = (1 << 24) - 1
# The DSCP of RoCE traffic when the inventory gives none (its roce.dscp default, and
# rain-worker's --dscp): the class the NICs keep lossless with PFC.
ROCE_DSCP = 26
QPN_MASK = (1 << 24) - 1
FOUR_GIB = 1 << 32


def pipe_of(dev_port: int) -> int:
    return dev_port >> PIPE_SHIFT
