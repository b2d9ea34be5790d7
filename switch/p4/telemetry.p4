/* Telemetry: in-band telemetry on every dispatched task (paper 3.3): the time the
 * task waited in the switch and the slice's queue length after it left. A task that
 * met a waiting token waited 0 ns behind 0 tasks. Times are the switch clock's low
 * 32 bits in ns: only differences are used, never compared with a host clock.
 * The controller turns stamping on with the default action of config_int. */
#ifndef _TELEMETRY_P4_
#define _TELEMETRY_P4_

control Telemetry(inout headers_t hdr, inout ingress_md_t ig_md, in bit<32> now) {
    action stamp() {
        ig_md.stamp_int = true;
    }
    action dont_stamp() {
        ig_md.stamp_int = false;
    }
    table config_int {
        actions = { stamp; dont_stamp; }
        default_action = dont_stamp();
        size = 1;
    }
    apply {
        config_int.apply();
        if (ig_md.stamp_int) {
            if (ig_md.queue_op == QOP_TASK_MATCHED) {
                hdr.rain.int_qdelay_ns = 0;
                hdr.rain.int_qlen = 0;
                hdr.rain.flags = hdr.rain.flags | FLAG_INT;
            } else if (ig_md.queue_op == QOP_TOKEN_MATCHED) {
                hdr.rain.int_qdelay_ns = now - ig_md.entry_tstamp;
                /* a token returns the balance it found, -n (n tasks waited); n - 1
                 * remain: ~(-n) == n - 1 */
                hdr.rain.int_qlen = (bit<32>)(~ig_md.balance);
                hdr.rain.flags = hdr.rain.flags | FLAG_INT;
            }
        }
    }
}

#endif
