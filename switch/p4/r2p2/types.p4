/* Constants and per-packet metadata of the R2P2-SW program (r2p2.p4). Named R2P2_* so
 * they can never clash with a shared file's. The wire values mirror
 * hosts/dpdk/include/rain_proto.h. */
#ifndef _R2P2_TYPES_P4_
#define _R2P2_TYPES_P4_

const bit<8> R2P2_KIND_REPORT  = 8;     /* worker -> switch: its queue depth */
const bit<8> R2P2_KIND_MAX     = 10;    /* the highest kind the protocol defines */
const bit<8> R2P2_FLAG_RECIRC  = 0x20;  /* set by the switch on recirculation; never by hosts */

/* Tofino 1's recirculation port is local port 68 of each pipe (dev_port = pipe << 7 |
 * 68): a task recirculates through its own pipe, so it meets the same depth registers
 * (registers exist once per pipe). */
const bit<7> R2P2_RECIRC_PORT  = 68;

/* worker_id indexes the depth register: in range when worker_id[15:R2P2_WORKER_BITS]
 * == 0 (log2(MAX_WORKERS)). */
#define R2P2_WORKER_BITS 10

/* Event counter indexes of the R2P2 outcomes (events.p4's counter; the shared EV_*
 * of types.p4 keep their meaning: EV_NO_WORKER, EV_FORWARDED, EV_NO_ROUTE,
 * EV_BAD_RAIN, EV_PARSER_ERROR). Every ingress pass counts once. */
const bit<5> EV_R2P2_DISPATCHED   = 16;  /* a task went to a worker below the bound */
const bit<5> EV_R2P2_RECIRCULATED = 17;  /* a pass found its worker at the bound */
const bit<5> EV_R2P2_REPORT       = 18;  /* a REPORT set a worker's depth */
const bit<5> EV_R2P2_REJECTED     = 19;  /* a task reached the pass bound: REJECT */

/* Per-packet state between the R2P2 controls (a local of SwitchIngress). */
struct r2p2_md_t {
    bit<16>     last_worker;  /* workers 0..last_worker take tasks (round robin) */
    bit<16>     bound;        /* n of JBSQ(n) */
    bit<16>     passes_left;  /* the pass bound (config) - passes taken before this one */
    bit<1>      known;        /* the worker table has worker_id */
    bit<1>      took;         /* the worker's depth was below the bound: it took the task */
    bit<1>      forward;      /* deliver by destination address (Forward) */
    bit<1>      reject;       /* ... as a REJECT to the client */
    PortId_t    port;         /* the worker's port and addresses (worker table) */
    mac_addr_t  dmac;
    ipv4_addr_t dip;
}

#endif
