/* Constants of RackSched-SW (racksched.p4) beside the shared ones (types.p4, sizes.p4). */
#ifndef _RACKSCHED_CONSTANTS_P4_
#define _RACKSCHED_CONSTANTS_P4_

/* Ordered pairs of distinct workers the choice table holds, one range of the 16-bit
 * draw each: every pair of up to 64 workers (64 * 63 = 4032). */
#define CHOICE_PAIRS         4096

/* A register or counter index: log2(MAX_WORKERS) bits of a worker id. */
typedef bit<10> worker_index_t;

/* What a packet does to the loads (ig_md.rs_op). */
const bit<2> RS_NONE     = 0;
const bit<2> RS_CHOOSE   = 1;  /* a task's first pass: read both choices' loads */
const bit<2> RS_DISPATCH = 2;  /* its second pass: add one to the winner's load */
const bit<2> RS_REPORT   = 3;  /* a worker's report sets its load */

/* Events beyond the shared ones (types.p4 uses 2..15). */
const bit<5> EV_CHOSEN         = 16; /* a task's first pass: resubmitted to the less loaded choice */
const bit<5> EV_REPORT         = 17; /* a worker's load set by its REPORT */
const bit<5> EV_UNKNOWN_WORKER = 18; /* dropped: a REPORT from a worker id with no entry */

#endif
