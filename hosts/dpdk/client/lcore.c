/* SPDX-License-Identifier: Apache-2.0
 *
 * The load lcore: one loop that receives, expires, generates, admits and
 * transmits, in that order, and only counts when something goes wrong.
 *
 * Time is the TSC. Arrivals are drawn ahead as doubles (cycles since t0) so
 * rounding never accumulates; a request's latency runs from its intended time,
 * whatever delayed it (a busy lcore, the admission cap, a full TX ring).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf_dyn.h>

#include "client.h"
#include "rain_kv.h"

int rc_tsc_dynfield = -1; /* receive TSC of a reply handed to another lcore */

static inline uint64_t *rx_tsc(struct rte_mbuf *m)
{
	return RTE_MBUF_DYNFIELD(m, rc_tsc_dynfield, uint64_t *);
}

static uint32_t pow2_at_least(uint64_t n)
{
	uint32_t p = 1;
	while (p < n && p < (1u << 30))
		p <<= 1;
	return p;
}

static uint32_t large_len(uint32_t bytes)
{
	uint32_t l = bytes < RAIN_SLOT_HDR_LEN ? RAIN_SLOT_HDR_LEN : bytes;
	return (l + 3) & ~3u; /* RDMA WRITE lengths are 4-byte aligned */
}

static void make_tmpl(struct rc_lcore *lc, struct rc_tmpl *t, const struct rc_class *c, uint32_t payload,
		      uint8_t flags)
{
	const struct rc_config *cfg = rc.cfg;
	struct rte_mbuf *m;
	struct rain_hdr *rh = rain_alloc(lc->mp, &m, payload);
	if (rh == NULL)
		rte_exit(EXIT_FAILURE, "cannot build a frame template: mbuf pool too small\n");
	rh->kind = RAIN_TASK;
	rh->flags = flags;
	rh->task_type = c->task_type;
	rh->client_id = rte_cpu_to_be_16(lc->client_id);
	struct rain_addr src = cfg->src;
	rte_eth_macaddr_get(cfg->port_id, &src.mac);
	rain_fill_headers(m, &src, &cfg->dst, RAIN_HDR_LEN + payload);
	memcpy(t->bytes, rte_pktmbuf_mtod(m, uint8_t *), RAIN_FRAME_MIN);
	t->l4_len = RAIN_HDR_LEN + payload;
	t->payload = payload;
	rte_pktmbuf_free(m);
}

