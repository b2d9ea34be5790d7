/* Dispatch (Draconis-SW): what the queue's outcome means for the packet.
 *   pull took a task -> the PULL becomes the task's DISPATCH back to the pulling worker
 *                       (its addresses and worker_id); the task's fields came back from
 *                       queue_entries, and the client's IP becomes the source, so the
 *                       worker answers the client directly
 *   pull found none  -> the PULL goes back to the worker as EMPTY (it pulls again)
 *   task queued      -> the packet ends here; a large task (FLAG_LARGE) waits as its
 *                       header only, the worker FETCHes the payload from the client
 *   queue full       -> the task goes back to its client as REJECT, as Rain does */
#ifndef _DRACONIS_DISPATCH_P4_
#define _DRACONIS_DISPATCH_P4_

control DraconisDispatch(inout headers_t hdr,
                         inout ingress_md_t ig_md,
                         in ingress_intrinsic_metadata_t ig_intr_md,
                         inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                         inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    action set_client(ipv4_addr_t ip) {
        hdr.ipv4.src_addr = ip;
    }
    table client_addr {
        key = { hdr.rain.client_id[15:8] : exact @name("client_host"); }
        actions = { set_client; NoAction; }
        default_action = NoAction();
        size = MAX_CLIENT_HOSTS;
    }

    /* Back to the sender as a reply: addresses and UDP ports swapped, out of the port
     * it came in on. The rain header changes, so the UDP checksum would be stale: zero
     * says "none" (IPv4). */
    action to_sender() {
        mac_addr_t mac = hdr.ethernet.dst_addr;
        ipv4_addr_t ip = hdr.ipv4.dst_addr;
        bit<16> port = hdr.udp.dst_port;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = ip;
        hdr.udp.dst_port = hdr.udp.src_port;
        hdr.udp.src_port = port;
        hdr.udp.checksum = 0;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }
    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    apply {
        if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            to_sender();
            hdr.rain.kind = KIND_DISPATCH;
            /* a stateful ALU's output lands whole in one container: split here */
            hdr.rain.task_type = ig_md.entry_meta[15:8];
            hdr.rain.flags = ig_md.entry_meta[7:0];
            hdr.rain.report = 0;
            ig_md.event = EV_DISPATCH_QUEUED;
            client_addr.apply();
        } else if (ig_md.queue_op == QOP_PULL_EMPTY) {
            to_sender();
            hdr.rain.kind = KIND_EMPTY;
            ig_md.event = EV_PULL_EMPTY;
        } else if (ig_md.queue_op == QOP_TASK_QUEUED) {
            drop();
            ig_md.event = EV_TASK_QUEUED;
        } else if (ig_md.queue_op == QOP_FULL) {
            to_sender();
            hdr.rain.kind = KIND_REJECT;
            ig_md.event = EV_TASK_REJECTED;
        }
    }
}

#endif
