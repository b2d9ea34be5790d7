/* Workers: the worker table, keyed by worker id: where a task for that worker goes
 * (port, MAC, IP). A TASK looks up the worker the cursor chose, a REPORT its sender:
 * an id without an entry is unknown, and neither takes a task nor has its depth set. */
#ifndef _R2P2_WORKERS_P4_
#define _R2P2_WORKERS_P4_

control Workers(in headers_t hdr, inout r2p2_md_t r2) {
    action to_worker(PortId_t port, mac_addr_t dmac, ipv4_addr_t dip) {
        r2.known = 1;
        r2.port = port;
        r2.dmac = dmac;
        r2.dip = dip;
    }
    action no_worker() {
        r2.known = 0;
    }
    table select_worker {
        key = { hdr.rain.worker_id : exact; }
        actions = { to_worker; no_worker; }
        default_action = no_worker();
        size = MAX_WORKERS;
    }
    apply {
        select_worker.apply();
    }
}

#endif
