/* QueueEntries: the entries of the bidirectional queues (paper section 4). 128K
 * entries shared by all slices (each slice owns a region, see config_slice).
 * A task entry holds its 8 inline bytes (or its descriptor), its client_id,
 * request_id, type and flags, and its enqueue time (for INT); a token entry only
 * its worker_id (in `owner`). Each array has a write (enqueue) and a read (dequeue)
 * action on mutually exclusive paths: one access per register per packet. The 8
 * data bytes are 8 arrays of one byte, one per stage, as in the paper. */
#ifndef _QUEUE_ENTRIES_P4_
#define _QUEUE_ENTRIES_P4_

#define ENTRY_BYTE(N, DESC)                                                        \
    Register<bit<8>, qidx_t>(QUEUE_ENTRIES, 0) data##N;                            \
    RegisterAction<bit<8>, qidx_t, bit<8>>(data##N) write_data##N = {              \
        void apply(inout bit<8> value) { value = hdr.rain.data##N; }               \
    };                                                                             \
    RegisterAction<bit<8>, qidx_t, bit<8>>(data##N) write_desc##N = {              \
        void apply(inout bit<8> value) { value = DESC; }                           \
    };                                                                             \
    RegisterAction<bit<8>, qidx_t, bit<8>>(data##N) read_data##N = {               \
        void apply(inout bit<8> value, out bit<8> rv) { rv = value; }              \
    };

control QueueEntries(inout headers_t hdr, inout ingress_md_t ig_md, in bit<32> now) {
    /* A pre-written task's bytes are its descriptor: slot (data0..3) and length
     * (data4..7), big-endian, from the bridged header rdma_engine filled. */
    ENTRY_BYTE(0, hdr.bridged.slot[31:24])
    ENTRY_BYTE(1, hdr.bridged.slot[23:16])
    ENTRY_BYTE(2, hdr.bridged.slot[15:8])
    ENTRY_BYTE(3, hdr.bridged.slot[7:0])
    ENTRY_BYTE(4, hdr.bridged.desc_len[31:24])
    ENTRY_BYTE(5, hdr.bridged.desc_len[23:16])
    ENTRY_BYTE(6, hdr.bridged.desc_len[15:8])
    ENTRY_BYTE(7, hdr.bridged.desc_len[7:0])

    Register<bit<16>, qidx_t>(QUEUE_ENTRIES, 0) owner;
    RegisterAction<bit<16>, qidx_t, bit<16>>(owner) write_owner = {
        void apply(inout bit<16> value) { value = ig_md.owner; }
    };
    RegisterAction<bit<16>, qidx_t, bit<16>>(owner) read_owner = {
        void apply(inout bit<16> value, out bit<16> rv) { rv = value; }
    };
    Register<bit<32>, qidx_t>(QUEUE_ENTRIES, 0) request;
    RegisterAction<bit<32>, qidx_t, bit<32>>(request) write_request = {
        void apply(inout bit<32> value) { value = hdr.rain.request_id; }
    };
    RegisterAction<bit<32>, qidx_t, bit<32>>(request) read_request = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };
    Register<bit<16>, qidx_t>(QUEUE_ENTRIES, 0) meta;   /* task_type << 8 | flags */
    RegisterAction<bit<16>, qidx_t, bit<16>>(meta) write_meta = {
        void apply(inout bit<16> value) { value = hdr.rain.task_type ++ hdr.rain.flags; }
    };
    RegisterAction<bit<16>, qidx_t, bit<16>>(meta) read_meta = {
        void apply(inout bit<16> value, out bit<16> rv) { rv = value; }
    };
    Register<bit<32>, qidx_t>(QUEUE_ENTRIES, 0) tstamp;
    RegisterAction<bit<32>, qidx_t, bit<32>>(tstamp) write_tstamp = {
        void apply(inout bit<32> value) { value = now; }
    };
    RegisterAction<bit<32>, qidx_t, bit<32>>(tstamp) read_tstamp = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };

    /* Each array's accesses form their own if-chain, so the compiler can place each
     * array (one stage, its own stateful ALU) apart from the others; one if-chain
     * over all twelve would make one table per branch, too big for any stage. */
#define ENTRY_DATA(N)                                                              \
        if (ig_md.queue_op == QOP_TASK_QUEUED) {                                   \
            if (hdr.bridged.prewrite == 1) {                                       \
                write_desc##N.execute(i);                                          \
            } else {                                                               \
                write_data##N.execute(i);                                          \
            }                                                                      \
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {                          \
            hdr.rain.data##N = read_data##N.execute(i);                            \
        }

    apply {
        qidx_t i = (qidx_t)ig_md.qidx;
        ENTRY_DATA(0)
        ENTRY_DATA(1)
        ENTRY_DATA(2)
        ENTRY_DATA(3)
        ENTRY_DATA(4)
        ENTRY_DATA(5)
        ENTRY_DATA(6)
        ENTRY_DATA(7)
        /* The owner: a task's client_id or a token's worker_id. */
        if (ig_md.queue_op == QOP_TASK_QUEUED || ig_md.queue_op == QOP_TOKEN_QUEUED) {
            write_owner.execute(i);
        } else if (ig_md.queue_op == QOP_TASK_MATCHED) {
            ig_md.peer_worker = read_owner.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            /* The token packet becomes the dispatch of the oldest task. */
            hdr.rain.client_id = read_owner.execute(i);
        }
        if (ig_md.queue_op == QOP_TASK_QUEUED) {
            write_request.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            hdr.rain.request_id = read_request.execute(i);
        }
        if (ig_md.queue_op == QOP_TASK_QUEUED) {
            write_meta.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            ig_md.entry_meta = read_meta.execute(i);   /* split in dispatch.p4 */
        }
        if (ig_md.queue_op == QOP_TASK_QUEUED) {
            write_tstamp.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            ig_md.entry_tstamp = read_tstamp.execute(i);
        }
    }
}

#endif
