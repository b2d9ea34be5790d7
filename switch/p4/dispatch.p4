/* Dispatch: what the queue's outcome means for the packet.
 *   task met a token   -> DISPATCH to the token's worker (the packet itself)
 *   token met a task   -> the token packet becomes the task's DISPATCH: the task's
 *                         fields came back from queue_entries; the client's address
 *                         is restored so the worker answers the client directly
 *   task or token queued -> the packet ends here (a pre-written large task leaves
 *                         only as its multicast WRITE replicas)
 *   no room            -> a task goes back to its client as REJECT (never a silent
 *                         drop, paper section 4); a surplus token is dropped, counted */
#ifndef _DISPATCH_P4_
#define _DISPATCH_P4_

control Dispatch(inout headers_t hdr,
                 inout ingress_md_t ig_md,
                 in ingress_intrinsic_metadata_t ig_intr_md,
                 inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                 inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    action to_worker(PortId_t port, mac_addr_t dmac, ipv4_addr_t dip) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.dst_addr = dip;
    }
    action no_worker() {
        ig_dprsr_md.drop_ctl = 1;
        ig_md.event = EV_NO_WORKER;
    }
    table select_worker {
        key = { hdr.rain.worker_id : exact; }
        actions = { to_worker; no_worker; }
        default_action = no_worker();
        size = MAX_WORKERS;
    }

    action set_client(ipv4_addr_t ip) {
        hdr.ipv4.src_addr = ip;
    }
    table client_addr {
        key = { hdr.rain.client_id[15:8] : exact @name("client_host"); }
        actions = { set_client; NoAction; }
        default_action = NoAction();
        size = MAX_CLIENT_HOSTS;
    }

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
    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    apply {
        if (ig_md.queue_op == QOP_TASK_MATCHED) {
            hdr.rain.kind = KIND_DISPATCH;
            hdr.rain.slice = ig_md.slice;
            hdr.rain.worker_id = ig_md.peer_worker;
            ig_md.event = EV_DISPATCH_DIRECT;
            select_worker.apply();
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            hdr.rain.kind = KIND_DISPATCH;
            hdr.rain.slice = ig_md.slice;
            /* a stateful ALU's output lands whole in one container: split here */
            hdr.rain.task_type = ig_md.entry_meta[15:8];
            hdr.rain.flags = ig_md.entry_meta[7:0];
            ig_md.event = EV_DISPATCH_QUEUED;
            client_addr.apply();
            select_worker.apply();
        } else if (ig_md.queue_op == QOP_TASK_QUEUED) {
            if (hdr.bridged.prewrite == 0) {
                drop();
                ig_md.event = EV_TASK_QUEUED;
            }
        } else if (ig_md.queue_op == QOP_TOKEN_QUEUED) {
            drop();
            ig_md.event = EV_TOKEN_QUEUED;
        } else if (ig_md.queue_op == QOP_FULL) {
            if (hdr.rain.kind == KIND_TASK) {
                reject();
                if (hdr.rain.flags[0:0] == 1) {
                    ig_md.event = EV_LARGE_REJECTED;
                } else {
                    ig_md.event = EV_TASK_REJECTED;
                }
            } else {
                drop();
                ig_md.event = EV_TOKEN_DROPPED;
            }
        }
    }
}

#endif
