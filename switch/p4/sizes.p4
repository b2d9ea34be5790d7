/* Sizes of the Rain program, each with its reason. Tofino 1: 12 stages; per stage 80
 * SRAM blocks (1024 x 128 b), 48 map RAMs and 4 stateful ALUs (docs/tofino.md). */
#ifndef _SIZES_P4_
#define _SIZES_P4_

/* Queue entries shared by all slices: 128K, as in Rain (CoNEXT 2026), section 4. An
 * entry is 20 bytes in 12 arrays: 8 inline bytes striped one per array (the paper's
 * layout), owner 2, request 4, meta 2, enqueue time 4. A stateful array of 128K cells
 * takes (width / 8) * 8 SRAM blocks plus one spare, each with a map RAM: 9 for a byte,
 * 33 for 32 bits, 172 map RAMs in all, which the compiler spreads over 7 stages
 * (4..10) among the dispatch tables (docs/p4-program.md has the layout). 11 stages
 * in all, as the paper's; 64K entries would take 10 stages and 152 SRAM blocks
 * instead of 227 (compiled and measured). */
#define QUEUE_ENTRIES        131072
typedef bit<17> qidx_t;

/* Slices (paper 3.2.3): a handful of task classes per application; 16 leaves room. */
#define MAX_SLICES           16
/* log2(MAX_SLICES): a token's slice is in range when slice[15:SLICE_BITS] == 0. */
#define SLICE_BITS           4
/* Worker threads known to the switch (tokens, dispatch, RDMA replicas): 16 per
 * server in the paper's testbed; 1024 covers a rack of 64 such servers. */
#define MAX_WORKERS          1024
/* Client hosts (the high byte of client_id). */
#define MAX_CLIENT_HOSTS     256
/* Hosts reachable by IPv4 (responses, rejects, other traffic). */
#define FORWARD_ENTRIES      1024
/* Task types mapped to slices (rain_hdr.task_type is 8 bits). */
#define TASK_TYPES           256

/* RDMA ring slots are 2^RDMA_SLOT_SHIFT bytes: a shift amount must be a compile-time
 * constant on Tofino. 2048 B holds a 1500-byte MTU task; workers must register
 * rings with this slot size (the controller checks). */
#define RDMA_SLOT_SHIFT      11

/* A large task's UDP length: UDP 8 + rain header 32 + payload + the 4-byte iCRC pad.
 * Its payload must be at least 4 bytes (WRITE lengths are 4-byte aligned) and fit one
 * ring slot, else the descriptor's length would wrap or a WRITE overrun its slot:
 * such tasks are dropped as malformed (EV_BAD_RAIN). */
#define LARGE_UDP_MIN        48
#define LARGE_UDP_MAX        2092

/* Event counters (see types.p4, EV_*). */
#define EVENT_COUNTERS       32

#endif
