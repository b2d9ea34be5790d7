/* SPDX-License-Identifier: Apache-2.0
 *
 * The engine: time, events, the network, the open-loop client and the worker
 * threads. Scheduling decisions are the policies' (policy.h). The C API and the
 * model are described in rainsim.h.
 *
 * Events live in a binary heap ordered by (time, sequence number): two events at the
 * same nanosecond run in the order they were scheduled, so a run is deterministic.
 * Per-request state is a set of columns preallocated from the expected request count
 * and grown by doubling; nothing is allocated per event.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "rainsim.h"

/* ---- the registry: one line per policy ---------------------------------------------- */
static const struct rs_policy *const policies[] = {
	&rs_policy_rain,
	&rs_policy_random,
	&rs_policy_r2p2,
	&rs_policy_racksched,
	&rs_policy_draconis,
	&rs_policy_pallas,
	&rs_policy_ms,
	&rs_policy_cp,
	&rs_policy_kcm,
	&rs_policy_cs,
	&rs_policy_rakaia,
};
#define N_POLICIES (sizeof policies / sizeof policies[0])

/* ---- frame sizes (hosts/dpdk/include/rain_proto.h) ---------------------------------- */
/* Ethernet 14 + IPv4 20 + UDP 8 + rain_hdr 32, FCS 4, and 20 bytes of preamble and
 * inter-frame gap on the wire. */
#define WIRE_OVERHEAD   20
#define FRAME_HDRS      (14 + 20 + 8)
#define RAIN_HDR        32
#define FCS             4
#define SLOT_HDR        24
#define ICRC            4
#define BTH_RETH        (12 + 16)
#define MIN_FRAME       64

static int frame(int bytes) { return (bytes < MIN_FRAME ? MIN_FRAME : bytes) + WIRE_OVERHEAD; }
/* A large payload as rain-client builds it: max(payload, slot header), 4-byte aligned. */
static int slot_bytes(int payload) { int b = payload < SLOT_HDR ? SLOT_HDR : payload; return (b + 3) & ~3; }
static int ctl_frame(void) { return frame(FRAME_HDRS + RAIN_HDR + FCS); }
static int task_frame(int large_bytes)
{
	return large_bytes ? frame(FRAME_HDRS + RAIN_HDR + slot_bytes(large_bytes) + ICRC + FCS) : ctl_frame();
}
static int write_frame(int large_bytes) { return frame(FRAME_HDRS + BTH_RETH + slot_bytes(large_bytes) + ICRC + FCS); }

/* ---- events ------------------------------------------------------------------------- */
enum {
	EV_ARRIVAL = 1, /* the client schedules its next request */
	EV_TASK_SW,     /* b: request */
	EV_TOKEN_SW,    /* a: worker, b: slice */
	EV_DISPATCH_W,  /* a: worker, b: request, c: qdelay << 32 | qlen */
	EV_DONE,        /* a: worker */
	EV_REPLY_SW,    /* a: worker, b: request */
	EV_REPLY_CL,    /* b: request */
	EV_REJECT_CL,   /* b: request */
	EV_TIMEOUT,     /* the client's timeout cursor */
	EV_SAMPLE,      /* time series */
	EV_KNOBS,       /* a: worker: its knobs changed while idle */
	EV_START,       /* workers start */
	EV_DRAIN_END,   /* the client gives up on what is left */
	EV_REPORT_SW,   /* a: worker, b: value */
	EV_RECIRC,      /* b: request: its next pass through the switch */
	EV_EMPTY_W,     /* a: worker */
	EV_FETCH_SW,    /* a: worker, b: request: the worker's FETCH of a payload */
	EV_FETCH_CL,    /* a: worker, b: request */
	EV_FETCH_REPLY_SW, /* a: worker, b: request: the payload, from the client */
	EV_FETCH_W,     /* a: worker, b: request: the payload is at the worker */
};

struct ev {
	int64_t t;
	uint64_t seq;
	int64_t b, c;
	int32_t type, a;
};

enum { ST_NEW = 0, ST_WAITING, ST_SENT, ST_DONE };

struct rs_sim {
	struct rs_sim_view v; /* first: rs_view() is a cast */
	const struct rs_policy *pol;
	struct rs_config cfg;
	struct rs_class classes[RS_MAX_CLASSES];
	struct rs_phase *phases;
	int32_t *host_of;
	char err[256];
	int failed, finished;

	/* events */
	struct ev *heap;
	size_t nheap, capheap;
	uint64_t seq;

	/* network: per link direction, when it is free again */
	int64_t cl_up_free, cl_down_free;
	int64_t *host_up_free, *host_down_free;
	int n_hosts;
	int64_t recirc_free; /* the pipe's recirculation port (rs_recirculate) */

	/* client */
	struct rs_rng crng;
	double cum_w[RS_MAX_CLASSES];
	int phase;            /* current phase of the arrival process */
	int64_t piece_start;  /* constant arrivals: start of the current piece */
	uint64_t piece_k;
	int gen_done;
	int64_t replay_next;  /* a replay: the next request to arrive */
	int64_t outstanding;
	uint32_t wq_head;     /* requests waiting for admission: ids wq_head .. n_req-1 with state WAITING */
	uint32_t n_waiting;
	uint32_t tmo_cur;     /* timeout cursor: requests are sent in id order */
	int tmo_pending;

	/* requests (columns) */
	size_t n_req, cap_req;
	int64_t *intended, *service, *sent, *aux, *at_sw, *latency;
	/* aux: when a pre-written payload is in the rings (0: none); at_sw: arrival at the switch */
	int16_t *worker;
	uint8_t *cls, *outcome, *state, *large;
	int32_t *passes; /* recirculations (rs_recirculate) */

	/* time series */
	size_t n_ser, cap_ser;
	int64_t *ser_t, *ser_bal, *ser_w;
};

struct rs_sim_view *rs_view(struct rs_sim *s) { return &s->v; }
const struct rs_sim_view *rs_cview(const struct rs_sim *s) { return &s->v; }
const char *rs_error(const struct rs_sim *s) { return s->err; }
int64_t rs_now(const struct rs_sim *s) { return s->v.now; }

void rs_fail(struct rs_sim *s, const char *msg)
{
	if (!s->failed)
		snprintf(s->err, sizeof s->err, "%s", msg);
	s->failed = 1;
}

