/* Jbsq: join-the-bounded-shortest-queue, JBSQ(n), by recirculation (R2P2, USENIX ATC
 * 2019, as the Rain paper's R2P2-SW baseline runs it on the switch).
 *
 * One depth cell per worker. A REPORT sets it to the queue depth the worker reported;
 * a task pass adds one when the depth is below n, so a worker never holds more than n
 * tasks the switch sent it since its last report. Per task pass, on the worker the
 * cursor chose:
 *   depth < n             -> DISPATCH to that worker (addresses from the worker table)
 *   depth >= n, passes    -> recirculate through the pipe's recirculation port; the
 *   left                     next pass looks at the next worker. `report` counts the
 *                            passes taken (0 on arrival) and RECIRC marks the frame
 *   depth >= n, last pass -> REJECT to the client, delivered by address (Forward): a
 *                            recirculated pass no longer knows the client's port
 * A task that finds every worker at the bound keeps recirculating, one pass each
 * time, and a later task can take a slot first (reordering): both are counted. */
#ifndef _R2P2_JBSQ_P4_
#define _R2P2_JBSQ_P4_

control Jbsq(inout headers_t hdr,
             inout ingress_md_t ig_md,
             inout r2p2_md_t r2,
             in ingress_intrinsic_metadata_t ig_intr_md,
             inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
             inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Register<bit<16>, worker_id_t>(MAX_WORKERS, 0) depth;
    RegisterAction<bit<16>, worker_id_t, bit<1>>(depth) take = {
        void apply(inout bit<16> value, out bit<1> took) {
            if (value < r2.bound) {
                value = value + 1;
                took = 1;
            } else {
                took = 0;
            }
        }
    };
    RegisterAction<bit<16>, worker_id_t, bit<1>>(depth) set_depth = {
        void apply(inout bit<16> value) {
            value = hdr.rain.report;
        }
    };

    action dispatch() {
        hdr.rain.kind = KIND_DISPATCH;
        hdr.ethernet.dst_addr = r2.dmac;
        hdr.ipv4.dst_addr = r2.dip;
        ig_tm_md.ucast_egress_port = r2.port;
        ig_md.event = EV_R2P2_DISPATCHED;
    }
    action recirculate() {
        hdr.rain.report = hdr.rain.report + 1;
        hdr.rain.flags = hdr.rain.flags | R2P2_FLAG_RECIRC;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port[8:7] ++ R2P2_RECIRC_PORT;
        ig_md.event = EV_R2P2_RECIRCULATED;
    }
    /* Back to the client: addresses and UDP ports swapped, as Rain rejects; Forward
     * then picks the port and MAC by the client's address. */
    action reject() {
        mac_addr_t mac = hdr.ethernet.dst_addr;
        ipv4_addr_t ip = hdr.ipv4.dst_addr;
        bit<16> port = hdr.udp.dst_port;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = ip;
        hdr.udp.dst_port = hdr.udp.src_port;
        hdr.udp.src_port = port;
        hdr.rain.kind = KIND_REJECT;
        r2.forward = 1;
        r2.reject = 1;
    }
    action drop_no_worker() {
        ig_dprsr_md.drop_ctl = 1;
        ig_md.event = EV_NO_WORKER;
    }
    action report_done() {
        ig_dprsr_md.drop_ctl = 1;   /* a REPORT ends here */
        ig_md.event = EV_R2P2_REPORT;
    }

    apply {
        if (hdr.rain.kind == KIND_TASK) {
            if (r2.known == 1) {
                r2.took = take.execute(hdr.rain.worker_id);
            } else {
                r2.took = 0;
            }
            if (r2.known == 0) {
                drop_no_worker();
            } else if (r2.took == 1) {
                dispatch();
            } else if (r2.passes_left[15:1] == 0) {   /* this was the last pass allowed */
                reject();
            } else {
                recirculate();
            }
        } else {
            if (r2.known == 1) {
                set_depth.execute(hdr.rain.worker_id);
                report_done();
            } else {
                drop_no_worker();
            }
        }
    }
}

#endif
