/* SPDX-License-Identifier: Apache-2.0
 *
 * The RX/TX loop. Virtual ports (af_packet, af_xdp, ring) have one queue, so one loop
 * receives for every thread and transmits for every thread: frames are parsed here,
 * RoCEv2 WRITEs applied (as the NIC would), DISPATCHes handed to the FIFO of the
 * thread rain_hdr.worker_id names; the threads' responses and tokens come back
 * through the shared TX ring and leave on TX queue 0.
 *
 * Hardware hook (not implemented): on a NIC with flow steering, one rte_flow rule per
 * thread (UDP dst RAIN_UDP_PORT and rain_hdr.worker_id, a raw item at offset 12 of the
 * UDP payload -> RX queue i) puts each thread's tasks on its own RX queue, and each
 * thread owns TX queue i (rw_thread.txq). Each thread then runs rw_rx_iter on its queue
 * and rw_thread_iter, as rw_inline_main does for the single-queue case, and this loop
 * goes away (the NIC applies RoCE WRITEs itself): configure nb_rxq = nb_txq = threads in
 * main.c and pass the queue to rw_rx_iter.
 */
#include <string.h>
#include <time.h>

#include <rte_ethdev.h>
#include <rte_pause.h>

#include "worker.h"

/* --bench: this loop also plays the switch of a saturated system on a loopback port:
 * every TOKEN that comes back is turned into a DISPATCH for its worker (as a switch
 * with a backlog does at once), every RESPONSE is counted and freed (the client).
 * Returns true if the frame was consumed. */
static bool bench_reflect(struct rw_ctx *w, struct rain_hdr *rh, struct rte_mbuf *m)
{
	if (rh->kind == RAIN_RESPONSE) {
		RW_INC(w->rx.bench_responses);
		rte_pktmbuf_free(m);
		return true;
	}
	if (rh->kind == RAIN_TOKEN) {
		rh->kind = RAIN_DISPATCH;
		rh->flags = RAIN_F_INT;
		rh->client_id = rte_cpu_to_be_16(1);
		rh->request_id = rte_cpu_to_be_32((uint32_t)w->rx.bench_dispatches);
		rain_put_u64(rh->u.data, 0);
		rh->int_qdelay_ns = 0;
		rh->int_qlen = 0;
		RW_INC(w->rx.bench_dispatches);
	}
	return false;
}

#define RX_SHARED (-2) /* rx_one: the task went to the shared FIFO (--dispatcher) */

/* Returns the thread index that got work, RX_SHARED, or -1. */
static int rx_one(struct rw_ctx *w, struct rte_mbuf *m, uint64_t now)
{
	struct rain_view v;
	enum rain_drop d = rain_parse(m, &v);

	if (d != RAIN_DROP_NONE)
		goto drop;
	if (v.rh == NULL) { /* RoCEv2 */
		/* ibverbs: the NIC takes RoCE; one that still reaches us matched no QP of it. */
		d = w->c.rdma->rx ? w->c.rdma->rx(w, &v) : RAIN_DROP_ROCE_OFFLOADED;
		if (d != RAIN_DROP_NONE)
			goto drop;
		rte_pktmbuf_free(m);
		return -1;
	}
	if (w->c.bench_s > 0 && bench_reflect(w, v.rh, m))
		return -1;
	uint8_t kind = v.rh->kind;
	if (!(w->c.mode->rx_kinds & (1u << kind))) {
		d = RAIN_DROP_BAD_KIND;
		goto drop;
	}
	if (rain_dispatch_needs_fetch(&v) && !w->c.mode->fetch) { /* nothing to run it from */
		d = RAIN_DROP_TRUNCATED;
		goto drop;
	}
	uint32_t wid = rte_be_to_cpu_16(v.rh->worker_id);
	if (wid < w->c.worker_base || wid - w->c.worker_base >= w->c.threads) {
		d = RAIN_DROP_BAD_WORKER;
		goto drop;
	}
	struct rw_thread *t = &w->th[wid - w->c.worker_base];
	struct rw_meta *meta = rw_meta(w, m);
	uint8_t *frame = rte_pktmbuf_mtod(m, uint8_t *);
	meta->arrival_tsc = now;
	meta->udp_off = (uint16_t)((uint8_t *)v.udp - frame);
	meta->rh_off = (uint16_t)((uint8_t *)v.rh - frame);

	if (kind == RAIN_DISPATCH && w->shared_fifo != NULL) {
		/* The dispatcher: any of this server's worker ids, one FIFO, taken in order
		 * by whichever thread is idle. */
		if (rte_ring_free_count(w->shared_fifo) == 0) {
			RW_INC(w->disp_lost);
			d = RAIN_DROP_NO_ROOM;
			goto drop;
		}
		__atomic_store_n(&w->disp_dispatched, w->disp_dispatched + 1, __ATOMIC_RELEASE);
		rte_ring_sp_enqueue(w->shared_fifo, m);
		return RX_SHARED;
	}
	if (kind == RAIN_DISPATCH) {
		/* Single producer: free space seen now is still there at the enqueue. The
		 * count moves first so a thread never holds a task it has not counted. */
		if (rte_ring_free_count(t->fifo) == 0) {
			RW_INC(t->rx_lost);
			d = RAIN_DROP_NO_ROOM;
			goto drop;
		}
		/* A token left in the old slice by a move (Algorithm 1): the task still runs
		 * here; counted apart so it does not pass for one of the new slice's tokens. */
		if (rte_be_to_cpu_16(v.rh->slice) != RW_LOAD(t->ctl->knobs.slice))
			__atomic_store_n(&t->rx_other_slice, t->rx_other_slice + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&t->rx_dispatched, t->rx_dispatched + 1, __ATOMIC_RELEASE);
		rte_ring_sp_enqueue(t->fifo, m);
		return (int)t->idx;
	}
	if (rte_ring_sp_enqueue(t->fifo, m) == 0)
		return (int)t->idx;
	d = RAIN_DROP_NO_ROOM;
drop:
	RW_INC(w->rx.drops[d]);
	rte_pktmbuf_free(m);
	return -1;
}