const char *rs_policies(void)
{
	static char names[256];
	if (!names[0])
		for (size_t i = 0; i < N_POLICIES; i++) {
			if (i)
				strcat(names, ",");
			strcat(names, policies[i]->name);
		}
	return names;
}

int rs_u32q_push(struct rs_u32q *q, uint32_t x)
{
	if (q->len == q->cap) {
		uint32_t nc = q->cap ? q->cap * 2 : 64;
		uint32_t *nv = malloc(sizeof *nv * nc);
		if (!nv)
			return -1;
		for (uint32_t i = 0; i < q->len; i++)
			nv[i] = q->v[(q->head + i) & (q->cap - 1)];
		free(q->v);
		q->v = nv;
		q->cap = nc;
		q->head = 0;
	}
	q->v[(q->head + q->len) & (q->cap - 1)] = x;
	q->len++;
	return 0;
}

/* ---- the event heap ------------------------------------------------------------------ */
static inline int ev_before(const struct ev *x, const struct ev *y)
{
	return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void push(struct rs_sim *s, int64_t t, int32_t type, int32_t a, int64_t b, int64_t c)
{
	if (s->nheap == s->capheap) {
		size_t nc = s->capheap * 2;
		struct ev *nh = realloc(s->heap, nc * sizeof *nh);
		if (!nh) {
			rs_fail(s, "out of memory (event heap)");
			return;
		}
		s->heap = nh;
		s->capheap = nc;
	}
	struct ev e = {.t = t, .seq = s->seq++, .b = b, .c = c, .type = type, .a = a};
	size_t i = s->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!ev_before(&e, &s->heap[p]))
			break;
		s->heap[i] = s->heap[p];
		i = p;
	}
	s->heap[i] = e;
}

