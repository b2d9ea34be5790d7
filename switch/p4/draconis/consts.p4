/* Constants of the Draconis-SW program only (the wire's are in types.p4). */
#ifndef _DRACONIS_CONSTS_P4_
#define _DRACONIS_CONSTS_P4_

/* What the queue did with a packet (ig_md.queue_op), beside types.p4's QOP_*: a TASK is
 * QOP_TASK_QUEUED or QOP_FULL; a PULL that takes the head is QOP_TOKEN_MATCHED (a pull
 * is a token that never waits, so queue_entries.p4 reads the entry for it), one that
 * finds the queue empty is QOP_PULL_EMPTY. */
const bit<3> QOP_PULL_EMPTY = 6;

/* Event counter indexes beside types.p4's EV_*: a PULL answered EMPTY. Enqueues count
 * as EV_TASK_QUEUED, dispatches as EV_DISPATCH_QUEUED, rejects as EV_TASK_REJECTED,
 * frames of a kind this switch does not take as EV_BAD_RAIN. */
const bit<5> EV_PULL_EMPTY = 16;

#endif
