/* QueueEntries: the entries of the bidirectional queues (paper section 4). 128K
 * entries shared by all slices (each slice owns a region, see config_slice).
 * A task entry holds its 8 inline bytes (or its descriptor), its client_id,
 * request_id, type and flags, and its enqueue time (for INT); a token entry only
 * its worker_id (in `owner`). Each array has a write (enqueue) and a read (dequeue)
 * action on mutually exclusive paths: one access per register per packet. The 8
 * data bytes are 8 arrays of one byte, one per stage, as in the paper. */
#ifndef _QUEUE_ENTRIES_P4_
#define _QUEUE_ENTRIES_P4_

#define ENTRY_BYTE(N)                                                              \
    Register<bit<8>, qidx_t>(QUEUE_ENTRIES, 0) data##N;                            \
    RegisterAction<bit<8>, qidx_t, bit<8>>(data##N) write_data##N = {              \
        void apply(inout bit<8> value) { value = hdr.rain.data##N; }               \
    };                                                                             \
    RegisterAction<bit<8>, qidx_t, bit<8>>(data##N) read_data##N = {               \
        void apply(inout bit<8> value, out bit<8> rv) { rv = value; }              \
    };

control QueueEntries(inout headers_t hdr, inout ingress_md_t ig_md, in bit<32> now) {
    ENTRY_BYTE(0)
    ENTRY_BYTE(1)
    ENTRY_BYTE(2)
    ENTRY_BYTE(3)
    ENTRY_BYTE(4)
    ENTRY_BYTE(5)
    ENTRY_BYTE(6)
    ENTRY_BYTE(7)

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

    apply {
        qidx_t i = (qidx_t)ig_md.qidx;
        bit<16> m;
        if (ig_md.queue_op == QOP_TASK_QUEUED) {
            write_data0.execute(i); write_data1.execute(i); write_data2.execute(i); write_data3.execute(i);
            write_data4.execute(i); write_data5.execute(i); write_data6.execute(i); write_data7.execute(i);
            write_owner.execute(i);
            write_request.execute(i);
            write_meta.execute(i);
            write_tstamp.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_QUEUED) {
            write_owner.execute(i);
        } else if (ig_md.queue_op == QOP_TASK_MATCHED) {
            ig_md.peer_worker = read_owner.execute(i);
        } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
            /* The token packet becomes the dispatch of the oldest task. */
            hdr.rain.data0 = read_data0.execute(i); hdr.rain.data1 = read_data1.execute(i);
            hdr.rain.data2 = read_data2.execute(i); hdr.rain.data3 = read_data3.execute(i);
            hdr.rain.data4 = read_data4.execute(i); hdr.rain.data5 = read_data5.execute(i);
            hdr.rain.data6 = read_data6.execute(i); hdr.rain.data7 = read_data7.execute(i);
            hdr.rain.client_id = read_owner.execute(i);
            hdr.rain.request_id = read_request.execute(i);
            m = read_meta.execute(i);
            hdr.rain.task_type = m[15:8];
            hdr.rain.flags = m[7:0];
            ig_md.entry_tstamp = read_tstamp.execute(i);
        }
    }
}

#endif
