/* Sizes of the Rain program, each with its reason. Tofino 1: 12 stages, 80 SRAM
 * blocks (1024 x 128 b) and 4 stateful ALUs per stage (facts: tofino.md section 3). */
#ifndef _SIZES_P4_
#define _SIZES_P4_

/* Queue entries shared by all slices: 128K (paper section 4). One 8-bit array of
 * 128K cells is 8 SRAM blocks; striping the 8 inline bytes over 8 arrays (one byte
 * per array, paper section 4) keeps every array small enough to place one per
 * stage next to the other state of that stage. */
#define QUEUE_ENTRIES        131072
typedef bit<17> qidx_t;

/* Slices (paper 3.2.3): a handful of task classes per application; 16 leaves room. */
#define MAX_SLICES           16
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
