/* SPDX-License-Identifier: Apache-2.0
 *
 * The Rain wire protocol, declared once.
 *
 * Every message of Rain and of its baselines is one UDP datagram to or from
 * RAIN_UDP_PORT carrying a fixed 32-byte `struct rain_hdr`, optionally followed by a
 * payload. The switch (switch/p4/headers.p4), the software switch
 * (switch/emulator), the DPDK programs and the Python tools all use this layout;
 * tests/unit/test_proto_layout.py compiles this header and checks every other
 * language's view against it (sizes, offsets, constants).
 *
 * All multi-byte fields are big-endian on the wire.
 *
 * Inline data vs descriptor: a task carries 8 bytes of inline data (`data`, the
 * switch stores exactly these 8 bytes per queue entry, one byte per stage). A task
 * larger than that (RAIN_F_LARGE) carries its bytes after the header, starting with
 * a `struct rain_slot_hdr`. When such a task is queued, the switch pre-writes the
 * payload into every slice worker's RDMA ring (RoCEv2 WRITE) and queues a
 * descriptor instead: `data` then holds {slot, length} (RAIN_F_DESC) and no payload
 * follows. The worker runs it only if the slot's rain_slot_hdr matches the
 * descriptor's client_id/request_id.
 */
#ifndef RAIN_PROTO_H
#define RAIN_PROTO_H

#include <stdint.h>

#define RAIN_UDP_PORT      21057u /* 0x5241, "RA" */
#define RAIN_VERSION       1u
#define RAIN_HDR_LEN       32u
#define RAIN_INLINE_BYTES  8u

/* Message kinds (rain_hdr.kind). */
enum rain_kind {
	RAIN_TASK        = 1,  /* client -> switch: a new task */
	RAIN_DISPATCH    = 2,  /* switch -> worker: a task for worker_id, INT stamped */
	RAIN_TOKEN       = 3,  /* worker -> switch: worker_id can take one more task */
	RAIN_RESPONSE    = 4,  /* worker -> client: the task's result */
	RAIN_REJECT      = 5,  /* switch -> client: the queue was full, task not taken */
	RAIN_PULL        = 6,  /* worker -> switch: idle worker asks for a task (Draconis) */
	RAIN_EMPTY       = 7,  /* switch -> worker: a pull found no task (Draconis) */
	RAIN_REPORT      = 8,  /* worker -> switch: queue depth / load (R2P2, RackSched) */
	RAIN_FETCH       = 9,  /* worker -> client: send me the payload of request_id (Draconis) */
	RAIN_FETCH_REPLY = 10, /* client -> worker: the payload */
	RAIN_KIND_MAX    = 10,
};

/* Flags (rain_hdr.flags). */
#define RAIN_F_LARGE     0x01u /* a payload (struct rain_slot_hdr + bytes) follows the header */
#define RAIN_F_DESC      0x02u /* data is a descriptor {slot, length} into the RDMA ring */
#define RAIN_F_INT       0x04u /* int_qdelay_ns / int_qlen are valid */
#define RAIN_F_RESUBMIT  0x08u /* a client resubmission after a timeout */
#define RAIN_F_FAILED    0x10u /* response: the task was refused (e.g. descriptor mismatch) */
#define RAIN_F_RECIRC    0x20u /* set by switches that recirculate (R2P2); never sent by hosts */

struct rain_desc {
	uint32_t slot;   /* ring slot index, per slice */
	uint32_t length; /* payload bytes in the slot, rain_slot_hdr included */
} __attribute__((packed));

struct rain_hdr {
	uint8_t  version;     /* RAIN_VERSION */
	uint8_t  kind;        /* enum rain_kind */
	uint8_t  flags;       /* RAIN_F_* */
	uint8_t  task_type;   /* application task type; the slice table keys on it */
	uint16_t slice;       /* tokens: the worker's slice; dispatches: the slice that matched */
	uint16_t client_id;   /* client host (high byte) and client thread (low byte) */
	uint32_t request_id;  /* per client_id, increasing */
	uint16_t worker_id;   /* global worker (thread) id, assigned at registration */
	uint16_t report;      /* REPORT/RESPONSE: worker queue depth or load; TOKEN: quota */
	union {
		uint8_t  data[RAIN_INLINE_BYTES]; /* inline task data (synthetic: service ns, u64) */
		struct rain_desc desc;            /* with RAIN_F_DESC */
	} u;
	uint32_t int_qdelay_ns; /* switch-side queuing delay of this task (switch clock) */
	uint32_t int_qlen;      /* switch queue length (tasks) of the slice at dispatch */
} __attribute__((packed));

_Static_assert(sizeof(struct rain_hdr) == RAIN_HDR_LEN, "rain_hdr is 32 bytes on the wire");

/* The first bytes of every large payload; what lands in an RDMA ring slot. */
#define RAIN_SLOT_MAGIC 0x5241494eu /* "RAIN" */
struct rain_slot_hdr {
	uint32_t magic;       /* RAIN_SLOT_MAGIC */
	uint16_t client_id;   /* copy of the task's metadata, checked against the descriptor */
	uint8_t  task_type;
	uint8_t  flags;
	uint32_t request_id;
	uint32_t length;      /* payload bytes including this header */
	uint8_t  arg[RAIN_INLINE_BYTES]; /* what would have been inline data (service ns) */
} __attribute__((packed));

#define RAIN_SLOT_HDR_LEN 24u
_Static_assert(sizeof(struct rain_slot_hdr) == RAIN_SLOT_HDR_LEN, "rain_slot_hdr is 24 bytes");

/* RoCEv2 (UDP 4791): what the switch's RDMA engine emits, and the emulated
 * worker applies. BTH + RETH, then the payload, then a 4-byte iCRC that is not
 * computed (NICs are configured to ignore it; see switch/p4 and docs/tofino.md). */
#define ROCE_UDP_PORT            4791u
#define ROCE_OP_RC_WRITE_ONLY    0x0au
#define ROCE_OP_UC_WRITE_ONLY    0x2au
#define ROCE_PKEY_DEFAULT        0xffffu
#define ROCE_ICRC_LEN            4u

struct roce_bth {
	uint8_t  opcode;
	uint8_t  se_m_pad_tver; /* SE(1) MigReq(1) PadCnt(2) TVer(4) */
	uint16_t pkey;
	uint8_t  resv8;
	uint8_t  dst_qp[3];
	uint8_t  ack_resv7;     /* AckReq(1) reserved(7) */
	uint8_t  psn[3];
} __attribute__((packed));

struct roce_reth {
	uint64_t va;
	uint32_t rkey;
	uint32_t dma_len;
} __attribute__((packed));

#define ROCE_BTH_LEN  12u
#define ROCE_RETH_LEN 16u
_Static_assert(sizeof(struct roce_bth) == ROCE_BTH_LEN, "BTH is 12 bytes");
_Static_assert(sizeof(struct roce_reth) == ROCE_RETH_LEN, "RETH is 16 bytes");

#endif /* RAIN_PROTO_H */