void rc_lcore_setup(struct rc_lcore *lc, unsigned idx, unsigned lcore_id, struct rte_mempool *mp)
{
	const struct rc_config *cfg = rc.cfg;
	double peak = 0;

	memset(lc, 0, sizeof(*lc));
	lc->idx = idx;
	lc->lcore_id = lcore_id;
	lc->queue = (uint16_t)idx;
	lc->client_id = (uint16_t)(cfg->client_host << 8 | idx);
	lc->mp = mp;
	lc->idle = cfg->idle;
	lc->rt.prio = cfg->realtime;
	lc->idle.rt = &lc->rt;
	lc->next_id = lc->tmo_id = (uint32_t)cfg->epoch << RC_EPOCH_SHIFT;
	rng_seed(&lc->rng, cfg->seed + idx);

	for (unsigned s = 0; s < cfg->nseg; s++) {
		double rate = cfg->seg[s].rps / rc.nlcores; /* this lcore's share */
		lc->mean_gap[s] = rate > 0 ? (double)rc.hz / rate : 0;
		/* late = more than max(1 us of paper time, 1% of this lcore's mean
		 * inter-arrival) behind: under time dilation k, 1 us of the paper is k us here */
		double thresh = fmax(cfg->dilation * (double)rc.hz / 1e6, 0.01 * lc->mean_gap[s]);
		lc->late_thresh[s] = (uint64_t)thresh;
		lc->seg_end[s] = s + 1 < cfg->nseg ? cfg->seg[s + 1].t_s * (double)rc.hz : INFINITY;
		if (rate > peak)
			peak = rate;
	}

	for (unsigned c = 0; c < cfg->ncls; c++) {
		const struct rc_class *k = &cfg->cls[c];
		if (k->payload == RAIN_INLINE_BYTES) {
			make_tmpl(lc, &lc->tmpl_inline[c], k, 0, 0);
			if (cfg->large_fraction > 0)
				make_tmpl(lc, &lc->tmpl_large[c], k, large_len(cfg->large_bytes) + ROCE_ICRC_LEN,
					  RAIN_F_LARGE);
		} else {
			make_tmpl(lc, &lc->tmpl_large[c], k, large_len(k->payload) + ROCE_ICRC_LEN, RAIN_F_LARGE);
		}
	}

	char name[RTE_RING_NAMESIZE];
	snprintf(name, sizeof(name), "rc_handoff%u", idx);
	lc->handoff = rte_ring_create(name, 1024, rte_lcore_to_socket_id(lcore_id), RING_F_SC_DEQ);
	if (lc->handoff == NULL)
		rte_exit(EXIT_FAILURE, "cannot create ring %s: %s\n", name, rte_strerror(rte_errno));

	if (cfg->trace != NULL) {
		lc->trace_cap = pow2_at_least((uint64_t)fmin(peak * (cfg->warmup_s + cfg->duration_s) * 1.2 + 1024,
							     1 << 22));
		lc->trace = calloc(lc->trace_cap, sizeof(*lc->trace));
		if (lc->trace == NULL)
			rte_exit(EXIT_FAILURE, "out of memory for the trace\n");
	}
	if (cfg->tx_only)
		return;

	/* The table must hold every request that can be outstanding: the cap, or what a
	 * timeout's worth of arrivals can leave behind. Its size is also a hard cap
	 * (a request waits rather than overwrite a live entry). calloc: pages are only
	 * touched when used, and first by this lcore. */
	double timeouts = cfg->resubmit ? 2.0 : 1.0;
	uint64_t want = (uint64_t)fmin(peak * (double)cfg->timeout_us * 1e-6 * timeouts * 1.25, 1 << 22);
	if (cfg->max_outstanding) {
		lc->cap = cfg->max_outstanding / rc.nlcores + (idx < cfg->max_outstanding % rc.nlcores);
		want = 2ull * lc->cap;
	}
	uint32_t size = pow2_at_least(want < 4096 ? 4096 : want);
	if (!cfg->max_outstanding)
		lc->cap = size;
	lc->mask = size - 1;
	lc->tab = calloc(size, sizeof(*lc->tab));
	lc->rs = calloc(size, sizeof(*lc->rs));
	/* Requests that wait for admission: at most a run's worth of arrivals. */
	double run_s = cfg->warmup_s + cfg->duration_s;
	uint32_t wsize = pow2_at_least((uint64_t)fmin(peak * run_s + 1024, 1 << 22));
	lc->wq_mask = wsize - 1;
	lc->wq = calloc(wsize, sizeof(*lc->wq));
	if (lc->tab == NULL || lc->rs == NULL || lc->wq == NULL)
		rte_exit(EXIT_FAILURE, "lcore %u: out of memory for %u requests\n", idx, size);

	for (unsigned c = 0; c < cfg->ncls; c++) {
		lc->lat[c] = calloc(rc.nint, sizeof(struct hdr_hist));
		lc->sd[c] = calloc(rc.nint, sizeof(struct hdr_hist));
		if (lc->lat[c] == NULL || lc->sd[c] == NULL)
			rte_exit(EXIT_FAILURE, "out of memory for histograms\n");
		for (unsigned k = 0; k < rc.nint; k++)
			if (hdr_init(&lc->lat[c][k]) != 0 || hdr_init(&lc->sd[c][k]) != 0)
				rte_exit(EXIT_FAILURE, "out of memory for histograms\n");
	}
}

/* --- the schedule ---------------------------------------------------------- */

/* Boundaries are compared a hair (1e-6 of a gap) early: an arrival computed as
 * exactly on a boundary belongs to the next piece, whichever way it rounded. */
static void set_limits(struct rc_lcore *lc)
{
	for (unsigned s = 0; s < rc.cfg->nseg; s++)
		lc->seg_lim[s] = fmin(lc->seg_end[s], lc->end_rel) - 1e-6 * lc->mean_gap[s];
}

/* Draw arrival k of the current piece, unless the last draw already `crossed` its
 * end (drawing again would bias the gap): then the process restarts at the boundary
 * with the next rate (a rate-0 piece is skipped). */
