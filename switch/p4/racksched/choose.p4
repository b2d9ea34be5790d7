/* Choose: which workers a packet's loads concern.
 *   task, first pass  -> two distinct workers drawn at random: a Random<bit<16>> draw
 *                        falls in one range of the `pick` table, and each range names an
 *                        ordered pair (the controller gives every pair an equal range)
 *   task, second pass -> the winner the first pass resubmitted it with
 *   report            -> the reporting worker */
#ifndef _RACKSCHED_CHOOSE_P4_
#define _RACKSCHED_CHOOSE_P4_

control Choose(inout headers_t hdr,
               inout ingress_md_t ig_md,
               in ingress_intrinsic_metadata_t ig_intr_md,
               inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Random<bit<16>>() rng;

    action draw() {
        ig_md.rs_rand = rng.get();
    }
    action choose(worker_id_t first, worker_id_t second) {
        ig_md.rs_op = RS_CHOOSE;
        ig_md.rs_a = first;
        ig_md.rs_b = second;
        ig_md.event = EV_CHOSEN;
    }
    action no_workers() {
        ig_md.rs_op = RS_NONE;
        ig_dprsr_md.drop_ctl = 1;
        ig_md.event = EV_NO_WORKER;
    }
    table pick {
        key = { ig_md.rs_rand : range @name("rand"); }
        actions = { choose; no_workers; }
        default_action = no_workers();
        size = CHOICE_PAIRS;
    }

    /* The dispatch goes out under the winner's id: select_worker looks it up. */
    action second_pass() {
        ig_md.rs_op = RS_DISPATCH;
        hdr.rain.worker_id = ig_md.resubmit.worker;
        ig_md.rs_a = ig_md.resubmit.worker;
        ig_md.rs_b = ig_md.resubmit.worker;
    }
    action report() {
        ig_md.rs_op = RS_REPORT;
        ig_md.rs_a = hdr.rain.worker_id;
        ig_md.rs_b = hdr.rain.worker_id;
    }

    apply {
        if (ig_intr_md.resubmit_flag == 1) {
            second_pass();
        } else if (hdr.rain.kind == KIND_TASK) {
            draw();
            pick.apply();
        } else {
            report();
        }
    }
}

#endif
