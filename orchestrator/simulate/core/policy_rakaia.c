/* SPDX-License-Identifier: Apache-2.0
 *
 * Rakaia: messages detached from their connections into per-socket (per-core) FIFO
 * queues. An arriving message goes to the shorter of two queues sampled at random
 * (power of two choices; a queue's length counts its core's message in service). A
 * chosen queue that is empty, its core idle, is a direct handoff to that core. A core
 * whose own queue is empty steals the oldest message of another, found through the
 * bitmap of non-empty queues from a random place. Rakaia is work-conserving (no core
 * idles while a message waits): a message queued while some core is idle wakes that
 * core, which steals it. The queue is logically centralised, physically distributed.
 *
 * params[0] connections, params[1] their Zipf exponent (rpc.h): drawn, and ignored
 * (a message is placed by its queue, not by its connection).
 */
#include "rpc.h"

struct rakaia {
	struct rpc_conns conns;
	struct rpc_idle idle;
	struct rs_u32q *q;   /* per core */
	uint8_t *running;    /* per core: a message in service (or on its way to it) */
	uint64_t *bits;      /* the non-empty queues */
	int32_t words;
	int64_t waiting;
};

static int rk_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	struct rakaia *m = calloc(1, sizeof *m);
	v->pol = m;
	if (!m || rpc_idle_init(&m->idle, v->n_workers) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (v->n_workers < 2) {
		snprintf(err, errlen, "Rakaia's power of two choices needs at least 2 cores, not %d", v->n_workers);
		return -1;
	}
	m->words = (v->n_workers + 63) / 64;
	m->q = calloc((size_t)v->n_workers, sizeof *m->q);
	m->running = calloc((size_t)v->n_workers, 1);
	m->bits = calloc((size_t)m->words, sizeof *m->bits);
	if (!m->q || !m->running || !m->bits) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return rpc_conns_init(&m->conns, v, err, errlen);
}

static void rk_fini(struct rs_sim *s)
{
	struct rakaia *m = rs_view(s)->pol;
	if (!m)
		return;
	if (m->q)
		for (int32_t w = 0; w < rs_view(s)->n_workers; w++)
			free(m->q[w].v);
	free(m->q);
	free(m->running);
	free(m->bits);
	rpc_conns_fini(&m->conns);
	rpc_idle_fini(&m->idle);
	free(m);
}

static void rk_run(struct rs_sim *s, struct rakaia *m, int32_t w, uint32_t req, int direct)
{
	struct rs_sim_view *v = rs_view(s);
	m->running[w] = 1;
	rpc_idle_take(&m->idle, w);
	if (direct)
		v->cnt.dispatch_direct++;
	else
		v->cnt.dispatch_queued++;
	rs_dispatch(s, req, w, 1, 0, m->q[w].len);
}

static uint32_t rk_pop(struct rakaia *m, int32_t w)
{
	uint32_t req = rs_u32q_pop(&m->q[w]);
	m->waiting--;
	if (!m->q[w].len)
		m->bits[w / 64] &= ~(1ULL << (w % 64));
	return req;
}

/* A non-empty queue, the bitmap scanned from a random core on; -1 if none. */
static int32_t rk_victim(struct rakaia *m, struct rs_rng *r, int32_t n)
{
	if (!m->waiting)
		return -1;
	int32_t start = (int32_t)rs_below(r, (uint32_t)n);
	for (int32_t i = 0; i < n; i++) {
		int32_t c = (start + i) % n;
		if (m->bits[c / 64] >> (c % 64) & 1)
			return c;
	}
	return -1;
}

static void rk_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct rakaia *m = v->pol;
	int32_t n = v->n_workers;
	(void)rpc_conn_draw(&m->conns, &v->prng);
	int32_t a = (int32_t)rs_below(&v->prng, (uint32_t)n);
	int32_t b = (int32_t)rs_below(&v->prng, (uint32_t)(n - 1));
	b += b >= a; /* two distinct queues */
	int64_t la = m->q[a].len + m->running[a], lb = m->q[b].len + m->running[b];
	int32_t w = lb < la ? b : a;
	if (!m->running[w] && !m->q[w].len) { /* an empty queue, its core idle: handoff */
		rk_run(s, m, w, req, 1);
		return;
	}
	v->cnt.task_queued++;
	if (rs_u32q_push(&m->q[w], req) < 0) {
		rs_fail(s, "out of memory (Rakaia queues)");
		return;
	}
	m->waiting++;
	m->bits[w / 64] |= 1ULL << (w % 64);
	int32_t idle = rpc_idle_pop(&m->idle); /* work-conserving: an idle core wakes and steals */
	if (idle >= 0) {
		rk_run(s, m, idle, rk_pop(m, w), 0);
	}
}

/* Core w asks for work: its own queue's oldest, else a stolen one. */
static void rk_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	struct rs_sim_view *v = rs_view(s);
	struct rakaia *m = v->pol;
	m->running[w] = 0;
	if (m->q[w].len) {
		rk_run(s, m, w, rk_pop(m, w), 0);
		return;
	}
	int32_t victim = rk_victim(m, &v->prng, v->n_workers);
	if (victim >= 0) {
		rk_run(s, m, w, rk_pop(m, victim), 0);
		return;
	}
	rpc_idle_push(&m->idle, w);
}

static void rk_ask(struct rs_sim *s, int32_t w) { rs_send_token(s, w); }

static int64_t rk_balance(const struct rs_sim *s, int32_t slice)
{
	const struct rakaia *m = rs_cview(s)->pol;
	return slice == 0 ? (m->waiting ? -m->waiting : m->idle.len) : 0;
}

const struct rs_policy rs_policy_rakaia = {
	.name = "rakaia",
	.init = rk_init,
	.fini = rk_fini,
	.task_arrive = rk_task,
	.token_arrive = rk_token,
	.worker_start = rk_ask,
	.worker_done = rk_ask,
	.balance = rk_balance,
};