static void schedule_slow(struct rc_lcore *lc, bool crossed)
{
	const struct rc_config *cfg = rc.cfg;
	for (;; crossed = false) {
		unsigned s = lc->seg;
		double gap = lc->mean_gap[s];
		if (!crossed && gap > 0) {
			double off = cfg->arrival->next(&lc->rng, gap, lc->phase, lc->k, lc->seg_off);
			if (lc->seg_start + off < lc->seg_lim[s]) {
				lc->seg_off = off;
				lc->next_rel = lc->seg_start + off;
				lc->k++;
				return;
			}
		}
		if (s + 1 >= cfg->nseg || lc->seg_end[s] >= lc->end_rel) {
			lc->gen_done = true;
			return;
		}
		lc->seg = s + 1;
		lc->seg_start = lc->seg_end[s];
		lc->seg_off = 0;
		lc->k = 0;
	}
}

static void schedule_first(struct rc_lcore *lc)
{
	lc->end_rel = (double)(rc.te - rc.t0);
	lc->phase = (double)lc->idx / rc.nlcores;
	set_limits(lc);
	lc->seg = 0;
	lc->seg_start = lc->seg_off = 0;
	lc->k = 0;
	schedule_slow(lc, false);
}

/* The next arrival. The current piece never has rate 0 (schedule_slow skips those). */
static inline void schedule_next(struct rc_lcore *lc)
{
	unsigned s = lc->seg;
	double off = rc.cfg->arrival->next(&lc->rng, lc->mean_gap[s], lc->phase, lc->k, lc->seg_off);
	double t = lc->seg_start + off;
	if (likely(t < lc->seg_lim[s])) {
		lc->seg_off = off;
		lc->next_rel = t;
		lc->k++;
	} else {
		schedule_slow(lc, true);
	}
}

/* The class of the arrival just drawn, by the weights of its schedule piece (a class
 * the piece leaves out has a zero-width step in the CDF and is never picked). */
static inline unsigned pick_class(struct rc_lcore *lc)
{
	unsigned n = rc.cfg->ncls;
	if (n == 1)
		return 0;
	const double *cdf = rc.cls_cdf[lc->seg];
	double u = rng_unit(&lc->rng) * cdf[n - 1];
	for (unsigned c = 0; c < n - 1; c++)
		if (u <= cdf[c] && cdf[c] > (c ? cdf[c - 1] : 0))
			return c;
	return n - 1;
}

/* --- sending --------------------------------------------------------------- */

static inline bool in_window(uint64_t tsc)
{
	return tsc >= rc.tw && tsc < rc.te;
}

/* A large task's bytes after its header: made from the request alone (its header and
 * length), so a FETCH is answered by making them again rather than keeping them. */
static inline void put_slot(const struct rain_hdr *rh, uint32_t slot_len)
{
	struct rain_slot_hdr *s = (struct rain_slot_hdr *)(uintptr_t)(rh + 1);
	s->magic = rte_cpu_to_be_32(RAIN_SLOT_MAGIC);
	s->client_id = rh->client_id;
	s->task_type = rh->task_type;
	s->flags = rh->flags;
	s->request_id = rh->request_id;
	s->length = rte_cpu_to_be_32(slot_len);
	memcpy(s->arg, rh->u.data, RAIN_INLINE_BYTES);
	memset((uint8_t *)(s + 1), 0xa5, slot_len - RAIN_SLOT_HDR_LEN);
}

static __rte_always_inline void build(struct rc_lcore *lc, struct rte_mbuf *m, unsigned cls, bool large, uint32_t id,
		  uint64_t service_ns, uint8_t extra_flags)
{
	const struct rc_tmpl *t = large ? &lc->tmpl_large[cls] : &lc->tmpl_inline[cls];
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);
	memcpy(p, t->bytes, RAIN_FRAME_MIN);
	struct rain_hdr *rh = (struct rain_hdr *)(p + RAIN_L2L3L4_LEN);
	rh->flags |= extra_flags;
	rh->request_id = rte_cpu_to_be_32(id);
	rain_put_u64(rh->u.data, service_ns);
	if (large) {
		uint32_t slot_len = t->payload - ROCE_ICRC_LEN;
		put_slot(rh, slot_len);
		memset((uint8_t *)(rh + 1) + slot_len, 0, ROCE_ICRC_LEN); /* becomes the iCRC of an RDMA WRITE */
	}
	m->data_len = m->pkt_len = RAIN_FRAME_MIN + t->payload;
}

