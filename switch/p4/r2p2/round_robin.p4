/* RoundRobin: the worker a task pass looks at. One cursor cell, read and advanced by
 * every task pass (0, 1, .., last_worker, 0, ..): a task that finds its worker at the
 * bound looks at the next worker on its next pass. The cursor is written into the
 * task's worker_id, which keys the worker table and indexes the depth register, as a
 * REPORT's own worker_id does. */
#ifndef _R2P2_ROUND_ROBIN_P4_
#define _R2P2_ROUND_ROBIN_P4_

control RoundRobin(inout headers_t hdr, in r2p2_md_t r2) {
    Register<bit<16>, bit<1>>(1, 0) cursor;
    RegisterAction<bit<16>, bit<1>, bit<16>>(cursor) advance = {
        void apply(inout bit<16> value, out bit<16> worker) {
            worker = value;
            /* >=, not ==: a cursor beyond a lowered last_worker wraps at once */
            if (value >= r2.last_worker) {
                value = 0;
            } else {
                value = value + 1;
            }
        }
    };
    apply {
        hdr.rain.worker_id = advance.execute(0);
    }
}

#endif
