/* RdmaEngine (ingress half of the RDMA engine, paper 3.2.2 and 5.4): a large task
 * that must wait is pre-written into the RDMA ring of every worker of its slice.
 * Here: take the slice's next ring slot (the write offset the switch keeps per
 * slice), mark the task a descriptor {slot, length} (FLAG_DESC; queue_entries
 * stores slot and length in place of the inline bytes), and multicast the packet
 * to the slice's group; rdma_writer.p4 turns each replica into a RoCEv2 WRITE for
 * one worker. A large task that finds a token is forwarded whole (dispatch.p4) and
 * never comes here. How many large tasks may wait is bounded by the ring (the
 * balance's large_task_arrives, bidir_queue.p4). */
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
        hdr.bridged.desc_len = (bit<32>)(hdr.udp.length - (UDP_HDR_BYTES + RAIN_HDR_BYTES + ICRC_BYTES));
        ig_tm_md.mcast_grp_a = ig_md.mgid;
        /* flags = (flags & ~FLAG_LARGE) | FLAG_DESC, as one deposit of two constant
         * bits (an and-then-or would be two dependent instructions, two stages) */
        hdr.rain.flags[1:0] = FLAG_DESC[1:0];
    }

    apply {
        if (ig_md.queue_op == QOP_TASK_QUEUED && (hdr.rain.flags & FLAG_LARGE) != 0) {
            /* The slot goes straight into the bridged header (32 bits, aligned: a
             * stateful ALU's output cannot be shifted); queue_entries stores the
             * descriptor from there (hdr.rain's data bytes are not copied: a byte
             * copy out of a 32-bit container would split the container). */
            hdr.bridged.slot = next_slot.execute(ig_md.slice);
            describe();
            hdr.bridged.prewrite = 1;
            ig_md.event = EV_PREWRITE;
        }
    }
}

#endif
