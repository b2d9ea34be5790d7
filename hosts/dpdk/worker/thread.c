/* SPDX-License-Identifier: Apache-2.0
 *
 * A worker thread: polls its FIFO, runs each task to completion, answers it and lets
 * the mode issue tokens/reports/pulls. Responses and control messages go to the shared
 * TX ring (MP enqueue, drained by the RX/TX loop), or straight to a TX queue the thread
 * owns (--inline-rx), in one burst per task, response first, so a switch never sees a
 * task's token before its response.
 *
 * Fetching (--mode pull, Draconis-SW): a large task the switch dispatched as its header
 * only is parked here while a FETCH goes to its client (the DISPATCH's source IP); the
 * FETCH_REPLY's payload runs it. One fetch at a time per thread (a pulling thread holds
 * one task); no reply within --fetch-timeout answers the task RAIN_F_FAILED, so a lost
 * reply costs that task only and the thread pulls again.
 */
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <rte_debug.h>
#include <rte_ethdev.h>
#include <rte_memcpy.h>
#include <rte_lcore.h>
#include <rte_pause.h>

#include "worker.h"

uint64_t rw_held(const struct rw_thread *t)
{
	return __atomic_load_n(&t->rx_dispatched, __ATOMIC_ACQUIRE) - t->finished;
}

/* Answered counts are read before the dispatched one, so the difference never goes
 * below zero (a thread answers only what the RX loop counted before). */
uint64_t rw_server_held(const struct rw_ctx *w)
{
	uint64_t fin = 0;
	for (uint32_t i = 0; i < w->c.threads; i++)
		fin += RW_LOAD(w->th[i].finished);
	uint64_t disp = __atomic_load_n(&w->disp_dispatched, __ATOMIC_ACQUIRE);
	return disp > fin ? disp - fin : 0;
}

uint64_t rw_report_load(const struct rw_thread *t)
{
	return t->w->c.dispatcher ? rw_server_held(t->w) : rw_held(t);
}

void rw_tx_add(struct rw_thread *t, struct rte_mbuf *m)
{
	if (t->ntx == RTE_DIM(t->txb))
		rw_tx_flush(t);
	t->txb[t->ntx++] = m;
}

/* Hand the burst to the TX ring; if the RX/TX loop cannot keep up, wait a bounded
 * while, then drop and count (a dropped token is not counted as sent). */
void rw_tx_flush(struct rw_thread *t)
{
	uint32_t done = 0, tries = 0;

	while (done < t->ntx) {
		if (t->txq >= 0)
			done += rte_eth_tx_burst(t->w->c.port_id, (uint16_t)t->txq, &t->txb[done], (uint16_t)(t->ntx - done));
		else
			done += rte_ring_enqueue_burst(t->w->tx_ring, (void **)&t->txb[done], t->ntx - done, NULL);
		if (done == t->ntx || ++tries > 100000 || rw_quitting(t->w))
			break;
		rte_pause();
		if ((tries & 63) == 0)
			sched_yield();
	}
	if (t->txq >= 0)
		RW_ADD(t->w->rx.tx_packets, done);
	for (uint32_t i = done; i < t->ntx; i++) {
		const struct rain_hdr *rh = rte_pktmbuf_mtod_offset(t->txb[i], const struct rain_hdr *, RAIN_L2L3L4_LEN);
		if (rh->kind == RAIN_TOKEN && t->tokens_sent > 0)
			t->tokens_sent--;
		t->tx_dropped++;
		rte_pktmbuf_free(t->txb[i]);
	}
	t->ntx = 0;
}

/* Control messages are built from a per-thread template: the addresses never change
 * and the IP checksum does not cover the rain_hdr, so one memcpy replaces the header
 * building (this is on the per-task path: one token per task). */
