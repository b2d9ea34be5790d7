/* Wrr: weighted round robin inside a pool. The controller writes each pool's
 * schedule, positions 1..length, each worker at as many positions as its weight, so
 * the schedule's order is the WRR order; the pool's cursor (one register cell per
 * pool) advances once per task and wraps after `length`.
 *
 * Positions count from 1: the cursor holds the position of the pool's last task, so a
 * fresh cursor (0) starts a pool at its first position, and a cursor beyond a schedule
 * the controller shortened starts it over at 1 (value < length fails), never at a
 * position with no entry. One compare against a PHV input, one RegisterAction per
 * packet, the new value its output (ready for the schedule one stage later). */
#ifndef _PALLAS_WRR_P4_
#define _PALLAS_WRR_P4_

control Wrr(inout headers_t hdr, inout ingress_md_t ig_md) {
    action set_pool_config(bit<16> length) {
        ig_md.region_last = (bit<32>)length;
    }
    /* A pool the controller has not configured has no workers. */
    action no_workers() {
        ig_md.event = EV_POOL_EMPTY;
    }
    table config_pool {
        key = { ig_md.slice : exact @name("pool"); }
        actions = { set_pool_config; no_workers; }
        default_action = no_workers();
        size = MAX_SLICES;
    }

    Register<bit<32>, slice_t>(MAX_SLICES, 0) cursor;
    RegisterAction<bit<32>, slice_t, bit<32>>(cursor) advance = {
        void apply(inout bit<32> value, out bit<32> position) {
            if (value < ig_md.region_last) {
                value = value + 1;
            } else {
                value = 1;
            }
            position = value;
        }
    };

    action set_worker(worker_id_t worker) {
        hdr.rain.worker_id = worker;
    }
    /* A position without a worker (a schedule being rewritten): no worker to push to. */
    action no_position() {
        ig_md.event = EV_POOL_EMPTY;
    }
    table schedule {
        key = {
            ig_md.slice      : exact @name("pool");
            ig_md.qidx[15:0] : exact @name("position");
        }
        actions = { set_worker; no_position; }
        default_action = no_position();
        size = SCHEDULE_ENTRIES;
    }

    apply {
        config_pool.apply();
        if (ig_md.event == EV_DISPATCH_DIRECT) {
            ig_md.qidx = advance.execute(ig_md.slice);
            schedule.apply();
        }
    }
}

#endif
