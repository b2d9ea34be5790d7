/* Config: the controller's settings of R2P2-SW, one keyless table (its default
 * action): the workers that take tasks (0..last_worker), n of JBSQ(n) (the spec's
 * baseline.jbsq_n) and the pass bound of a task. Until it is set no worker takes a
 * task (bound 0) and a task is rejected on its first pass. */
#ifndef _R2P2_CONFIG_P4_
#define _R2P2_CONFIG_P4_

control Config(in headers_t hdr, inout r2p2_md_t r2) {
    /* passes_left is computed here, from the action's own parameter: computed in a
     * control, the compiler would fold the subtraction into Jbsq's gateway, which
     * cannot subtract. A task's `report` holds the passes it took before this one. */
    action set_config(bit<16> last_worker, bit<16> bound, bit<16> max_passes) {
        r2.last_worker = last_worker;
        r2.bound = bound;
        r2.passes_left = max_passes - hdr.rain.report;
    }
    action unconfigured() {
        r2.last_worker = 0;
        r2.bound = 0;
        r2.passes_left = 0;
    }
    table jbsq {
        actions = { set_config; unconfigured; }
        default_action = unconfigured();
        size = 1;
    }
    apply {
        jbsq.apply();
    }
}

#endif