static void ctl_template(struct rw_thread *t)
{
	struct rte_mbuf *m;
	if (rain_alloc(t->w->mp, &m, 0) == NULL)
		rte_exit(EXIT_FAILURE, "mbuf pool empty at start-up\n"); /* init only */
	rain_fill_headers(m, &t->w->self, &t->w->sw, RAIN_HDR_LEN);
	memcpy(t->ctl_frame, rte_pktmbuf_mtod(m, void *), RAIN_FRAME_MIN);
	rte_pktmbuf_free(m);
}

int rw_send_ctl(struct rw_thread *t, uint8_t kind, uint16_t report)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(t->w->mp);

	if (m == NULL)
		return -1;
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);
	rte_memcpy(p, t->ctl_frame, RAIN_FRAME_MIN);
	m->data_len = m->pkt_len = RAIN_FRAME_MIN;
	struct rain_hdr *rh = (struct rain_hdr *)(p + RAIN_L2L3L4_LEN);
	rh->kind = kind;
	rh->slice = rte_cpu_to_be_16((uint16_t)RW_LOAD(t->ctl->knobs.slice));
	rh->worker_id = rte_cpu_to_be_16(kind == RAIN_REPORT ? t->report_id : t->worker_id);
	rh->report = rte_cpu_to_be_16(report);
	rh->request_id = rte_cpu_to_be_32((uint32_t)(t->tokens_sent + t->reports_sent + t->pulls_sent));
	rw_tx_add(t, m);
	return 0;
}

/* A descriptor names a slot of this thread's region; run it only if the slot's
 * header is the one the descriptor was made for (6.1). */
static bool desc_task(const struct rw_thread *t, const struct rain_hdr *rh, struct rw_task *task)
{
	const struct rw_ring *r = &t->w->ring;
	uint32_t slot = rte_be_to_cpu_32(rh->u.desc.slot);
	uint32_t len = rte_be_to_cpu_32(rh->u.desc.length);

	if (slot >= r->slots || len < RAIN_SLOT_HDR_LEN || len > r->slot_size)
		return false;
	const uint8_t *p = t->region + (uint64_t)slot * r->slot_size;
	struct rain_slot_hdr s;
	memcpy(&s, p, sizeof(s)); /* one snapshot: the RX loop may rewrite the slot */
	if (rte_be_to_cpu_32(s.magic) != RAIN_SLOT_MAGIC || s.client_id != rh->client_id ||
	    s.request_id != rh->request_id || rte_be_to_cpu_32(s.length) != len)
		return false;
	task->service_ns = rain_get_u64(s.arg);
	task->task_type = s.task_type;
	task->payload = p + RAIN_SLOT_HDR_LEN;
	task->payload_len = len - RAIN_SLOT_HDR_LEN;
	return true;
}

/* A DISPATCH of a large task without its payload (rain_dispatch_needs_fetch). */
static bool header_only(const struct rw_ctx *w, struct rte_mbuf *m, const struct rain_hdr *rh)
{
	const struct rte_udp_hdr *udp = rte_pktmbuf_mtod_offset(m, const struct rte_udp_hdr *, rw_meta(w, m)->udp_off);
	return (rh->flags & RAIN_F_LARGE) && rte_be_to_cpu_16(udp->dgram_len) == sizeof(*udp) + RAIN_HDR_LEN;
}

/* Run one DISPATCH and turn its frame into the RESPONSE. `fetched`: the payload of a
 * header-only large task (from its FETCH_REPLY); `refuse`: answer RAIN_F_FAILED
 * without running it. */
