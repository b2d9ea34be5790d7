/* PoolMap: a task's type decides its pool (Pallas isolates task types onto
 * dedicated worker pools). Unlike Rain's slice map, an unmapped type has no pool:
 * the task is rejected (EV_NO_POOL), never pushed to some default pool's workers. */
#ifndef _PALLAS_POOL_MAP_P4_
#define _PALLAS_POOL_MAP_P4_

control PoolMap(in headers_t hdr, inout ingress_md_t ig_md) {
    /* The event is set in the actions: a condition on the table's hit would cost a
     * gateway and a stage after the table. */
    action set_pool(slice_t pool) {
        ig_md.slice = pool;
        ig_md.event = EV_DISPATCH_DIRECT;
    }
    action no_pool() {
        ig_md.event = EV_NO_POOL;
    }
    table map_pool {
        key = { hdr.rain.task_type : exact; }
        actions = { set_pool; no_pool; }
        default_action = no_pool();
        size = TASK_TYPES;
    }
    apply {
        map_pool.apply();
    }
}

#endif
