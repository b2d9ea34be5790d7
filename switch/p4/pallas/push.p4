/* Push: the task leaves at once, as Pallas pushes with no queue in the switch and no
 * bound on a worker's queue: to the worker the schedule chose (kind DISPATCH, the
 * worker's addresses from select_worker, the client's source address kept so the
 * worker answers it directly), counted per pool. A task that cannot be pushed goes
 * back to its client as REJECT (never a silent drop). */
#ifndef _PALLAS_PUSH_P4_
#define _PALLAS_PUSH_P4_

control Push(inout headers_t hdr,
             inout ingress_md_t ig_md,
             in ingress_intrinsic_metadata_t ig_intr_md,
             inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<32>, slice_t>(MAX_SLICES, CounterType_t.PACKETS_AND_BYTES) dispatches;

    /* Back to the client as a reply: addresses and UDP ports swapped (the client may
     * send from any port; the UDP checksum stays valid, its sum is unchanged). */
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
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }

    action to_worker(PortId_t port, mac_addr_t dmac, ipv4_addr_t dip) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.dst_addr = dip;
        hdr.rain.kind = KIND_DISPATCH;
        hdr.rain.slice = ig_md.slice;
        dispatches.count(ig_md.slice);
    }
    /* The schedule names a worker the controller gave no address. */
    action no_worker() {
        reject();
        ig_md.event = EV_NO_WORKER;
    }
    table select_worker {
        key = { hdr.rain.worker_id : exact; }
        actions = { to_worker; no_worker; }
        default_action = no_worker();
        size = MAX_WORKERS;
    }

    apply {
        if (ig_md.event == EV_DISPATCH_DIRECT) {
            select_worker.apply();
        } else {
            reject();
        }
    }
}

#endif