static void run_one(struct rw_thread *t, struct rte_mbuf *m, uint32_t behind_in_burst,
		    const struct rain_slot_hdr *fetched, bool refuse)
{
	struct rw_ctx *w = t->w;
	const struct rw_meta *meta = rw_meta(w, m);
	uint8_t *frame = rte_pktmbuf_mtod(m, uint8_t *);
	struct rain_view v = {
		.eth = (struct rte_ether_hdr *)frame,
		.ip = (struct rte_ipv4_hdr *)(frame + sizeof(struct rte_ether_hdr)),
		.udp = (struct rte_udp_hdr *)(frame + meta->udp_off),
		.rh = (struct rain_hdr *)(frame + meta->rh_off),
	};
	struct rain_hdr *rh = v.rh;
	struct rw_task task = { .rh = rh, .task_type = rh->task_type };
	struct rw_result res = { .buf = t->result, .cap = sizeof(t->result), .len = 0 };
	bool ok = true;

	if (refuse) {
		ok = false;
	} else if (fetched != NULL) { /* a header-only task's or a descriptor's payload, from its client */
		task.service_ns = rain_get_u64(fetched->arg);
		task.task_type = fetched->task_type;
		task.payload = (const uint8_t *)(fetched + 1);
		task.payload_len = rte_be_to_cpu_32(fetched->length) - RAIN_SLOT_HDR_LEN;
	} else if (rh->flags & RAIN_F_DESC) {
		if (!desc_task(t, rh, &task)) {
			ok = false;
			RW_INC(t->ctl->stats.desc_mismatch);
		}
	} else if ((rh->flags & RAIN_F_LARGE) && fetched == NULL && header_only(w, m, rh)) {
		ok = false; /* nothing to run it from */
	} else if (rh->flags & RAIN_F_LARGE) { /* rain_parse checked the slot header (frame or reply) */
		const struct rain_slot_hdr *s = fetched ? fetched : (const struct rain_slot_hdr *)(rh + 1);
		task.service_ns = rain_get_u64(s->arg);
		task.task_type = s->task_type;
		task.payload = (const uint8_t *)(s + 1);
		task.payload_len = rte_be_to_cpu_32(s->length) - RAIN_SLOT_HDR_LEN;
	} else {
		task.service_ns = rain_get_u64(rh->u.data);
	}

	uint64_t start = rte_rdtsc();
	if (ok)
		ok = w->c.handler->run(t, &task, &res) == 0;
	uint64_t end = rte_rdtsc();
	t->last_start = start;
	t->last_end = end;

	uint32_t fifo_len = rte_ring_count(t->fifo) + behind_in_burst; /* waiting now */

	/* The response: header (+ result), addresses swapped; the switch keeps the client's
	 * address as the dispatch's source. INT fields are left for the client. */
	if (res.len > res.cap)
		res.len = res.cap;
	uint32_t l4 = RAIN_HDR_LEN + res.len;
	if (res.len)
		memcpy(rh + 1, res.buf, res.len);
	uint32_t ihl = meta->udp_off - sizeof(struct rte_ether_hdr);
	v.ip->total_length = rte_cpu_to_be_16((uint16_t)(ihl + sizeof(struct rte_udp_hdr) + l4));
	v.udp->dgram_len = rte_cpu_to_be_16((uint16_t)(sizeof(struct rte_udp_hdr) + l4));
	m->data_len = m->pkt_len = meta->rh_off + l4;
	rain_swap_reply(&v);
	rh->kind = RAIN_RESPONSE;
	rh->flags = (uint8_t)((rh->flags & ~RAIN_F_LARGE) | (ok ? 0 : RAIN_F_FAILED));
	rh->worker_id = rte_cpu_to_be_16(t->worker_id);
	rh->report = rte_cpu_to_be_16(fifo_len > 0xffff ? 0xffff : (uint16_t)fifo_len);

	/* Sample (Algorithm 1 input) for tasks that ran; written before head moves. */
	struct rain_ctl_stats *st = &t->ctl->stats;
	if (ok) {
		struct rain_ctl_worker *cw = t->ctl;
		uint64_t head = cw->ring.head;
		struct rain_ctl_sample *s = &cw->samples[head & (RAIN_CTL_SAMPLES - 1)];
		uint64_t lw = rw_cycles_to_ns(w, start > meta->arrival_tsc ? start - meta->arrival_tsc : 0);
		uint64_t tw = rw_cycles_to_ns(w, end - start);
		bool has_int = (rh->flags & RAIN_F_INT) != 0;
		s->local_qdelay_ns = lw > UINT32_MAX ? UINT32_MAX : (uint32_t)lw;
		s->service_ns = tw > UINT32_MAX ? UINT32_MAX : (uint32_t)tw;
		s->switch_qdelay_ns = has_int ? rte_be_to_cpu_32(rh->int_qdelay_ns) : 0;
		s->switch_qlen = has_int ? rte_be_to_cpu_32(rh->int_qlen) : 0;
		__atomic_store_n(&cw->ring.head, head + 1, __ATOMIC_RELEASE);
		RW_INC(st->tasks_done);
		RW_ADD(st->busy_ns, tw);
	} else {
		RW_INC(st->failed);
	}
	RW_INC(t->finished);
	RW_STORE(st->fifo_len, fifo_len);
	rw_tx_add(t, m);
	w->c.mode->done(t);
	rw_tx_flush(t);
}