static uint32_t workers_alive(const struct rw_ctx *w)
{
	return __atomic_load_n(&w->running, __ATOMIC_ACQUIRE);
}

uint64_t rw_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t rw_rx_iter(struct rw_ctx *w, struct rw_rx_state *st)
{
	struct rw_rx_stats *s = &w->rx;
	struct rte_mbuf *rx[RW_RX_BURST];
	uint16_t port = w->c.port_id;
	uint64_t t0 = 0;

	uint16_t n = rte_eth_rx_burst(port, 0, rx, RW_RX_BURST);
	RW_INC(s->polls);
	if (n) {
		t0 = rte_rdtsc(); /* the arrival time of the burst */
		RW_INC(s->rx_bursts);
		RW_ADD(s->rx_packets, n);
		uint64_t fed = 0; /* threads that got work (a bitmap: RW_MAX_THREADS is 64) */
		uint32_t shared = 0; /* tasks for any idle thread */
		for (uint16_t i = 0; i < n; i++) {
			int ti = rx_one(w, rx[i], t0);
			if (ti >= 0)
				fed |= 1ull << ti;
			else if (ti == RX_SHARED)
				shared++;
		}
		if ((fed || shared) && !w->c.inline_rx) {
			rte_atomic_thread_fence(__ATOMIC_SEQ_CST);
			while (fed) {
				rw_wake(&w->th[__builtin_ctzll(fed)]);
				fed &= fed - 1;
			}
			if (shared)
				rw_wake_idle(w, shared);
		}
	}
	if (st->npend < RW_RX_BURST)
		st->npend += rte_ring_dequeue_burst(w->tx_ring, (void **)&st->pend[st->npend],
						    RTE_DIM(st->pend) - st->npend, NULL);
	uint16_t sent = 0;
	if (st->npend) {
		sent = rte_eth_tx_burst(port, 0, st->pend, (uint16_t)st->npend);
		if (sent < st->npend)
			memmove(st->pend, st->pend + sent, (st->npend - sent) * sizeof(st->pend[0]));
		st->npend -= sent;
		RW_ADD(s->tx_packets, sent);
		/* A port that takes nothing for long (link down, peer gone) must not wedge
		 * the threads behind a full TX ring: drop and count. */
		st->stuck = sent ? 0 : st->stuck + 1;
		if (st->stuck > 100000 || (st->stuck > 1000 && rw_quitting(w) && workers_alive(w) == 0)) {
			RW_ADD(s->tx_dropped, st->npend);
			rte_pktmbuf_free_bulk(st->pend, st->npend);
			st->npend = 0;
			st->stuck = 0;
		}
	}
	if (n == 0 && sent == 0) {
		RW_INC(s->empty_polls);
		return 0;
	}
	if (t0) /* busy time is counted for bursts that received (TX-only turns are short) */
		RW_ADD(s->busy_cycles, rte_rdtsc() - t0);
	return n + sent;
}

int rw_rx_main(void *arg)
{
	struct rw_ctx *w = arg;
	struct rw_rx_state st = { 0 };
	struct rain_idle idle = w->c.idle;

	rain_idle_thread_init();
	__atomic_fetch_add(&w->started, 1, __ATOMIC_RELEASE);
	/* Keep transmitting until the threads have left, so their last answers go out. */
	while (!rw_quitting(w) || workers_alive(w) > 0 || st.npend > 0 || rte_ring_count(w->tx_ring) > 0) {
		if (rw_rx_iter(w, &st))
			rain_idle_reset(&idle);
		else if (st.npend)
			rte_pause();
		else
			rain_idle_wait(&idle);
	}
	w->rx.cpu_ns = rw_thread_cpu_ns();
	return 0;
}
