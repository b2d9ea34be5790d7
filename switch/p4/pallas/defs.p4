/* Pallas-SW's own constants. Everything else (headers, ingress_md_t, parsers, the
 * wire constants, MAX_SLICES, MAX_WORKERS, TASK_TYPES) is shared with Rain.
 *
 * ingress_md_t is Rain's (the shared parser fills it); Pallas-SW reads three of its
 * fields in its own sense:
 *   ig_md.slice        the task's pool (the spec's slices are Pallas's pools)
 *   ig_md.region_last  the pool's schedule length (config_pool)
 *   ig_md.qidx         the schedule position the pool's cursor gave the task
 * and ig_md.event carries the verdict as it is made: EV_DISPATCH_DIRECT while the
 * task can still be pushed, else why not. */
#ifndef _PALLAS_DEFS_P4_
#define _PALLAS_DEFS_P4_

/* Schedule entries (pool, position) -> worker, over all pools: MAX_SLICES pools of up
 * to 256 positions each (a worker appears once per unit of its weight). */
#define SCHEDULE_ENTRIES     4096

/* Events of Pallas-SW beside the shared ones (types.p4): a task pushed counts
 * EV_DISPATCH_DIRECT, one whose worker has no address EV_NO_WORKER. */
const bit<5> EV_NO_POOL    = 16;  /* rejected: its type maps to no pool */
const bit<5> EV_POOL_EMPTY = 17;  /* rejected: its pool has no workers (no config_pool
                                     entry, or no worker at the cursor's position) */

#endif