static unsigned flush(struct rc_lcore *lc)
{
	if (lc->ntx == 0)
		return 0;
	uint16_t n = rte_eth_tx_burst(rc.cfg->port_id, lc->queue, lc->txb, (uint16_t)lc->ntx);
	lc->run.tx_frames += n;
	if (n < lc->ntx) {
		memmove(lc->txb, lc->txb + n, (lc->ntx - n) * sizeof(lc->txb[0]));
		lc->run.tx_retries++;
	}
	lc->ntx -= n;
	return n;
}

/* mbufs come back to the pool with next = NULL, nb_segs = 1 and refcnt = 1 (that is
 * what freeing guarantees), so only what a TX without offloads reads is set here;
 * build() sets the lengths. One mempool call per burst, as testpmd's txonly does. */
static inline struct rte_mbuf *get_mbuf(struct rc_lcore *lc)
{
	if (unlikely(lc->nstash == 0)) {
		if (rte_mempool_get_bulk(lc->mp, (void **)lc->stash, RC_BURST) != 0)
			return rte_pktmbuf_alloc(lc->mp); /* nearly empty pool: one at a time */
		lc->nstash = RC_BURST;
	}
	struct rte_mbuf *m = lc->stash[--lc->nstash];
	m->data_off = RTE_PKTMBUF_HEADROOM;
	m->ol_flags = 0;
	m->tx_offload = 0;
	return m;
}

static inline bool can_admit(const struct rc_lcore *lc)
{
	if (rc.cfg->tx_only)
		return true;
	uint8_t st = lc->tab[lc->next_id & lc->mask].state;
	return lc->outstanding < lc->cap && st != RQ_SENT && st != RQ_RESENT;
}

/* Send a new request now; false (nothing changed) if no mbuf. */
static __rte_always_inline bool send_new(struct rc_lcore *lc, const struct rc_wait *w, uint64_t now, bool admission_wait)
{
	struct rte_mbuf *m = get_mbuf(lc);
	if (unlikely(m == NULL)) {
		lc->run.mbuf_failed++;
		return false;
	}
	uint32_t id = lc->next_id++;
	build(lc, m, w->cls, w->large, id, w->service_ns, 0);
	lc->txb[lc->ntx++] = m;
	if (unlikely(lc->trace != NULL)) {
		if (lc->ntrace < lc->trace_cap) /* one entry per first send: the sequence number is its index */
			lc->trace[lc->ntrace++] = (struct rc_trace){id, w->cls, w->large, w->intended, now,
								    rc.cfg->cls[w->cls].svc.ops->kv ? 0 : w->service_ns, -1};
		else
			lc->trace_dropped++;
	}
	if (!rc.cfg->tx_only) {
		struct rc_req *e = &lc->tab[id & lc->mask];
		e->id = id;
		e->cls = w->cls;
		e->state = RQ_SENT;
		e->flags = (w->measured ? RQ_F_MEASURED : 0) | (w->large ? RQ_F_LARGE : 0);
		e->intended = w->intended;
		e->sent = now;
		e->service_ns = w->service_ns;
		if (++lc->outstanding > lc->run.max_outstanding_seen)
			lc->run.max_outstanding_seen = lc->outstanding;
	}
	if (w->measured) {
		struct rc_counters *k = &lc->cnt[w->cls];
		k->sent++;
		k->large += w->large;
		k->sent_in_window += in_window(now);
		if (!admission_wait) {
			uint64_t lag = now > w->intended ? now - w->intended : 0;
			if (lag > lc->late_thresh[lc->seg]) {
				k->late_sends++;
				if (lag > k->max_lag_tsc)
					k->max_lag_tsc = lag;
			}
		}
	}
	return true;
}

static bool wq_push(struct rc_lcore *lc, const struct rc_wait *w)
{
	if (lc->wq_tail - lc->wq_head > lc->wq_mask)
		return false;
	lc->wq[lc->wq_tail++ & lc->wq_mask] = *w;
	return true;
}