/* Ask the client for a header-only task's payload; the task waits in t->fetch_m.
 * Returns true if the task was answered at once (refused). */
static bool fetch_start(struct rw_thread *t, struct rte_mbuf *m, uint32_t behind)
{
	struct rw_ctx *w = t->w;
	const struct rw_meta *meta = rw_meta(w, m);
	const struct rain_hdr *rh = rte_pktmbuf_mtod_offset(m, const struct rain_hdr *, meta->rh_off);
	const struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, const struct rte_ipv4_hdr *,
								sizeof(struct rte_ether_hdr));
	struct rte_mbuf *f;
	struct rain_hdr *fh;

	if (t->fetch_m != NULL) { /* a pulling thread holds one task: a switch bug or a replay */
		RW_INC(t->fetch_refused);
		run_one(t, m, behind, NULL, true);
		return true;
	}
	if ((fh = rain_alloc(w->mp, &f, 0)) == NULL) {
		RW_INC(t->tx_dropped);
		run_one(t, m, behind, NULL, true);
		return true;
	}
	fh->kind = RAIN_FETCH;
	fh->task_type = rh->task_type;
	fh->slice = rh->slice;
	fh->client_id = rh->client_id;
	fh->request_id = rh->request_id;
	fh->worker_id = rte_cpu_to_be_16(t->worker_id); /* the FETCH_REPLY comes back to this thread */
	/* Via the switch, like every message: it forwards by IP. */
	struct rain_addr dst = { .mac = w->sw.mac, .ip = ip->src_addr, .port = rte_cpu_to_be_16(RAIN_UDP_PORT) };
	rain_fill_headers(f, &w->self, &dst, RAIN_HDR_LEN);
	rw_tx_add(t, f);
	rw_tx_flush(t); /* a FETCH lost here is a reply that never comes: the timeout answers */
	t->fetch_m = m;
	t->fetch_deadline = rte_rdtsc() + (uint64_t)((double)w->c.fetch_timeout_ns * (double)w->tsc_hz / 1e9);
	RW_INC(t->fetches_sent);
	return false;
}

/* A FETCH_REPLY: run the waiting task from its payload. Returns true if a task was answered. */
static bool fetch_reply(struct rw_thread *t, struct rte_mbuf *m, const struct rain_hdr *rh, uint32_t behind)
{
	struct rw_ctx *w = t->w;
	struct rte_mbuf *d = t->fetch_m;
	const struct rain_hdr *dh = d ? rte_pktmbuf_mtod_offset(d, const struct rain_hdr *, rw_meta(w, d)->rh_off) : NULL;

	if (dh == NULL || rh->client_id != dh->client_id || rh->request_id != dh->request_id) {
		RW_INC(t->fetch_stale); /* late (after its timeout), duplicate, or not ours */
		rte_pktmbuf_free(m);
		return false;
	}
	t->fetch_m = NULL;
	const struct rain_slot_hdr *s = (rh->flags & RAIN_F_LARGE) ? (const struct rain_slot_hdr *)(rh + 1) : NULL;
	if (s != NULL && (s->client_id != dh->client_id || s->request_id != dh->request_id))
		s = NULL; /* the payload of another task */
	if (s == NULL)
		RW_INC(t->fetch_bad);
	else
		RW_INC(t->fetch_replies);
	run_one(t, d, behind, s, s == NULL);
	rte_pktmbuf_free(m);
	return true;
}

