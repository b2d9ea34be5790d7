/* Dispatch: a task's second pass leaves as DISPATCH to its winner, addressed from the
 * worker table (keyed by worker id, as Rain's); a REPORT is looked up in the same table,
 * so one from a worker the switch does not know is dropped, counted, and sets no load.
 * A dispatch whose winner lost its entry between the passes is dropped (EV_NO_WORKER). */
#ifndef _RACKSCHED_DISPATCH_P4_
#define _RACKSCHED_DISPATCH_P4_

control RackschedDispatch(inout headers_t hdr,
                          inout ingress_md_t ig_md,
                          inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                          inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    /* Tasks dispatched to each worker (packets and bytes), by worker id. */
    Counter<bit<32>, worker_index_t>(MAX_WORKERS, CounterType_t.PACKETS_AND_BYTES) dispatches;

    action to_worker(PortId_t port, mac_addr_t dmac, ipv4_addr_t dip) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.dst_addr = dip;
    }
    action no_worker() {
        ig_dprsr_md.drop_ctl = 1;
    }
    table select_worker {
        key = { hdr.rain.worker_id : exact; }
        actions = { to_worker; no_worker; }
        default_action = no_worker();
        size = MAX_WORKERS;
    }

    apply {
        if (ig_md.rs_op == RS_DISPATCH || ig_md.rs_op == RS_REPORT) {
            if (select_worker.apply().hit) {
                if (ig_md.rs_op == RS_DISPATCH) {
                    hdr.rain.kind = KIND_DISPATCH;
                    ig_md.event = EV_DISPATCH_DIRECT;
                    dispatches.count(ig_md.rs_a[9:0]);
                } else {
                    ig_dprsr_md.drop_ctl = 1;   /* a report ends here */
                    ig_md.event = EV_REPORT;
                }
            } else {
                if (ig_md.rs_op == RS_DISPATCH) {
                    ig_md.event = EV_NO_WORKER;
                } else {
                    ig_md.event = EV_UNKNOWN_WORKER;
                }
                ig_md.rs_op = RS_NONE;   /* no load changes */
            }
        }
    }
}

#endif