static unsigned generate(struct rc_lcore *lc, uint64_t now)
{
	const struct rc_config *cfg = rc.cfg;
	unsigned n = 0;

	while (!lc->gen_done && n < RC_BURST && lc->ntx < RC_TXB) {
		uint64_t intended = rc.t0 + (uint64_t)(int64_t)lc->next_rel; /* signed: one instruction */
		if (intended > now)
			break;
		struct rc_wait w;
		uint32_t keys;
		w.intended = intended;
		w.cls = (uint8_t)pick_class(lc);
		const struct rc_class *c = &cfg->cls[w.cls];
		w.service_ns = c->svc.ops->draw(&c->svc, &lc->rng, &keys);
		w.large = c->payload > RAIN_INLINE_BYTES ||
			  (cfg->large_fraction > 0 && rng_unit(&lc->rng) <= cfg->large_fraction);
		w.measured = in_window(intended);
		if (w.measured) {
			struct rc_counters *k = &lc->cnt[w.cls];
			k->offered++;
			if (!c->svc.ops->kv) { /* a kv request's service time comes with its answer */
				k->service_ns_sum += w.service_ns;
				k->service_n++;
			}
			k->keys_sum += keys;
		}
		if (lc->wq_head == lc->wq_tail && can_admit(lc)) {
			if (!send_new(lc, &w, now, false) && !wq_push(lc, &w) && w.measured)
				lc->cnt[w.cls].not_sent++;
		} else if (wq_push(lc, &w)) {
			if (w.measured)
				lc->cnt[w.cls].waited++;
		} else if (w.measured) {
			lc->cnt[w.cls].not_sent++; /* backlog full: counted, never silent */
		}
		schedule_next(lc);
		n++;
	}
	return n;
}

/* Requests waiting for a slot leave in FIFO order as slots free. */
static unsigned admit(struct rc_lcore *lc, uint64_t now)
{
	unsigned n = 0;
	while (lc->wq_head != lc->wq_tail && n < RC_BURST && lc->ntx < RC_TXB && can_admit(lc)) {
		if (!send_new(lc, &lc->wq[lc->wq_head & lc->wq_mask], now, true))
			break;
		lc->wq_head++;
		n++;
	}
	return n;
}

/* --- replies and timeouts ---------------------------------------------------- */

static void resend(struct rc_lcore *lc, struct rc_req *e, uint64_t now)
{
	e->flags |= RQ_F_RESUBMITTED;
	e->state = RQ_RESENT;
	e->sent = now;
	if (e->flags & RQ_F_MEASURED)
		lc->cnt[e->cls].resubmitted++;
	lc->rs[lc->rs_tail++ & lc->mask] = e->id;
	if (lc->ntx == RC_TXB)
		flush(lc);
	struct rte_mbuf *m = lc->ntx < RC_TXB ? get_mbuf(lc) : NULL;
	if (unlikely(m == NULL)) { /* it will time out like a lost resend */
		lc->run.mbuf_failed++;
		return;
	}
	build(lc, m, e->cls, e->flags & RQ_F_LARGE, e->id, e->service_ns, RAIN_F_RESUBMIT);
	lc->txb[lc->ntx++] = m;
}

static void finish(struct rc_lcore *lc, struct rc_req *e, uint8_t state)
{
	e->state = state;
	lc->outstanding--;
}

static void expire(struct rc_lcore *lc, struct rc_req *e, uint64_t now)
{
	/* the resubmission ring holds one entry per resent id; full means the table
	 * is far behind, so give up on this one rather than overwrite */
	if (rc.cfg->resubmit && !(e->flags & RQ_F_RESUBMITTED) && lc->rs_tail - lc->rs_head <= lc->mask) {
		resend(lc, e, now);
		return;
	}
	finish(lc, e, RQ_TIMEDOUT);
	if (e->flags & RQ_F_MEASURED)
		lc->cnt[e->cls].timed_out++;
}

static unsigned check_timeouts(struct rc_lcore *lc, uint64_t now)
{
	unsigned n = 0;
	/* first sends leave in id order, so their deadlines are in id order too */
	while (lc->tmo_id != lc->next_id && n < RC_BURST) {
		struct rc_req *e = &lc->tab[lc->tmo_id & lc->mask];
		if (e->id != lc->tmo_id || e->state != RQ_SENT) {
			lc->tmo_id++;
			continue;
		}
		if (now - e->sent < rc.timeout_tsc)
			break;
		expire(lc, e, now);
		lc->tmo_id++;
		n++;
	}
	/* resends, in resend order */
	while (lc->rs_head != lc->rs_tail && n < RC_BURST) {
		uint32_t id = lc->rs[lc->rs_head & lc->mask];
		struct rc_req *e = &lc->tab[id & lc->mask];
		if (e->id != id || e->state != RQ_RESENT) {
			lc->rs_head++;
			continue;
		}
		if (now - e->sent < rc.timeout_tsc)
			break;
		expire(lc, e, now);
		lc->rs_head++;
		n++;
	}
	return n;
}