static void fetch_expire(struct rw_thread *t)
{
	if (rte_rdtsc() < t->fetch_deadline)
		return;
	struct rte_mbuf *d = t->fetch_m;
	t->fetch_m = NULL;
	RW_INC(t->fetch_timeouts);
	run_one(t, d, 0, NULL, true);
}

uint32_t rw_thread_iter(struct rw_thread *t)
{
	struct rw_ctx *w = t->w;
	struct rain_ctl_stats *st = &t->ctl->stats;
	struct rte_mbuf *ms[RW_TASK_BURST];
	unsigned int i;

	if (unlikely(t->fetch_m != NULL))
		fetch_expire(t);
	w->c.mode->poll(t);
	rw_tx_flush(t);
	/* The dispatcher's FIFO is shared: take one task at a time, so a task never waits
	 * behind another in a busy thread's hands while a thread is idle (FCFS). */
	unsigned int n = rte_ring_dequeue_burst(t->fifo, (void **)ms, w->c.dispatcher ? 1 : RW_TASK_BURST, NULL);
	RW_STORE(st->polls, ++t->polls);
	if (n == 0) {
		RW_STORE(st->empty_polls, ++t->empty_polls);
		RW_STORE(st->fifo_len, 0);
		return 0;
	}
	for (i = 0; i < n && !rw_quitting(w); i++) {
		const struct rain_hdr *rh = rte_pktmbuf_mtod_offset(ms[i], const struct rain_hdr *, rw_meta(w, ms[i])->rh_off);
		bool ran = true;
		if (rh->kind == RAIN_DISPATCH) {
			if (w->c.dispatcher) /* this thread is the one that took it */
				__atomic_store_n(&t->rx_dispatched, t->rx_dispatched + 1, __ATOMIC_RELEASE);
			struct rw_task probe;
			if (w->c.mode->fetch && header_only(w, ms[i], rh)) {
				ran = fetch_start(t, ms[i], n - i - 1);
			} else if ((rh->flags & RAIN_F_DESC) && t->fetch_m == NULL && !desc_task(t, rh, &probe)) {
				/* A descriptor whose slot this thread never received: pre-written
				 * before it joined the slice (a move, Algorithm 1). Its client still
				 * has the payload: fetch it rather than fail the task. */
				RW_INC(t->ctl->stats.desc_mismatch);
				RW_INC(t->desc_fetches);
				ran = fetch_start(t, ms[i], n - i - 1);
			} else {
				run_one(t, ms[i], n - i - 1, NULL, false);
			}
		} else if (rh->kind == RAIN_FETCH_REPLY && (w->c.mode->fetch || t->fetch_m != NULL)) {
			ran = fetch_reply(t, ms[i], rh, n - i - 1);
		} else {
			w->c.mode->msg(t, ms[i], rh);
			ran = false;
		}
		/* busy time from the handler timestamps: no extra TSC reads per batch */
		if (ran)
			t->batch_start = t->batch_start ? t->batch_start : t->last_start;
	}
	for (; i < n; i++) /* stopping: finish the current task only */
		rte_pktmbuf_free(ms[i]);
	if (t->batch_start) {
		RW_ADD(t->loop_busy_cycles, t->last_end - t->batch_start);
		t->batch_start = 0;
	}
	return n;
}

static void thread_begin(struct rw_thread *t)
{
	rain_idle_thread_init();
	t->idle = t->w->c.idle;
	ctl_template(t);
	__atomic_fetch_add(&t->w->running, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&t->w->started, 1, __ATOMIC_RELEASE);
	t->w->c.mode->start(t);
	rw_tx_flush(t);
}