static struct ev pop(struct rs_sim *s)
{
	struct ev top = s->heap[0];
	struct ev last = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;
	for (;;) {
		size_t l = 2 * i + 1;
		if (l >= n)
			break;
		size_t m = (l + 1 < n && ev_before(&s->heap[l + 1], &s->heap[l])) ? l + 1 : l;
		if (!ev_before(&s->heap[m], &last))
			break;
		s->heap[i] = s->heap[m];
		i = m;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

/* ---- the network ---------------------------------------------------------------------- */
static inline int64_t ser_ns(const struct rs_sim *s, int bytes)
{
	double g = s->cfg.net.link_gbps;
	return g > 0 && isfinite(g) ? (int64_t)llround(bytes * 8.0 / g) : 0;
}

/* A frame of `bytes` sent at t onto a link free at *free: when its last bit is out. */
static inline int64_t on_link(const struct rs_sim *s, int64_t *free, int64_t t, int bytes)
{
	int64_t start = t > *free ? t : *free;
	*free = start + ser_ns(s, bytes);
	return *free;
}

/* Worker host -> switch, and switch -> worker host: arrival times. */
static int64_t up_from_worker(struct rs_sim *s, int32_t w, int64_t t, int bytes)
{
	return on_link(s, &s->host_up_free[s->host_of[w]], t, bytes) + s->cfg.net.switch_worker_ns;
}
static int64_t down_to_worker(struct rs_sim *s, int32_t w, int64_t t_in, int bytes)
{
	return on_link(s, &s->host_down_free[s->host_of[w]], t_in + s->cfg.net.switch_pkt_ns, bytes) +
	       s->cfg.net.switch_worker_ns;
}
static int64_t down_to_client(struct rs_sim *s, int64_t t_in, int bytes)
{
	return on_link(s, &s->cl_down_free, t_in + s->cfg.net.switch_pkt_ns, bytes) + s->cfg.net.client_switch_ns;
}

/* ---- requests ------------------------------------------------------------------------- */
#define GROW(p, n) do { void *q_ = realloc((p), sizeof *(p) * (n)); if (!q_) return -1; (p) = q_; } while (0)

static int grow_requests(struct rs_sim *s, size_t nc)
{
	GROW(s->intended, nc);
	GROW(s->service, nc);
	GROW(s->sent, nc);
	GROW(s->aux, nc);
	GROW(s->at_sw, nc);
	GROW(s->latency, nc);
	GROW(s->worker, nc);
	GROW(s->cls, nc);
	GROW(s->outcome, nc);
	GROW(s->state, nc);
	GROW(s->large, nc);
	GROW(s->passes, nc);
	s->cap_req = nc;
	return 0;
}

int32_t rs_req_slice(const struct rs_sim *s, uint32_t req) { return s->classes[s->cls[req]].slice; }
int rs_req_large(const struct rs_sim *s, uint32_t req) { return s->large[req] != 0; }
int64_t rs_req_at_switch(const struct rs_sim *s, uint32_t req) { return s->at_sw[req]; }
int32_t rs_req_passes(const struct rs_sim *s, uint32_t req) { return s->passes[req]; }

/* The payload bytes of a large request (0: inline). */
static int large_bytes(const struct rs_sim *s, uint32_t req)
{
	if (!s->large[req])
		return 0;
	const struct rs_class *c = &s->classes[s->cls[req]];
	return c->payload_bytes > 8 ? c->payload_bytes : c->large_bytes;
}

/* ---- engine services for policies ------------------------------------------------------ */
void rs_dispatch(struct rs_sim *s, uint32_t req, int32_t w, int with_payload, int64_t qdelay, uint32_t qlen)
{
	int bytes = with_payload ? task_frame(large_bytes(s, req)) : ctl_frame();
	int64_t t = down_to_worker(s, w, s->v.now, bytes);
	uint64_t qd = qdelay < 0 ? 0 : qdelay > UINT32_MAX ? UINT32_MAX : (uint64_t)qdelay;
	push(s, t, EV_DISPATCH_W, w, req, (int64_t)(qd << 32 | qlen));
	if (with_payload)
		s->aux[req] = 0; /* the payload came along: nothing to wait for at the worker */
}

void rs_dispatch_fetch(struct rs_sim *s, uint32_t req, int32_t w, int64_t qdelay, uint32_t qlen)
{
	rs_dispatch(s, req, w, 0, qdelay, qlen);
	/* -1: the worker fetches the payload when it comes to run the task (start_next) */
	s->aux[req] = s->large[req] ? -1 : 0;
}

void rs_recirculate(struct rs_sim *s, uint32_t req, int64_t delay_ns)
{
	s->passes[req]++;
	s->v.cnt.recirculations++;
	/* the whole frame goes out of the pipe's recirculation port, a port of link_gbps: when
	 * many tasks go round, passes queue there and the loop slows down */
	int64_t out = on_link(s, &s->recirc_free, s->v.now, task_frame(large_bytes(s, req)));
	push(s, out + (delay_ns > 0 ? delay_ns : 0), EV_RECIRC, 0, req, 0);
}

void rs_empty(struct rs_sim *s, int32_t w)
{
	s->v.cnt.empties++;
	push(s, down_to_worker(s, w, s->v.now, ctl_frame()), EV_EMPTY_W, w, 0, 0);
}

void rs_send_report(struct rs_sim *s, int32_t w, int64_t value)
{
	struct rs_worker *k = &s->v.workers[w];
	k->tx_t += s->cfg.net.worker_pkt_ns;
	push(s, up_from_worker(s, w, k->tx_t, ctl_frame()), EV_REPORT_SW, w, value, 0);
}

void rs_reject(struct rs_sim *s, uint32_t req)
{
	s->v.cnt.reject++;
	push(s, down_to_client(s, s->v.now, ctl_frame()), EV_REJECT_CL, 0, req, 0);
}

void rs_prewrite(struct rs_sim *s, uint32_t req, int32_t slice)
{
	int bytes = write_frame(large_bytes(s, req));
	int64_t ready = s->v.now;
	for (int32_t w = 0; w < s->v.n_workers; w++) {
		if (s->v.workers[w].slice != slice)
			continue;
		int64_t t = down_to_worker(s, w, s->v.now, bytes) + s->cfg.net.prewrite_ns;
		if (t > ready)
			ready = t;
		s->v.cnt.prewrite_bytes += bytes - WIRE_OVERHEAD;
	}
	s->v.cnt.prewrites++;
	s->aux[req] = ready; /* the worker cannot run it before */
}

void rs_send_token(struct rs_sim *s, int32_t w)
{
	struct rs_worker *k = &s->v.workers[w];
	k->tx_t += s->cfg.net.worker_pkt_ns;
	k->tokens_sent++;
	push(s, up_from_worker(s, w, k->tx_t, ctl_frame()), EV_TOKEN_SW, w, k->slice, 0);
}

/* ---- the client ------------------------------------------------------------------------- */
static int64_t draw_service(struct rs_sim *s, const struct rs_class *c)
{
	double x;
	switch (c->kind) {
	case RS_SVC_CONST:
		x = (double)c->a_ns;
		break;
	case RS_SVC_EXP:
		x = (double)c->a_ns * rs_exp1(&s->crng);
		break;
	case RS_SVC_BIMODAL:
		x = rs_unit(&s->crng) <= c->p_a ? (double)c->a_ns : (double)c->b_ns;
		break;
	case RS_SVC_KEYS_CONST:
		x = c->keys * (double)c->a_ns;
		break;
	default: { /* keys-exp: geometric key counts on {1, 2, ...} with mean `keys`, as rain-client */
		double k = 1;
		if (c->keys > 1)
			k += floor(log(rs_unit(&s->crng)) / log(1 - 1 / c->keys));
		if (k > 4e9)
			k = 4e9;
		x = k * (double)c->a_ns;
	}
	}
	return x <= 0 ? 0 : (int64_t)(x + 0.5);
}

static void client_send(struct rs_sim *s, uint32_t i)
{
	s->state[i] = ST_SENT;
	s->sent[i] = s->v.now;
	s->outstanding++;
	int64_t t = on_link(s, &s->cl_up_free, s->v.now, task_frame(large_bytes(s, i))) + s->cfg.net.client_switch_ns;
	push(s, t, EV_TASK_SW, 0, i, 0);
	if (!s->tmo_pending) {
		s->tmo_pending = 1;
		push(s, s->sent[s->tmo_cur] + s->cfg.timeout_ns, EV_TIMEOUT, 0, 0, 0);
	}
}

static int can_admit(const struct rs_sim *s)
{
	return s->cfg.max_outstanding <= 0 || s->outstanding < s->cfg.max_outstanding;
}

/* Requests waiting for a slot leave in FIFO order as slots free. */
static void admit(struct rs_sim *s)
{
	while (s->n_waiting && can_admit(s)) {
		while (s->state[s->wq_head] != ST_WAITING)
			s->wq_head++;
		s->n_waiting--;
		client_send(s, s->wq_head++);
	}
}

/* The arrival process: the next intended time after `t` in the current phase, or the
 * first of a later phase (a rate change restarts the process at its boundary). */
static int64_t next_arrival(struct rs_sim *s, int64_t t)
{
	for (;;) {
		const struct rs_phase *p = &s->phases[s->phase];
		int64_t end = s->phase + 1 < s->cfg.n_phases ? s->phases[s->phase + 1].at_ns : INT64_MAX;
		int64_t nt = INT64_MAX;
		if (p->rate_rps > 0) {
			if (s->cfg.arrival == RS_ARR_CONSTANT) {
				double gap = 1e9 / p->rate_rps;
				nt = s->piece_start + (int64_t)llround((double)s->piece_k * gap);
				s->piece_k++;
			} else {
				nt = t + (int64_t)llround(rs_exp1(&s->crng) * 1e9 / p->rate_rps);
			}
		}
		if (nt < end)
			return nt;
		if (end == INT64_MAX)
			return INT64_MAX;
		s->phase++;
		t = s->piece_start = end;
		s->piece_k = 0;
		const struct rs_phase *q = &s->phases[s->phase];
		double acc = 0;
		for (int j = 0; j < q->n_classes; j++)
			s->cum_w[j] = acc += s->classes[q->classes[j]].weight;
		if (s->cfg.arrival == RS_ARR_CONSTANT && q->rate_rps > 0) {
			s->piece_k = 1;
			return end; /* the first arrival of a constant piece is on its boundary */
		}
	}
}

static void on_arrival(struct rs_sim *s)
{
	if (s->n_req == s->cap_req && grow_requests(s, s->cap_req * 2) < 0) {
		rs_fail(s, "out of memory (requests)");
		return;
	}
	if (s->n_req >= UINT32_MAX - 1) {
		rs_fail(s, "more than 4 billion requests in one point");
		return;
	}
	uint32_t i = (uint32_t)s->n_req++;
	const struct rs_phase *p = &s->phases[s->phase];
	int ci;
	int64_t r = -1; /* a replay: this request's index */
	if (s->cfg.n_replay > 0) {
		r = s->replay_next++;
		ci = s->cfg.replay_class[r];
	} else {
		int j = 0;
		if (p->n_classes > 1) {
			double u = rs_unit(&s->crng) * s->cum_w[p->n_classes - 1];
			while (j < p->n_classes - 1 && u > s->cum_w[j])
				j++;
		}
		ci = p->classes[j];
	}
	const struct rs_class *c = &s->classes[ci];
	s->intended[i] = s->v.now;
	s->cls[i] = (uint8_t)ci;
	s->service[i] = r >= 0 ? s->cfg.replay_service_ns[r] : draw_service(s, c);
	if (r >= 0 && s->cfg.replay_large)
		s->large[i] = s->cfg.replay_large[r] != 0 || c->payload_bytes > 8;
	else
		s->large[i] = c->payload_bytes > 8 || (c->large_fraction > 0 && rs_unit(&s->crng) <= c->large_fraction);
	s->outcome[i] = RS_NOT_SENT;
	s->latency[i] = -1;
	s->worker[i] = -1;
	s->aux[i] = 0;
	s->passes[i] = 0;
	s->sent[i] = -1;
	if (s->n_waiting == 0 && can_admit(s)) {
		client_send(s, i);
	} else {
		s->state[i] = ST_WAITING;
		if (s->n_waiting == 0)
			s->wq_head = i;
		s->n_waiting++;
		s->v.cnt.waited++;
	}
	int64_t nt = r < 0 ? next_arrival(s, s->v.now)
			   : s->replay_next < s->cfg.n_replay ? s->cfg.replay_at_ns[s->replay_next] : INT64_MAX;
	if (nt < s->cfg.gen_end_ns)
		push(s, nt, EV_ARRIVAL, 0, 0, 0);
	else
		s->gen_done = 1;
}

static void client_resolved(struct rs_sim *s, uint32_t i, int outcome)
{
	s->state[i] = ST_DONE;
	s->outcome[i] = (uint8_t)outcome;
	s->outstanding--;
	admit(s);
}

static void on_timeout(struct rs_sim *s)
{
	s->tmo_pending = 0;
	while (s->tmo_cur < s->n_req) {
		uint32_t i = s->tmo_cur;
		if (s->state[i] == ST_DONE) {
			s->tmo_cur++;
			continue;
		}
		if (s->state[i] != ST_SENT)
			return; /* not sent yet: client_send re-arms the cursor */
		if (s->sent[i] + s->cfg.timeout_ns > s->v.now) {
			s->tmo_pending = 1;
			push(s, s->sent[i] + s->cfg.timeout_ns, EV_TIMEOUT, 0, 0, 0);
			return;
		}
		s->tmo_cur++;
		client_resolved(s, i, RS_TIMED_OUT);
	}
}

static int client_finished(const struct rs_sim *s)
{
	return s->gen_done && s->outstanding == 0 && s->n_waiting == 0;
}

/* ---- workers ----------------------------------------------------------------------------- */
static int fifo_push(struct rs_worker *k, const struct rs_fifo_entry *e)
{
	if (k->fifo_len == k->fifo_cap) {
		uint32_t nc = k->fifo_cap ? k->fifo_cap * 2 : 16;
		struct rs_fifo_entry *nf = malloc(sizeof *nf * nc);
		if (!nf)
			return -1;
		for (uint32_t i = 0; i < k->fifo_len; i++)
			nf[i] = k->fifo[(k->fifo_head + i) & (k->fifo_cap - 1)];
		free(k->fifo);
		k->fifo = nf;
		k->fifo_cap = nc;
		k->fifo_head = 0;
	}
	k->fifo[(k->fifo_head + k->fifo_len) & (k->fifo_cap - 1)] = *e;
	k->fifo_len++;
	return 0;
}

/* Start the FIFO's head: receive it (worker_pkt_ns), wait for its pre-written payload
 * if any, run it to completion. A descriptor whose payload is to be fetched (ready < 0)
 * first sends a FETCH to the client (the thread waits for the payload: running). */
static void start_next(struct rs_sim *s, int32_t w)
{
	struct rs_worker *k = &s->v.workers[w];
	struct rs_fifo_entry *e = &k->fifo[k->fifo_head];
	if (e->ready < 0) {
		int64_t tx = (s->v.now > k->free_at ? s->v.now : k->free_at) + 2 * s->cfg.net.worker_pkt_ns;
		k->running = 1;
		k->free_at = tx;
		s->v.cnt.fetches++;
		push(s, up_from_worker(s, w, tx, ctl_frame()), EV_FETCH_SW, w, e->req, 0);
		return;
	}
	int64_t t = (s->v.now > k->free_at ? s->v.now : k->free_at) + s->cfg.net.worker_pkt_ns;
	if (e->ready > t)
		t = e->ready;
	e->start = t;
	k->running = 1;
	push(s, t + s->service[e->req], EV_DONE, w, 0, 0);
}

static void on_dispatch(struct rs_sim *s, int32_t w, uint32_t req, int64_t c)
{
	struct rs_worker *k = &s->v.workers[w];
	struct rs_fifo_entry e = {.req = req, .qlen = (uint32_t)c, .qdelay = (uint32_t)((uint64_t)c >> 32),
				  .arrive = s->v.now, .ready = s->aux[req]};
	k->received++;
	/* the task of a token it left in its old slice: held now, no longer forgotten */
	if (k->forgotten > 0 && rs_req_slice(s, req) != k->slice)
		k->forgotten--;
	if (fifo_push(k, &e) < 0) {
		rs_fail(s, "out of memory (worker FIFO)");
		return;
	}
	int64_t held = k->received - k->finished;
	if (held > s->v.cnt.max_held)
		s->v.cnt.max_held = held;
	if (!k->running)
		start_next(s, w);
}

static void on_done(struct rs_sim *s, int32_t w)
{
	struct rs_worker *k = &s->v.workers[w];
	struct rs_fifo_entry e = k->fifo[k->fifo_head];
	k->fifo_head = (k->fifo_head + 1) & (k->fifo_cap - 1);
	k->fifo_len--;
	k->running = 0;
	int64_t svc = s->service[e.req];
	k->finished++;
	k->busy_ns += svc;
	s->worker[e.req] = (int16_t)w;
	/* a ring, as rain-worker's: the newest RS_SAMPLES since the last take are kept */
	int64_t lw = e.start - e.arrive;
	k->samples[k->nsamples++ % RS_SAMPLES] = (struct rs_sample){
		.local_qdelay_ns = lw > UINT32_MAX ? UINT32_MAX : (uint32_t)lw,
		.service_ns = svc > UINT32_MAX ? UINT32_MAX : (uint32_t)svc,
		.switch_qdelay_ns = e.qdelay,
		.switch_qlen = e.qlen,
	};
	/* reply, then whatever the policy sends back (tokens), each worker_pkt_ns */
	k->tx_t = s->v.now + s->cfg.net.worker_pkt_ns;
	push(s, up_from_worker(s, w, k->tx_t, ctl_frame()), EV_REPLY_SW, w, e.req, 0);
	if (s->pol->worker_done)
		s->pol->worker_done(s, w);
	k->free_at = k->tx_t;
	if (k->fifo_len)
		start_next(s, w);
}

/* The fetched payload is in: the task runs (its rx costs the thread worker_pkt_ns). */
static void on_fetched(struct rs_sim *s, int32_t w, uint32_t req)
{
	struct rs_worker *k = &s->v.workers[w];
	struct rs_fifo_entry *e = &k->fifo[k->fifo_head];
	if (!k->fifo_len || e->req != req || e->ready >= 0) {
		rs_fail(s, "internal: a fetched payload for a task its worker is not waiting for");
		return;
	}
	e->ready = 0;
	start_next(s, w);
}

/* An EMPTY reached worker w: received (worker_pkt_ns), then the policy's answer. */
static void on_empty(struct rs_sim *s, int32_t w)
{
	struct rs_worker *k = &s->v.workers[w];
	k->empties++;
	k->tx_t = (s->v.now > k->free_at ? s->v.now : k->free_at) + s->cfg.net.worker_pkt_ns;
	if (s->pol->worker_empty)
		s->pol->worker_empty(s, w);
	k->free_at = k->tx_t;
}

/* A hook outside a task (start, knobs): sends leave once the thread is free. */
static void worker_hook(struct rs_sim *s, int32_t w, void (*hook)(struct rs_sim *, int32_t))
{
	struct rs_worker *k = &s->v.workers[w];
	if (!hook)
		return;
	k->tx_t = s->v.now > k->free_at ? s->v.now : k->free_at;
	hook(s, w);
	k->free_at = k->tx_t;
}

/* Tokens in the switch (sent, not yet consumed by a DISPATCH) + tasks held, as rain_topup. */
static int64_t outstanding(const struct rs_worker *k)
{
	int64_t used = k->received + k->empties + k->forgotten;
	int64_t in_switch = k->tokens_sent > used ? k->tokens_sent - used : 0;
	return in_switch + k->received - k->finished;
}

/* ---- time series --------------------------------------------------------------------------- */
static int on_sample(struct rs_sim *s)
{
	int n = s->v.n_workers;
	if (s->n_ser == s->cap_ser) {
		size_t nc = s->cap_ser ? s->cap_ser * 2 : 64;
		GROW(s->ser_t, nc);
		GROW(s->ser_bal, nc * RS_MAX_SLICES);
		GROW(s->ser_w, nc * (size_t)n * 7);
		s->cap_ser = nc;
	}
	size_t r = s->n_ser++;
	s->ser_t[r] = s->v.now;
	for (int sl = 0; sl < RS_MAX_SLICES; sl++)
		s->ser_bal[r * RS_MAX_SLICES + sl] = s->pol->balance ? s->pol->balance(s, sl) : 0;
	for (int w = 0; w < n; w++) {
		const struct rs_worker *k = &s->v.workers[w];
		int64_t *o = &s->ser_w[(r * (size_t)n + (size_t)w) * 7];
		o[0] = k->fifo_len;
		o[1] = outstanding(k);
		o[2] = k->finished;
		o[3] = k->busy_ns;
		o[4] = k->quota;
		o[5] = k->slice;
		o[6] = k->enabled;
	}
	return 0;
}

/* ---- the loop ---------------------------------------------------------------------------------- */
static void end_run(struct rs_sim *s)
{
	/* what the client still holds at the end: waiting ones were never sent, sent ones
	 * are lost (counted as timed out) */
	for (size_t i = s->tmo_cur; i < s->n_req; i++) {
		if (s->state[i] == ST_WAITING)
			s->outcome[i] = RS_NOT_SENT;
		else if (s->state[i] == ST_SENT)
			s->outcome[i] = RS_TIMED_OUT;
		s->state[i] = ST_DONE;
	}
	s->outstanding = 0;
	s->n_waiting = 0;
	s->finished = 1;
	s->v.cnt.end_ns = s->v.now;
}

int rs_run_until(struct rs_sim *s, int64_t t_stop)
{
	if (s->failed)
		return -1;
	if (s->finished)
		return 1;
	const struct rs_policy *pol = s->pol;
	while (s->nheap && s->heap[0].t < t_stop) {
		struct ev e = pop(s);
		s->v.now = e.t;
		s->v.cnt.events++;
		switch (e.type) {
		case EV_ARRIVAL:
			on_arrival(s);
			break;
		case EV_TASK_SW:
			s->v.cnt.packets++;
			s->at_sw[e.b] = e.t;
			pol->task_arrive(s, (uint32_t)e.b);
			break;
		case EV_TOKEN_SW:
			s->v.cnt.packets++;
			pol->token_arrive(s, e.a, (int32_t)e.b);
			break;
		case EV_DISPATCH_W:
			on_dispatch(s, e.a, (uint32_t)e.b, e.c);
			break;
		case EV_DONE:
			on_done(s, e.a);
			break;
		case EV_REPLY_SW:
			s->v.cnt.packets++;
			s->v.cnt.forwarded++;
			push(s, down_to_client(s, e.t, ctl_frame()), EV_REPLY_CL, e.a, e.b, 0);
			break;
		case EV_REPLY_CL:
			if (s->state[e.b] == ST_SENT) {
				s->latency[e.b] = e.t - s->intended[e.b];
				client_resolved(s, (uint32_t)e.b, RS_ANSWERED);
			} else {
				s->v.cnt.late_replies++;
			}
			break;
		case EV_REJECT_CL:
			if (s->state[e.b] == ST_SENT)
				client_resolved(s, (uint32_t)e.b, RS_REJECTED);
			break;
		case EV_TIMEOUT:
			on_timeout(s);
			break;
		case EV_SAMPLE:
			if (on_sample(s) < 0)
				rs_fail(s, "out of memory (time series)");
			else
				push(s, e.t + s->cfg.sample_period_ns, EV_SAMPLE, 0, 0, 0);
			break;
		case EV_KNOBS:
			if (!s->v.workers[e.a].running)
				worker_hook(s, e.a, pol->worker_knobs);
			break;
		case EV_START:
			for (int32_t w = 0; w < s->v.n_workers; w++)
				worker_hook(s, w, pol->worker_start);
			break;
		case EV_DRAIN_END:
			end_run(s);
			return 1;
		case EV_REPORT_SW:
			s->v.cnt.packets++;
			s->v.cnt.reports++;
			if (pol->report_arrive)
				pol->report_arrive(s, e.a, e.b);
			break;
		case EV_RECIRC:
			pol->task_arrive(s, (uint32_t)e.b);
			break;
		case EV_EMPTY_W:
			on_empty(s, e.a);
			break;
		case EV_FETCH_SW:
			s->v.cnt.packets++;
			push(s, down_to_client(s, e.t, ctl_frame()), EV_FETCH_CL, e.a, e.b, 0);
			break;
		case EV_FETCH_CL: { /* the client sends the payload back at once */
			int64_t t = on_link(s, &s->cl_up_free, e.t, task_frame(large_bytes(s, (uint32_t)e.b))) +
				    s->cfg.net.client_switch_ns;
			push(s, t, EV_FETCH_REPLY_SW, e.a, e.b, 0);
			break;
		}
		case EV_FETCH_REPLY_SW:
			s->v.cnt.packets++;
			push(s, down_to_worker(s, e.a, e.t, task_frame(large_bytes(s, (uint32_t)e.b))), EV_FETCH_W, e.a, e.b,
			     0);
			break;
		case EV_FETCH_W:
			on_fetched(s, e.a, (uint32_t)e.b);
			break;
		}
		if (s->failed)
			return -1;
		if (client_finished(s)) {
			end_run(s);
			return 1;
		}
	}
	if (!s->nheap) {
		end_run(s);
		return 1;
	}
	s->v.now = t_stop;
	return 0;
}

/* ---- create / destroy ---------------------------------------------------------------------- */
static int bad(char *err, int errlen, const char *msg)
{
	if (err && errlen > 0)
		snprintf(err, (size_t)errlen, "%s", msg);
	return -1;
}

static int check(const struct rs_config *c, char *err, int n)
{
	char m[256];
	if (c->n_workers < 1 || c->n_workers > RS_MAX_WORKERS)
		return snprintf(m, sizeof m, "n_workers %d: give 1 .. %d worker threads", c->n_workers, RS_MAX_WORKERS),
		       bad(err, n, m);
	if (c->threads_per_host < 1)
		return bad(err, n, "threads_per_host must be at least 1");
	if (!c->worker_slices)
		return bad(err, n, "worker_slices is missing");
	for (int w = 0; w < c->n_workers; w++)
		if (c->worker_slices[w] < 0 || c->worker_slices[w] >= RS_MAX_SLICES)
			return snprintf(m, sizeof m, "worker %d: slice %d is outside 0 .. %d", w, c->worker_slices[w],
					RS_MAX_SLICES - 1), bad(err, n, m);
	if (c->quota < 0)
		return bad(err, n, "quota must be >= 0");
	if (c->queue_capacity < 0)
		return bad(err, n, "queue_capacity must be >= 0");
	if (c->n_classes < 1 || c->n_classes > RS_MAX_CLASSES || !c->classes)
		return snprintf(m, sizeof m, "n_classes %d: give 1 .. %d classes", c->n_classes, RS_MAX_CLASSES),
		       bad(err, n, m);
	for (int i = 0; i < c->n_classes; i++) {
		const struct rs_class *k = &c->classes[i];
		if (!(k->weight > 0) || !isfinite(k->weight))
			return snprintf(m, sizeof m, "class %d: weight must be > 0", i), bad(err, n, m);
		if (k->slice < 0 || k->slice >= RS_MAX_SLICES)
			return snprintf(m, sizeof m, "class %d: slice %d is outside 0 .. %d", i, k->slice, RS_MAX_SLICES - 1),
			       bad(err, n, m);
		if (k->kind < RS_SVC_CONST || k->kind > RS_SVC_KEYS_EXP)
			return snprintf(m, sizeof m, "class %d: unknown service kind %d", i, k->kind), bad(err, n, m);
		if (k->a_ns < 0 || k->b_ns < 0 || !(k->p_a >= 0 && k->p_a <= 1) || !(k->keys >= 0) ||
		    !(k->large_fraction >= 0 && k->large_fraction <= 1) || k->payload_bytes < 0 || k->large_bytes < 0)
			return snprintf(m, sizeof m, "class %d: a negative time or size, or a probability outside [0, 1]", i),
			       bad(err, n, m);
		if (k->kind == RS_SVC_KEYS_EXP && k->keys < 1)
			return snprintf(m, sizeof m, "class %d: keys-exp needs a mean key count >= 1", i), bad(err, n, m);
	}
	if (c->n_phases < 1 || !c->phases)
		return bad(err, n, "give at least one phase");
	if (c->phases[0].at_ns != 0)
		return bad(err, n, "the first phase must start at 0");
	for (int i = 0; i < c->n_phases; i++) {
		const struct rs_phase *p = &c->phases[i];
		if (i && p->at_ns <= c->phases[i - 1].at_ns)
			return bad(err, n, "phases must start at increasing times");
		if (!(p->rate_rps >= 0) || !isfinite(p->rate_rps))
			return snprintf(m, sizeof m, "phase %d: rate must be a finite number >= 0", i), bad(err, n, m);
		if (p->n_classes < 1 || p->n_classes > RS_MAX_CLASSES)
			return snprintf(m, sizeof m, "phase %d: give 1 .. %d classes", i, RS_MAX_CLASSES), bad(err, n, m);
		for (int j = 0; j < p->n_classes; j++)
			if (p->classes[j] >= c->n_classes)
				return snprintf(m, sizeof m, "phase %d: class index %d does not exist", i, p->classes[j]),
				       bad(err, n, m);
	}
	if (c->arrival != RS_ARR_POISSON && c->arrival != RS_ARR_CONSTANT)
		return bad(err, n, "arrival must be poisson (0) or constant (1)");
	if (c->n_replay < 0)
		return bad(err, n, "n_replay must be >= 0");
	if (c->n_replay > 0) {
		if (!c->replay_at_ns || !c->replay_service_ns || !c->replay_class)
			return bad(err, n, "a replay needs its times, service times and classes");
		for (int64_t i = 0; i < c->n_replay; i++) {
			if (c->replay_at_ns[i] < 0 || (i && c->replay_at_ns[i] < c->replay_at_ns[i - 1]))
				return snprintf(m, sizeof m, "replay request %lld: times must be >= 0 and not decrease",
						(long long)i),
				       bad(err, n, m);
			if (c->replay_service_ns[i] < 0 || c->replay_class[i] >= c->n_classes)
				return snprintf(m, sizeof m, "replay request %lld: a negative service time or no such class",
						(long long)i),
				       bad(err, n, m);
		}
	}
	if (c->gen_end_ns < 0)
		return bad(err, n, "gen_end_ns must be >= 0");
	if (c->timeout_ns <= 0)
		return bad(err, n, "timeout_ns must be > 0");
	if (c->max_outstanding < 0 || c->sample_period_ns < 0)
		return bad(err, n, "max_outstanding and sample_period_ns must be >= 0");
	const struct rs_network *k = &c->net;
	if (k->client_switch_ns < 0 || k->switch_worker_ns < 0 || k->switch_pkt_ns < 0 || k->worker_pkt_ns < 0 ||
	    k->prewrite_ns < 0 || isnan(k->link_gbps))
		return bad(err, n, "network delays and costs must be >= 0");
	return 0;
}

struct rs_sim *rs_create(const struct rs_config *cfg, char *err, int errlen)
{
	if (err && errlen > 0)
		err[0] = 0;
	if (!cfg) {
		bad(err, errlen, "no configuration");
		return NULL;
	}
	const struct rs_policy *pol = NULL;
	for (size_t i = 0; i < N_POLICIES; i++)
		if (cfg->policy && strcmp(cfg->policy, policies[i]->name) == 0)
			pol = policies[i];
	if (!pol) {
		char m[300];
		snprintf(m, sizeof m, "unknown policy '%s' (this core has: %s)", cfg->policy ? cfg->policy : "",
			 rs_policies());
		bad(err, errlen, m);
		return NULL;
	}
	if (check(cfg, err, errlen) < 0)
		return NULL;
	struct rs_sim *s = calloc(1, sizeof *s);
	if (!s) {
		bad(err, errlen, "out of memory");
		return NULL;
	}
	s->pol = pol;
	s->cfg = *cfg;
	s->cfg.policy = pol->name;
	memcpy(s->classes, cfg->classes, sizeof(struct rs_class) * (size_t)cfg->n_classes);
	s->cfg.classes = s->classes;
	s->phases = malloc(sizeof *s->phases * (size_t)cfg->n_phases);
	int n = cfg->n_workers;
	s->n_hosts = (n + cfg->threads_per_host - 1) / cfg->threads_per_host;
	s->host_of = malloc(sizeof *s->host_of * (size_t)n);
	s->host_up_free = calloc((size_t)s->n_hosts, sizeof(int64_t));
	s->host_down_free = calloc((size_t)s->n_hosts, sizeof(int64_t));
	s->v.workers = calloc((size_t)n, sizeof *s->v.workers);
	s->capheap = 1024;
	s->heap = malloc(sizeof *s->heap * s->capheap);
	/* expected requests: the phases' rates over the run, plus a margin */
	double expect = 0;
	for (int i = 0; i < cfg->n_phases; i++) {
		int64_t a = cfg->phases[i].at_ns, b = i + 1 < cfg->n_phases ? cfg->phases[i + 1].at_ns : cfg->gen_end_ns;
		if (b > cfg->gen_end_ns)
			b = cfg->gen_end_ns;
		if (b > a)
			expect += cfg->phases[i].rate_rps * (double)(b - a) * 1e-9;
	}
	size_t cap = (size_t)(expect * 1.02 + 6 * sqrt(expect) + 1024);
	if (!s->phases || !s->host_of || !s->host_up_free || !s->host_down_free || !s->v.workers || !s->heap ||
	    grow_requests(s, cap) < 0) {
		bad(err, errlen, "out of memory");
		rs_destroy(s);
		return NULL;
	}
	memcpy(s->phases, cfg->phases, sizeof *s->phases * (size_t)cfg->n_phases);
	s->cfg.phases = s->phases;
	s->v.n_workers = n;
	s->v.queue_capacity = cfg->queue_capacity;
	memcpy(s->v.params, cfg->params, sizeof s->v.params);
	for (int w = 0; w < n; w++) {
		struct rs_worker *k = &s->v.workers[w];
		k->quota = cfg->quota;
		k->slice = cfg->worker_slices[w];
		k->enabled = 1;
		k->host = w / cfg->threads_per_host;
		s->host_of[w] = k->host;
		k->samples = malloc(sizeof *k->samples * RS_SAMPLES);
		if (!k->samples) {
			bad(err, errlen, "out of memory");
			rs_destroy(s);
			return NULL;
		}
	}
	rs_rng_seed(&s->crng, cfg->seed, 0);
	rs_rng_seed(&s->v.prng, cfg->seed, 1);
	if (pol->init && pol->init(s, err, (size_t)errlen) < 0) {
		s->pol = NULL;
		rs_destroy(s);
		return NULL;
	}
	/* the first phase's classes; the first arrival */
	double acc = 0;
	for (int j = 0; j < s->phases[0].n_classes; j++)
		s->cum_w[j] = acc += s->classes[s->phases[0].classes[j]].weight;
	push(s, 0, EV_START, 0, 0, 0);
	if (cfg->sample_period_ns > 0)
		push(s, 0, EV_SAMPLE, 0, 0, 0);
	int64_t first;
	if (cfg->n_replay > 0) {
		first = cfg->replay_at_ns[0];
	} else if (cfg->arrival == RS_ARR_CONSTANT && s->phases[0].rate_rps > 0) {
		s->piece_k = 1;
		first = 0;
	} else {
		first = next_arrival(s, 0);
	}
	if (first < cfg->gen_end_ns)
		push(s, first, EV_ARRIVAL, 0, 0, 0);
	else
		s->gen_done = 1;
	push(s, cfg->gen_end_ns + cfg->timeout_ns, EV_DRAIN_END, 0, 0, 0);
	return s;
}

void rs_destroy(struct rs_sim *s)
{
	if (!s)
		return;
	if (s->pol && s->pol->fini)
		s->pol->fini(s);
	if (s->v.workers)
		for (int w = 0; w < s->v.n_workers; w++) {
			free(s->v.workers[w].samples);
			free(s->v.workers[w].fifo);
		}
	free(s->v.workers);
	free(s->phases);
	free(s->host_of);
	free(s->host_up_free);
	free(s->host_down_free);
	free(s->heap);
	free(s->intended);
	free(s->service);
	free(s->sent);
	free(s->aux);
	free(s->at_sw);
	free(s->latency);
	free(s->worker);
	free(s->cls);
	free(s->outcome);
	free(s->state);
	free(s->large);
	free(s->passes);
	free(s->ser_t);
	free(s->ser_bal);
	free(s->ser_w);
	free(s);
}

/* ---- results and control ------------------------------------------------------------------ */
int rs_worker(const struct rs_sim *s, int32_t w, struct rs_worker_info *o)
{
	if (w < 0 || w >= s->v.n_workers || !o)
		return -1;
	const struct rs_worker *k = &s->v.workers[w];
	*o = (struct rs_worker_info){
		.busy_ns = k->busy_ns,
		.tasks_done = k->finished,
		.tokens_sent = k->tokens_sent,
		.quota = k->quota,
		.slice = k->slice,
		.enabled = k->enabled,
		.fifo = (int32_t)k->fifo_len,
		.outstanding = (int32_t)outstanding(k),
	};
	return 0;
}

int rs_take_samples(struct rs_sim *s, int32_t w, struct rs_sample *out, int32_t max, int64_t *lost)
{
	if (w < 0 || w >= s->v.n_workers || max < 0 || (max > 0 && !out))
		return -1;
	struct rs_worker *k = &s->v.workers[w];
	/* the newest min(written, RS_SAMPLES, max) samples, oldest first (hosts/ctl.py's new_samples) */
	uint64_t head = k->nsamples, n = head < RS_SAMPLES ? head : RS_SAMPLES;
	if (n > (uint64_t)max)
		n = (uint64_t)max;
	for (uint64_t i = 0; i < n; i++)
		out[i] = k->samples[(head - n + i) % RS_SAMPLES];
	int64_t l = (int64_t)(head - n);
	s->v.cnt.samples_lost += l;
	if (lost)
		*lost = l;
	k->nsamples = 0;
	return (int32_t)n;
}

int rs_set_worker(struct rs_sim *s, int32_t w, int32_t quota, int32_t slice)
{
	if (w < 0 || w >= s->v.n_workers) {
		snprintf(s->err, sizeof s->err, "rs_set_worker: no worker %d", w);
		return -1;
	}
	if (quota < 0 || slice < 0 || slice >= RS_MAX_SLICES) {
		snprintf(s->err, sizeof s->err, "rs_set_worker: quota %d or slice %d out of range", quota, slice);
		return -1;
	}
	struct rs_worker *k = &s->v.workers[w];
	/* a move to another slice (Algorithm 1, carried out as on a testbed: disabled, moved
	 * by the controller, enabled again): its tokens in the old slice's queue are forgotten */
	if (slice != k->slice) {
		int64_t used = k->received + k->empties;
		k->forgotten = k->tokens_sent > used ? k->tokens_sent - used : 0;
	}
	k->quota = quota;
	k->slice = slice;
	/* an idle thread polls and tops up at once; a busy one at its next finished task */
	if (!k->running && !s->finished)
		push(s, s->v.now, EV_KNOBS, w, 0, 0);
	return 0;
}

int64_t rs_n_requests(const struct rs_sim *s) { return (int64_t)s->n_req; }

int rs_requests(const struct rs_sim *s, int64_t *intended, uint8_t *cls, uint8_t *outcome, int64_t *latency,
		int64_t *service, uint8_t *large, int16_t *worker)
{
	size_t n = s->n_req;
	if (intended)
		memcpy(intended, s->intended, n * sizeof *intended);
	if (cls)
		memcpy(cls, s->cls, n);
	if (outcome)
		memcpy(outcome, s->outcome, n);
	if (latency)
		memcpy(latency, s->latency, n * sizeof *latency);
	if (service)
		memcpy(service, s->service, n * sizeof *service);
	if (large)
		memcpy(large, s->large, n);
	if (worker)
		memcpy(worker, s->worker, n * sizeof *worker);
	return 0;
}

int rs_counters(const struct rs_sim *s, struct rs_counters *out)
{
	*out = s->v.cnt;
	return 0;
}

int64_t rs_n_series(const struct rs_sim *s) { return (int64_t)s->n_ser; }

int rs_series(const struct rs_sim *s, int64_t *t, int64_t *bal, int64_t *wk)
{
	size_t n = s->n_ser;
	if (t)
		memcpy(t, s->ser_t, n * sizeof *t);
	if (bal)
		memcpy(bal, s->ser_bal, n * RS_MAX_SLICES * sizeof *bal);
	if (wk)
		memcpy(wk, s->ser_w, n * (size_t)s->v.n_workers * 7 * sizeof *wk);
	return 0;
}

/* The sizes of the API's structs, for the Python mirror's test. */
void rs_sizes(int64_t *out)
{
	out[0] = sizeof(struct rs_network);
	out[1] = sizeof(struct rs_class);
	out[2] = sizeof(struct rs_phase);
	out[3] = sizeof(struct rs_config);
	out[4] = sizeof(struct rs_sample);
	out[5] = sizeof(struct rs_worker_info);
	out[6] = sizeof(struct rs_counters);
}