/* A kv request's service time: what the worker said it took (rain_kv.h's result after
 * the response header), or 0 when the response carries none. */
static uint64_t kv_service_ns(const struct rain_view *v)
{
	if (v->l4_len < RAIN_HDR_LEN + RAIN_KV_RESULT_LEN)
		return 0;
	return rain_get_u64(v->l4_payload + RAIN_HDR_LEN);
}

static inline bool this_point(struct rc_lcore *lc, uint32_t id)
{
	if (likely(id >> RC_EPOCH_SHIFT == rc.cfg->epoch))
		return true;
	lc->run.other_point++;
	return false;
}

static void complete(struct rc_lcore *lc, const struct rain_view *v, uint64_t t)
{
	const struct rain_hdr *rh = v->rh;
	uint32_t id = rte_be_to_cpu_32(rh->request_id);
	if (!this_point(lc, id))
		return;
	struct rc_req *e = &lc->tab[id & lc->mask];
	if (e->id != id || (e->state != RQ_SENT && e->state != RQ_RESENT)) {
		/* Each case apart, so that a run folder says which it was (a lost task's answer
		 * arriving late is benign; a second answer means a task ran twice). */
		if (e->id != id)
			lc->run.unknown_reply++; /* the entry is a later request's now */
		else if (e->state == RQ_TIMEDOUT && (e->flags & RQ_F_MEASURED))
			lc->cnt[e->cls].late_reply++;
		else if (e->state == RQ_TIMEDOUT)
			lc->run.warmup_late_reply++;
		else if (e->state == RQ_DONE)
			lc->run.dup_reply++;
		else
			lc->run.unknown_reply++;
		return;
	}
	struct rc_counters *k = &lc->cnt[e->cls];
	bool measured = e->flags & RQ_F_MEASURED;
	if (rh->kind == RAIN_REJECT) {
		if (measured)
			k->rejected++;
		if (rc.cfg->resubmit && !(e->flags & RQ_F_RESUBMITTED) && lc->rs_tail - lc->rs_head <= lc->mask)
			resend(lc, e, t);
		else
			finish(lc, e, RQ_DONE);
		return;
	}
	finish(lc, e, RQ_DONE);
	uint64_t lat = (uint64_t)((double)(t - e->intended) * 1e9 / (double)rc.hz);
	bool kv = rc.cfg->cls[e->cls].svc.ops->kv;
	uint64_t service_ns = e->service_ns;
	bool failed = (rh->flags & RAIN_F_FAILED) != 0;
	if (kv && !failed && (service_ns = kv_service_ns(v)) == 0) {
		lc->run.kv_no_result++; /* answered without a result: not rain-worker --handler rocksdb */
		failed = true;
	}
	/* Sequence numbers are the trace's indices (one entry per first send, from 0) until
	 * the trace is full; the check keeps a full trace's later ids out. */
	uint32_t seq = e->id & RC_SEQ_MASK;
	if (unlikely(lc->trace != NULL) && seq < lc->ntrace && lc->trace[seq].id == e->id && !failed) {
		lc->trace[seq].latency_ns = (int64_t)lat;
		if (kv)
			lc->trace[seq].service_ns = service_ns;
	}
	if (!measured)
		return;
	if (failed) {
		k->failed++;
		return;
	}
	k->received++;
	if (kv) {
		k->service_ns_sum += service_ns;
		k->service_n++;
	}
	uint64_t kint = (e->intended - rc.tw) / rc.hz;
	if (kint >= rc.nint)
		kint = rc.nint - 1;
	hdr_record(&lc->lat[e->cls][kint], lat);
	if (service_ns > 0) /* slowdown x1000 keeps three decimals in integer buckets */
		hdr_record(&lc->sd[e->cls][kint], (uint64_t)((double)lat * 1000.0 / (double)service_ns));
}

/* A worker FETCHes a large task's payload (Draconis-SW: the switch dispatched only its
 * header): answer with a FETCH_REPLY to the FETCH's sender, the payload made again
 * from the request. Only a large request still outstanding is answered. */
