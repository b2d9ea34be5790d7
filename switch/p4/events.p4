/* Events: one counter per outcome (types.p4, EV_*); every ingress packet counts
 * exactly once, so drops of any reason are never silent. */
#ifndef _EVENTS_P4_
#define _EVENTS_P4_

control Events(in ingress_md_t ig_md) {
    Counter<bit<32>, bit<5>>(EVENT_COUNTERS, CounterType_t.PACKETS_AND_BYTES) events;
    apply {
        events.count(ig_md.event);
    }
}

#endif
