/* TaskQueue: the one FIFO of tasks in the switch (Draconis, EuroSys 2024; JBSQ(1) as
 * Draconis-SW, Rain (CoNEXT 2026) section 5.2).
 *
 * `waiting` counts the tasks in the queue; a task enqueues at `tail` while fewer than
 * the capacity wait, a pull dequeues at `head` while any wait. The count decides
 * before either pointer moves, so head never passes tail and no repair pass is needed
 * (Draconis's pointers, checked apart, need one). Pointers wrap inside the stateful
 * ALU, so they are entry indexes, ready for queue_entries.p4 one stage later. Both
 * count actions return the count found, or BALANCE_FULL when nothing changed (a task:
 * the queue is full; a pull: it is empty): its top two bits alone say which, one small
 * gateway test (bidir_queue.p4 does the same). */
#ifndef _DRACONIS_TASK_QUEUE_P4_
#define _DRACONIS_TASK_QUEUE_P4_

control TaskQueue(inout headers_t hdr, inout ingress_md_t ig_md) {
    /* The queue's ring is entries [0, last]; neg_cap = -(last + 1), negated so the
     * count's test is one add (value + neg_cap < 0 is value < capacity). The
     * controller sets both, capacity <= QUEUE_ENTRIES. */
    action set_capacity(bit<32> last, int<32> neg_cap) {
        ig_md.region_last = last;
        ig_md.neg_cap = neg_cap;
    }
    /* No capacity set: the queue holds nothing (tasks are rejected, pulls find it empty). */
    action unconfigured() {
        ig_md.region_last = 0;
        ig_md.neg_cap = 0;
    }
    table config_queue {
        actions = { set_capacity; unconfigured; }
        default_action = unconfigured();
        size = 1;
    }

    Register<int<32>, bit<1>>(1, 0) waiting;
    RegisterAction<int<32>, bit<1>, int<32>>(waiting) task_arrives = {
        void apply(inout int<32> value, out int<32> rv) {
            if (value + ig_md.neg_cap < 0) {   /* value < capacity: room */
                rv = value;
                value = value + 1;
            } else {
                rv = BALANCE_FULL;
            }
        }
    };
    RegisterAction<int<32>, bit<1>, int<32>>(waiting) pull_arrives = {
        void apply(inout int<32> value, out int<32> rv) {
            if (value > 0) {                   /* a task waits */
                rv = value;
                value = value - 1;
            } else {
                rv = BALANCE_FULL;
            }
        }
    };

    Register<bit<32>, bit<1>>(1, 0) head;
    RegisterAction<bit<32>, bit<1>, bit<32>>(head) pop = {
        void apply(inout bit<32> value, out bit<32> idx) {
            idx = value;
            if (value == ig_md.region_last) {
                value = 0;
            } else {
                value = value + 1;
            }
        }
    };
    Register<bit<32>, bit<1>>(1, 0) tail;
    RegisterAction<bit<32>, bit<1>, bit<32>>(tail) push = {
        void apply(inout bit<32> value, out bit<32> idx) {
            idx = value;
            if (value == ig_md.region_last) {
                value = 0;
            } else {
                value = value + 1;
            }
        }
    };

    apply {
        config_queue.apply();
        if (hdr.rain.kind == KIND_TASK) {
            ig_md.owner = hdr.rain.client_id;   /* queue_entries stores it */
            ig_md.balance = task_arrives.execute(0);
        } else {
            ig_md.balance = pull_arrives.execute(0);
        }
        bit<2> side = ig_md.balance[31:30];
        if (side == BAL_FULL) {
            if (hdr.rain.kind == KIND_TASK) {
                ig_md.queue_op = QOP_FULL;
            } else {
                ig_md.queue_op = QOP_PULL_EMPTY;
            }
        } else if (hdr.rain.kind == KIND_TASK) {
            ig_md.queue_op = QOP_TASK_QUEUED;
            ig_md.qidx = push.execute(0);
        } else {
            ig_md.queue_op = QOP_TOKEN_MATCHED;
            ig_md.qidx = pop.execute(0);
        }
    }
}

#endif
