/* Loads: each worker's load, in two copies so that one pass can read two workers'
 * (a register is accessed once per packet). A REPORT sets both copies of its worker,
 * a dispatch adds one to both copies of its winner, a task's first pass reads the
 * first choice's load from copy a and the second's from copy b, and resubmits the
 * task with the less loaded one (ties: the first choice; the pick table holds both
 * orders of every pair, so a tie goes either way with equal odds).
 *
 * The winner's +1 takes the second pass: in the first, both copies were accessed at
 * the two choices, and which one wins is known only after both reads. Between the
 * passes another task may read the winner's load without that +1. */
#ifndef _RACKSCHED_LOADS_P4_
#define _RACKSCHED_LOADS_P4_

control Loads(inout headers_t hdr,
              inout ingress_md_t ig_md,
              inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    /* 32-bit cells: a 16-bit report plus dispatches never reaches the sign bit, so the
     * sign of load_b - load_a orders the two. */
    Register<bit<32>, worker_index_t>(MAX_WORKERS, 0) load_a;
    Register<bit<32>, worker_index_t>(MAX_WORKERS, 0) load_b;
    /* REPORTs stored, by worker id. */
    Counter<bit<32>, worker_index_t>(MAX_WORKERS, CounterType_t.PACKETS_AND_BYTES) reports;

    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_a) read_a = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_b) read_b = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_a) add_a = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };
    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_b) add_b = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };
    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_a) set_a = {
        void apply(inout bit<32> value) {
            value = (bit<32>)hdr.rain.report;
        }
    };
    RegisterAction<bit<32>, worker_index_t, bit<32>>(load_b) set_b = {
        void apply(inout bit<32> value) {
            value = (bit<32>)hdr.rain.report;
        }
    };

    action difference() {
        ig_md.rs_diff = ig_md.rs_load_b - ig_md.rs_load_a;
    }
    action resubmit_to(worker_id_t worker) {
        ig_md.resubmit.setValid();
        ig_md.resubmit.worker = worker;
        ig_md.resubmit.pad = 0;
        ig_dprsr_md.resubmit_type = 1;
    }

    apply {
        if (ig_md.rs_op == RS_CHOOSE) {
            ig_md.rs_load_a = read_a.execute(ig_md.rs_a[9:0]);
            ig_md.rs_load_b = read_b.execute(ig_md.rs_b[9:0]);
            difference();
            if (ig_md.rs_diff[31:31] == 0) {   /* load_b >= load_a: the first choice */
                resubmit_to(ig_md.rs_a);
            } else {
                resubmit_to(ig_md.rs_b);
            }
        } else if (ig_md.rs_op == RS_DISPATCH) {
            add_a.execute(ig_md.rs_a[9:0]);
            add_b.execute(ig_md.rs_b[9:0]);
        } else if (ig_md.rs_op == RS_REPORT) {
            set_a.execute(ig_md.rs_a[9:0]);
            set_b.execute(ig_md.rs_b[9:0]);
            reports.count(ig_md.rs_a[9:0]);
        }
    }
}

#endif
