/* RdmaEngine (ingress half of the RDMA engine, paper 3.2.2 and 5.4): a large task
 * that must wait is pre-written into the RDMA ring of every worker of its slice.
 * Here: take the slice's next ring slot (the write offset the switch keeps per
 * slice), put a descriptor {slot, length} in place of the inline bytes so the queue
 * stores only that, and multicast the packet to the slice's group; rdma_writer.p4
 * turns each replica into a RoCEv2 WRITE for one worker. A large task that finds a
 * token is forwarded whole (dispatch.p4) and never comes here. */
#ifndef _RDMA_ENGINE_P4_
#define _RDMA_ENGINE_P4_

control RdmaEngine(inout headers_t hdr,
                   inout ingress_md_t ig_md,
                   inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Register<bit<32>, slice_t>(MAX_SLICES, 0) ring_offset;
    RegisterAction<bit<32>, slice_t, bit<32>>(ring_offset) next_slot = {
        void apply(inout bit<32> value, out bit<32> slot) {
            slot = value;
            if (value == ig_md.last_slot) {
                value = 0;
            } else {
                value = value + 1;
            }
        }
    };

    action describe() {
        /* payload bytes = UDP payload - rain header - the 4-byte iCRC pad */
        ig_md.desc_len = (bit<32>)(hdr.udp.length - (UDP_HDR_BYTES + RAIN_HDR_BYTES + ICRC_BYTES));
        ig_tm_md.mcast_grp_a = ig_md.mgid;
        hdr.rain.flags = (hdr.rain.flags & ~FLAG_LARGE) | FLAG_DESC;
    }

    apply {
        if (ig_md.queue_op == QOP_TASK_QUEUED && (hdr.rain.flags & FLAG_LARGE) != 0) {
            ig_md.slot = next_slot.execute(ig_md.slice);
            describe();
            hdr.rain.data0 = ig_md.slot[31:24];
            hdr.rain.data1 = ig_md.slot[23:16];
            hdr.rain.data2 = ig_md.slot[15:8];
            hdr.rain.data3 = ig_md.slot[7:0];
            hdr.rain.data4 = ig_md.desc_len[31:24];
            hdr.rain.data5 = ig_md.desc_len[23:16];
            hdr.rain.data6 = ig_md.desc_len[15:8];
            hdr.rain.data7 = ig_md.desc_len[7:0];
            hdr.bridged.prewrite = 1;
            hdr.bridged.slot = ig_md.slot;
            hdr.bridged.desc_len = ig_md.desc_len;
            ig_md.event = EV_PREWRITE;
        }
    }
}

#endif