static void answer_fetch(struct rc_lcore *lc, const struct rain_view *v)
{
	uint32_t id = rte_be_to_cpu_32(v->rh->request_id);
	if (!this_point(lc, id))
		return;
	const struct rc_req *e = &lc->tab[id & lc->mask];
	if (e->id != id || (e->state != RQ_SENT && e->state != RQ_RESENT) || !(e->flags & RQ_F_LARGE)) {
		lc->run.fetch_unknown++; /* answered or timed out already, or never large */
		return;
	}
	const struct rc_tmpl *t = &lc->tmpl_large[e->cls];
	uint32_t slot_len = t->payload - ROCE_ICRC_LEN;
	struct rte_mbuf *m;
	struct rain_hdr *rh;
	if (lc->ntx == RC_TXB)
		flush(lc);
	if (lc->ntx == RC_TXB || (rh = rain_alloc(lc->mp, &m, slot_len)) == NULL) {
		lc->run.fetch_dropped++; /* the worker's timeout fails the task */
		return;
	}
	const struct rain_hdr *th = (const struct rain_hdr *)(t->bytes + RAIN_L2L3L4_LEN);
	rh->kind = RAIN_FETCH_REPLY;
	rh->flags = RAIN_F_LARGE;
	rh->task_type = th->task_type;
	rh->slice = v->rh->slice;
	rh->client_id = v->rh->client_id;
	rh->request_id = v->rh->request_id;
	rh->worker_id = v->rh->worker_id; /* the worker's RX loop hands it to this thread */
	rain_put_u64(rh->u.data, e->service_ns);
	put_slot(rh, slot_len);
	struct rain_addr src = { .ip = rc.cfg->src.ip, .port = v->udp->dst_port };
	struct rain_addr dst = { .ip = v->ip->src_addr, .port = v->udp->src_port };
	rte_ether_addr_copy(&((const struct rte_ether_hdr *)t->bytes)->src_addr, &src.mac);
	rte_ether_addr_copy(&v->eth->src_addr, &dst.mac); /* the switch, next hop back */
	rain_fill_headers(m, &src, &dst, RAIN_HDR_LEN + slot_len);
	lc->txb[lc->ntx++] = m;
	lc->run.fetches++;
}

/* A frame from the port: a reply for this lcore, for another lcore, or a drop. */
static void on_frame(struct rc_lcore *lc, struct rte_mbuf *m, uint64_t t, bool handed)
{
	struct rain_view v;
	enum rain_drop d = rain_parse(m, &v);
	if (unlikely(d != RAIN_DROP_NONE || v.rh == NULL)) {
		lc->run.drops[d != RAIN_DROP_NONE ? d : RAIN_DROP_NOT_OURS]++;
		rte_pktmbuf_free(m);
		return;
	}
	if (unlikely(v.rh->kind != RAIN_RESPONSE && v.rh->kind != RAIN_REJECT && v.rh->kind != RAIN_FETCH)) {
		lc->run.unexpected_kind++;
		rte_pktmbuf_free(m);
		return;
	}
	uint16_t cid = rte_be_to_cpu_16(v.rh->client_id);
	unsigned owner = cid & 0xff;
	if (unlikely((cid >> 8) != rc.cfg->client_host || owner >= rc.nlcores)) {
		lc->run.foreign++;
		rte_pktmbuf_free(m);
		return;
	}
	if (owner != lc->idx && !handed) {
		*rx_tsc(m) = t;
		if (rte_ring_mp_enqueue(rc.lc[owner]->handoff, m) != 0) {
			lc->run.handoff_full++;
			rte_pktmbuf_free(m);
		} else {
			lc->run.handoff_out++;
		}
		return;
	}
	if (unlikely(v.rh->kind == RAIN_FETCH))
		answer_fetch(lc, &v);
	else
		complete(lc, &v, t);
	rte_pktmbuf_free(m);
}

static unsigned receive(struct rc_lcore *lc)
{
	struct rte_mbuf *b[RC_BURST];
	uint16_t n = rte_eth_rx_burst(rc.cfg->port_id, lc->queue, b, RC_BURST);
	if (n) {
		uint64_t t = rte_rdtsc();
		lc->run.rx_frames += n;
		for (uint16_t i = 0; i < n; i++)
			on_frame(lc, b[i], t, false);
	}
	unsigned h = rte_ring_sc_dequeue_burst(lc->handoff, (void **)b, RC_BURST, NULL);
	for (unsigned i = 0; i < h; i++)
		on_frame(lc, b[i], *rx_tsc(b[i]), true);
	return n + h;
}

