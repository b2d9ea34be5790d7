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
 * entry arrays (queue_entries.p4) one stage later. The balance action returns
 * BALANCE_FULL when the packet found no room (nothing changed), else a value whose
 * sign says which pointer moves (below).
 */
#ifndef _BIDIR_QUEUE_P4_
#define _BIDIR_QUEUE_P4_

control BidirQueue(inout headers_t hdr, inout ingress_md_t ig_md) {
    /* Per slice: its region of the entry arrays [first, last], its capacity (the
     * region's size, given negated: tasks test balance > -cap, tokens balance +
     * -cap < 0, so one PHV input serves both; a stateful ALU takes two), and
     * its RDMA ring (slots - 1, multicast group of its workers; mgid 0 = none).
     * neg_large_cap bounds the tasks a large task may find waiting: -min(cap, ring
     * slots - what a worker may hold dispatched but unread), 0 without a ring. A
     * large task waits as a descriptor of a ring slot and slots are taken in FIFO
     * order, as the queue is served: while fewer than that many tasks wait, the
     * slot it takes held no task still waiting (docs/p4-program.md, the ring). */
    action set_slice_config(bit<32> first, bit<32> last, int<32> neg_cap,
                            int<32> neg_large_cap, bit<32> last_slot, bit<16> mgid) {
        ig_md.region_first = first;
        ig_md.region_last = last;
        ig_md.neg_cap = neg_cap;
        ig_md.neg_large_cap = neg_large_cap;
        ig_md.last_slot = last_slot;
        ig_md.mgid = mgid;
    }
    /* An unconfigured slice holds nothing: tasks are rejected, tokens dropped. */
    action unconfigured() {
        ig_md.neg_cap = 0;
        ig_md.neg_large_cap = 0;
        ig_md.mgid = 0;
    }
    table config_slice {
        key = { ig_md.slice : exact; }
        actions = { set_slice_config; unconfigured; }
        default_action = unconfigured();
        size = MAX_SLICES;
    }

    /* The balance actions return a value whose two top bits alone say what happened
     * (a gateway compares at most 4 bytes + 12 bits of PHV; |balance| < 2^30 since
     * cap <= QUEUE_ENTRIES): 00 = zero or positive, 11 = negative, 10 = BALANCE_FULL.
     * A task returns the balance it leaves (>= 0: it took a token; < 0: it waits), a
     * token the balance it found (< 0: it took a task; >= 0: it waits). */
    Register<int<32>, slice_t>(MAX_SLICES, 0) balance;
    RegisterAction<int<32>, slice_t, int<32>>(balance) task_arrives = {
        void apply(inout int<32> value, out int<32> rv) {
            if (value > ig_md.neg_cap) {   /* a token waits, or a task fits */
                rv = value - 1;            /* the second ALU computes it from memory */
                value = value - 1;
            } else {
                rv = BALANCE_FULL;
            }
        }
    };
    RegisterAction<int<32>, slice_t, int<32>>(balance) large_task_arrives = {
        void apply(inout int<32> value, out int<32> rv) {
            if (value > ig_md.neg_large_cap) {   /* a token waits, or a slot is free */
                rv = value - 1;
                value = value - 1;
            } else {
                rv = BALANCE_FULL;
            }
        }
    };
    RegisterAction<int<32>, slice_t, int<32>>(balance) token_arrives = {
        void apply(inout int<32> value, out int<32> rv) {
            if (value + ig_md.neg_cap < 0) {   /* value < cap: a task waits, or a token fits */
                rv = value;
                value = value + 1;
            } else {
                rv = BALANCE_FULL;
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
            /* A large task can wait only as a descriptor in the slice's RDMA ring:
             * its own bound (a third action on the same cell: no stage between
             * config_slice and the balance to pick the bound). */
            if (hdr.rain.flags[0:0] == 1) {
                ig_md.balance = large_task_arrives.execute(ig_md.slice);
            } else {
                ig_md.balance = task_arrives.execute(ig_md.slice);
            }
        } else {
            ig_md.owner = hdr.rain.worker_id;
            ig_md.balance = token_arrives.execute(ig_md.slice);
        }
        bit<2> side = ig_md.balance[31:30];
        if (side == BAL_FULL) {
            ig_md.queue_op = QOP_FULL;
        } else if (hdr.rain.kind == KIND_TASK) {
            if (side == BAL_NONNEG) {
                ig_md.queue_op = QOP_TASK_MATCHED;
                ig_md.qidx = pop.execute(ig_md.slice);
            } else {
                ig_md.queue_op = QOP_TASK_QUEUED;
                ig_md.qidx = push.execute(ig_md.slice);
            }
        } else {
            if (side == BAL_NEG) {
                ig_md.queue_op = QOP_TOKEN_MATCHED;
                ig_md.qidx = pop.execute(ig_md.slice);
            } else {
                ig_md.queue_op = QOP_TOKEN_QUEUED;
                ig_md.qidx = push.execute(ig_md.slice);
            }
        }
    }
}

#endif
