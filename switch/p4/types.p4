/* Types and constants shared by the Rain controls. The wire constants mirror
 * hosts/dpdk/include/rain_proto.h; tests/unit/test_p4_contract.py checks them. */
#ifndef _TYPES_P4_
#define _TYPES_P4_

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> slice_t;
typedef bit<16> worker_id_t;
typedef bit<16> client_id_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> RAIN_UDP_PORT  = 21057;
const bit<16> ROCE_UDP_PORT  = 4791;
const bit<16> ROCE_SRC_PORT  = 49152;  /* source port of switch-built RoCEv2 packets */
const bit<8>  RAIN_VERSION   = 1;

/* rain_hdr.kind */
const bit<8> KIND_TASK        = 1;
const bit<8> KIND_DISPATCH    = 2;
const bit<8> KIND_TOKEN       = 3;
const bit<8> KIND_RESPONSE    = 4;
const bit<8> KIND_REJECT      = 5;
const bit<8> KIND_PULL        = 6;   /* the baselines' kinds (hosts/proto.py) */
const bit<8> KIND_EMPTY       = 7;
const bit<8> KIND_REPORT      = 8;
const bit<8> KIND_FETCH       = 9;
const bit<8> KIND_FETCH_REPLY = 10;
const bit<8> KIND_MAX         = 10;  /* kinds above it (and 0) are no message of the protocol */

/* rain_hdr.flags */
const bit<8> FLAG_LARGE    = 0x01;
const bit<8> FLAG_DESC     = 0x02;
const bit<8> FLAG_INT      = 0x04;

/* Header sizes used to fix lengths when a task becomes a RoCEv2 WRITE. */
const bit<16> RAIN_HDR_BYTES = 32;
const bit<16> ROCE_HDR_BYTES = 28;     /* BTH 12 + RETH 16 */
const bit<16> ICRC_BYTES     = 4;      /* the client's trailing pad becomes the iCRC */
const bit<16> UDP_HDR_BYTES  = 8;
const bit<8>  ROCE_OP_RC_WRITE_ONLY = 0x0a;

/* The signed token balance says "full" with this value (never a real balance). */
const int<32> BALANCE_FULL = -2147483648;
/* The top two bits of what the balance actions return (bidir_queue.p4). */
const bit<2> BAL_NONNEG = 0;
const bit<2> BAL_FULL   = 2;
const bit<2> BAL_NEG    = 3;

/* What the bidirectional queue did with a packet (ig_md.queue_op). */
const bit<3> QOP_NONE          = 0;
const bit<3> QOP_TASK_MATCHED  = 1;  /* a task took a waiting token: dispatch now */
const bit<3> QOP_TASK_QUEUED   = 2;  /* a task waits in the switch */
const bit<3> QOP_TOKEN_MATCHED = 3;  /* a token took a waiting task: dispatch it */
const bit<3> QOP_TOKEN_QUEUED  = 4;  /* a token waits in the switch */
const bit<3> QOP_FULL          = 5;  /* no room: tasks are rejected, tokens dropped */

/* Event counter indexes (Counter `events` in events.p4). Every ingress packet counts
 * once, under its outcome: the tasks (tokens) that arrived are the sum of the task
 * (token) outcomes, so no arrival index exists (0 and 1 are unused, and so is 9, once
 * a per-replica count: the egress writes counter, per worker, counts the WRITEs, which
 * ingress never sees). */
const bit<5> EV_DISPATCH_DIRECT  = 2;  /* task met a token on arrival */
const bit<5> EV_DISPATCH_QUEUED  = 3;  /* token met a waiting task */
const bit<5> EV_TASK_QUEUED      = 4;
const bit<5> EV_TOKEN_QUEUED     = 5;
const bit<5> EV_TASK_REJECTED    = 6;  /* queue full */
const bit<5> EV_TOKEN_DROPPED    = 7;  /* queue full of tokens */
const bit<5> EV_PREWRITE         = 8;  /* a large task pre-written by RDMA */
const bit<5> EV_NO_WORKER        = 10; /* a dispatch to a worker id with no entry */
const bit<5> EV_LARGE_REJECTED   = 11; /* a large task rejected: min(capacity, ring bound)
                                          * tasks wait, or its slice has no RDMA ring */
const bit<5> EV_FORWARDED        = 12; /* forwarded by destination address */
const bit<5> EV_NO_ROUTE         = 13; /* dropped: no forwarding entry */
const bit<5> EV_BAD_RAIN         = 14; /* dropped: bad version, a token's slice out of range, a large
                                          * task whose length does not fit a ring slot */
const bit<5> EV_PARSER_ERROR     = 15; /* dropped: truncated or malformed headers */

#endif
