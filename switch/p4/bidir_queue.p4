/* BidirQueue: the per-slice bidirectional queue of tasks and tokens (paper 3.2.1).
 *
 * One signed token balance per slice: positive = that many tokens wait, negative =
 * that many tasks wait; only one side is ever non-empty, so tasks and tokens share
 * one ring of entries per slice, with a head (dequeue) and a tail (enqueue) pointer.
 *   task,  balance > 0  -> take the oldest token  (head)  -> dispatch now
 *   task,  balance <= 0 -> enqueue the task       (tail)  if there is room
 *   token, balance < 0  -> take the oldest task   (head)  -> dispatch it
 *   token, balance >= 0 -> enqueue the token      (tail)  if there is room
 * One RegisterAction per register per packet; the pointers wrap inside the
 * stateful ALU (NetLock style) so they are absolute entry indexes, ready for the
 * entry arrays (queue_entries.p4) one stage later. The balance action returns the
 * old balance, or BALANCE_FULL when the packet found no room (nothing changed).
 */
#ifndef _BIDIR_QUEUE_P4_
#define _BIDIR_QUEUE_P4_

control BidirQueue(inout headers_t hdr, inout ingress_md_t ig_md) {
    /* Per slice: its region of the entry arrays [first, last], its capacity (the
     * region's size; cap and -cap both given so no stage computes a negation), and
     * its RDMA ring (slots - 1, multicast group of its workers; mgid 0 = none). */
    action set_slice_config(bit<32> first, bit<32> last, int<32> cap, int<32> neg_cap,
                            bit<32> last_slot, bit<16> mgid) {
        ig_md.region_first = first;
        ig_md.region_last = last;
        ig_md.cap = cap;
        ig_md.neg_cap = neg_cap;
        ig_md.last_slot = last_slot;
        ig_md.mgid = mgid;
    }
    /* An unconfigured slice holds nothing: tasks are rejected, tokens dropped. */
    action unconfigured() {
        ig_md.cap = 0;
        ig_md.neg_cap = 0;
        ig_md.mgid = 0;
    }
    table config_slice {
        key = { ig_md.slice : exact; }
        actions = { set_slice_config; unconfigured; }
        default_action = unconfigured();
        size = MAX_SLICES;
    }

    Register<int<32>, slice_t>(MAX_SLICES, 0) balance;
    RegisterAction<int<32>, slice_t, int<32>>(balance) task_arrives = {
        void apply(inout int<32> value, out int<32> old) {
            if (value > ig_md.neg_cap) {   /* a token waits, or a task fits */
                old = value;
                value = value - 1;
            } else {
                old = BALANCE_FULL;
            }
        }
    };
    RegisterAction<int<32>, slice_t, int<32>>(balance) token_arrives = {
        void apply(inout int<32> value, out int<32> old) {
            if (value < ig_md.cap) {       /* a task waits, or a token fits */
                old = value;
                value = value + 1;
            } else {
                old = BALANCE_FULL;
            }
        }
    };

    Register<bit<32>, slice_t>(MAX_SLICES, 0) head;
    RegisterAction<bit<32>, slice_t, bit<32>>(head) pop = {
        void apply(inout bit<32> value, out bit<32> idx) {
            idx = value;
            if (value == ig_md.region_last) {
                value = ig_md.region_first;
            } else {
                value = value + 1;
            }
        }
    };
    Register<bit<32>, slice_t>(MAX_SLICES, 0) tail;
    RegisterAction<bit<32>, slice_t, bit<32>>(tail) push = {
        void apply(inout bit<32> value, out bit<32> idx) {
            idx = value;
            if (value == ig_md.region_last) {
                value = ig_md.region_first;
            } else {
                value = value + 1;
            }
        }
    };

    apply {
        config_slice.apply();
        if (hdr.rain.kind == KIND_TASK) {
            ig_md.owner = hdr.rain.client_id;
            /* A large task can wait only as a descriptor, which needs the slice's
             * RDMA ring: without one it may take a token but never queue. */
            if ((hdr.rain.flags & FLAG_LARGE) != 0 && ig_md.mgid == 0) {
                ig_md.neg_cap = 0;
            }
            ig_md.old_balance = task_arrives.execute(ig_md.slice);
            if (ig_md.old_balance == BALANCE_FULL) {
                ig_md.queue_op = QOP_FULL;
            } else if (ig_md.old_balance > 0) {
                ig_md.queue_op = QOP_TASK_MATCHED;
            } else {
                ig_md.queue_op = QOP_TASK_QUEUED;
            }
        } else {
            ig_md.owner = hdr.rain.worker_id;
            ig_md.old_balance = token_arrives.execute(ig_md.slice);
            if (ig_md.old_balance == BALANCE_FULL) {
                ig_md.queue_op = QOP_FULL;
            } else if (ig_md.old_balance < 0) {
                ig_md.queue_op = QOP_TOKEN_MATCHED;
            } else {
                ig_md.queue_op = QOP_TOKEN_QUEUED;
            }
        }
        if (ig_md.queue_op == QOP_TASK_MATCHED || ig_md.queue_op == QOP_TOKEN_MATCHED) {
            ig_md.qidx = pop.execute(ig_md.slice);
        } else if (ig_md.queue_op == QOP_TASK_QUEUED || ig_md.queue_op == QOP_TOKEN_QUEUED) {
            ig_md.qidx = push.execute(ig_md.slice);
        }
    }
}

#endif