static void thread_end(struct rw_thread *t)
{
	if (t->fetch_m != NULL) { /* stopping: its client is told rather than left to time out */
		struct rte_mbuf *d = t->fetch_m;
		t->fetch_m = NULL;
		run_one(t, d, 0, NULL, true);
	}
	rw_tx_flush(t);
	t->cpu_ns = rw_thread_cpu_ns();
	__atomic_fetch_sub(&t->w->running, 1, __ATOMIC_RELEASE);
}

void rw_wake_idle(struct rw_ctx *w, uint32_t n)
{
	for (uint32_t i = 0; i < w->c.threads && n > 0; i++)
		if (__atomic_load_n(&w->th[i].parked, __ATOMIC_RELAXED)) {
			rw_wake(&w->th[i]);
			n--;
		}
}

void rw_wake(struct rw_thread *t)
{
	if (__atomic_load_n(&t->parked, __ATOMIC_RELAXED)) {
		__atomic_store_n(&t->parked, 0, __ATOMIC_RELAXED);
		syscall(SYS_futex, &t->parked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		RW_INC(t->wakeups);
	}
}

/* --idle sleep, after the yielding spell: park on a futex until the RX loop hands this
 * thread something (or RW_PARK_NS passes: knobs, pulls). Idle threads then cost no CPU,
 * which matters when a switch, clients and workers share two cores. */
static void thread_idle(struct rw_thread *t)
{
	struct rain_idle *idle = &t->idle;

	if (idle->mode != RAIN_IDLE_SLEEP || idle->empty < idle->sleep_after) {
		rain_idle_wait(idle);
		return;
	}
	rain_idle_count(idle);
	__atomic_store_n(&t->parked, 1, __ATOMIC_SEQ_CST);
	if (rte_ring_count(t->fifo) == 0 && !rw_quitting(t->w)) {
		/* long idle (no load): look at the knobs less often, the RX loop wakes us anyway */
		bool lng = rain_idle_is_long(idle) && t->fetch_m == NULL; /* a fetch's timeout is near */
		struct timespec ts = { 0, lng ? RW_PARK_LONG_NS : RW_PARK_NS };
		syscall(SYS_futex, &t->parked, FUTEX_WAIT_PRIVATE, 1, &ts, NULL, 0);
	}
	__atomic_store_n(&t->parked, 0, __ATOMIC_RELAXED);
}

int rw_thread_main(void *arg)
{
	struct rw_thread *t = arg;

	thread_begin(t);
	while (!rw_quitting(t->w)) {
		if (rw_thread_iter(t))
			rain_idle_reset(&t->idle);
		else
			thread_idle(t);
	}
	thread_end(t);
	return 0;
}

/* --inline-rx: the single thread polls the port itself and transmits directly, run to
 * completion with no hand-off between CPUs (what a thread owning an RX/TX queue pair
 * does on hardware). A frame that arrives while a task runs is stamped when the task
 * ends, so L_w misses the time it waited in the port's queue. */
int rw_inline_main(void *arg)
{
	struct rw_ctx *w = arg;
	struct rw_thread *t = &w->th[0];
	struct rw_rx_state st = { 0 };

	__atomic_fetch_add(&w->started, 1, __ATOMIC_RELEASE); /* stands for the RX loop */
	thread_begin(t);
	while (!rw_quitting(w)) {
		uint32_t work = rw_rx_iter(w, &st);
		work += rw_thread_iter(t);
		if (work)
			rain_idle_reset(&t->idle);
		else
			rain_idle_wait(&t->idle);
	}
	thread_end(t);
	for (int i = 0; i < 1000 && rw_rx_iter(w, &st); i++) /* last answers still in the ring */
		;
	w->rx.cpu_ns = t->cpu_ns;
	return 0;
}