/* --- the loop ------------------------------------------------------------------ */

static void account_end(struct rc_lcore *lc)
{
	for (unsigned i = 0; i < lc->ntx; i++)
		rte_pktmbuf_free(lc->txb[i]);
	lc->ntx = 0;
	if (lc->nstash)
		rte_mempool_put_bulk(lc->mp, (void **)lc->stash, lc->nstash); /* raw objects, as they came */
	lc->nstash = 0;
	struct rte_mbuf *m;
	while (rte_ring_sc_dequeue(lc->handoff, (void **)&m) == 0)
		rte_pktmbuf_free(m);
	if (rc.cfg->tx_only)
		return;
	for (uint32_t i = 0; i <= lc->mask; i++) {
		struct rc_req *e = &lc->tab[i];
		if ((e->state == RQ_SENT || e->state == RQ_RESENT) && (e->flags & RQ_F_MEASURED))
			lc->cnt[e->cls].lost++;
	}
	for (uint32_t i = lc->wq_head; i != lc->wq_tail; i++) {
		const struct rc_wait *w = &lc->wq[i & lc->wq_mask];
		if (w->measured)
			lc->cnt[w->cls].not_sent++;
	}
}

int rc_lcore_main(void *arg)
{
	(void)arg;
	int li = rte_lcore_index(rte_lcore_id());
	if (li < 0 || (unsigned)li >= rc.nlcores)
		return 0;
	struct rc_lcore *lc = rc.lc[li];
	const bool tx_only = rc.cfg->tx_only;

	rain_idle_thread_init();
	rain_rt_enter(&lc->rt); /* from here to the end of the load only (--realtime) */
	/* Every lcore starts at t0: sleep until just before it, then stay on the CPU. */
	uint64_t now0 = rte_rdtsc();
	if (rc.t0 > now0) {
		uint64_t ns = (uint64_t)((double)(rc.t0 - now0) * 1e9 / (double)rc.hz);
		if (ns > 2 * RAIN_WAKE_NS) {
			struct timespec ts = {(time_t)((ns - RAIN_WAKE_NS) / 1000000000ull),
					      (long)((ns - RAIN_WAKE_NS) % 1000000000ull)};
			nanosleep(&ts, NULL);
		}
	}
	while (rte_rdtsc() < rc.t0 && !rc.quit)
		rte_pause();
	rain_rt_slept(&lc->rt);
	schedule_first(lc);

	for (;;) {
		unsigned work = 0;
		uint64_t now;
		if (!tx_only) {
			work += receive(lc);
			work += check_timeouts(lc, rte_rdtsc());
		}
		now = rte_rdtsc();
		work += generate(lc, now);
		if (!tx_only && lc->wq_head != lc->wq_tail)
			work += admit(lc, now);
		work += flush(lc);
		if (unlikely(rc.quit))
			break;
		if (lc->gen_done && now >= rc.te) {
			bool idle = lc->outstanding == 0 && lc->wq_head == lc->wq_tail && lc->ntx == 0;
			if (tx_only || idle || now >= rc.tdrain)
				break;
		}
		rain_rt_breathe(&lc->rt);
		if (work) {
			rain_idle_reset(&lc->idle);
		} else if (!lc->gen_done) {
			/* the next send is due at its intended time: a nap must not run past it */
			uint64_t due = rc.t0 + (uint64_t)(int64_t)lc->next_rel;
			uint64_t t = rte_rdtsc();
			rain_idle_wait_due(&lc->idle, due > t ? (uint64_t)((double)(due - t) * 1e9 / (double)rc.hz) : 0);
		} else {
			rain_idle_wait(&lc->idle);
		}
	}
	/* Replies for the others may still arrive on this queue (one flow hashes to one
	 * queue): keep receiving and handing them over until every lcore is done. */
	__atomic_add_fetch(&rc.nfinished, 1, __ATOMIC_ACQ_REL);
	while (!tx_only && !rc.quit && __atomic_load_n(&rc.nfinished, __ATOMIC_ACQUIRE) < rc.nlcores &&
	       rte_rdtsc() < rc.tdrain) {
		rain_rt_breathe(&lc->rt);
		if (receive(lc))
			rain_idle_reset(&lc->idle);
		else
			rain_idle_wait(&lc->idle);
	}
	rain_rt_leave(&lc->rt);
	account_end(lc);
	return 0;
}
