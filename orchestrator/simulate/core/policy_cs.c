/* SPDX-License-Identifier: Apache-2.0
 *
 * CS, connection-shared FIFO (TCP-CS: one epoll, EPOLLEXCLUSIVE | EPOLLONESHOT): any
 * idle core may take a ready connection, but a connection's messages are served one at
 * a time, in order: a message waits while an earlier one of its connection is in
 * service (intra-connection head-of-line blocking). A core keeps serving its
 * connection while messages of it are waiting (it read them with the first), and
 * re-arms the connection when none is left; ready connections wait in arrival order
 * for the next idle core.
 *
 * params[0] connections, params[1] their Zipf exponent (rpc.h).
 */
#include "rpc.h"

struct cs {
	struct rpc_conns conns;
	struct rpc_idle idle;
	struct rs_u32q *msgs; /* per connection: its waiting messages */
	uint8_t *busy;        /* per connection: a message of it is in service */
	int32_t *serving;     /* per core: the connection it serves, or -1 */
	struct rs_u32q ready; /* connections with waiting messages and none in service */
	int64_t waiting;      /* messages in every connection's queue */
};

static int cs_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	struct cs *m = calloc(1, sizeof *m);
	v->pol = m;
	if (!m || rpc_idle_init(&m->idle, v->n_workers) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (rpc_conns_init(&m->conns, v, err, errlen) < 0)
		return -1;
	m->msgs = calloc((size_t)m->conns.n, sizeof *m->msgs);
	m->busy = calloc((size_t)m->conns.n, 1);
	m->serving = malloc(sizeof *m->serving * (size_t)v->n_workers);
	if (!m->msgs || !m->busy || !m->serving) {
		snprintf(err, errlen, "out of memory (%d connections)", m->conns.n);
		return -1;
	}
	for (int32_t w = 0; w < v->n_workers; w++)
		m->serving[w] = -1;
	return 0;
}

static void cs_fini(struct rs_sim *s)
{
	struct cs *m = rs_view(s)->pol;
	if (!m)
		return;
	if (m->msgs)
		for (int32_t k = 0; k < m->conns.n; k++)
			free(m->msgs[k].v);
	free(m->msgs);
	free(m->busy);
	free(m->serving);
	free(m->ready.v);
	rpc_conns_fini(&m->conns);
	rpc_idle_fini(&m->idle);
	free(m);
}

/* Core w serves the oldest message of connection k. */
static void cs_serve(struct rs_sim *s, struct cs *m, int32_t w, int32_t k, int direct)
{
	struct rs_sim_view *v = rs_view(s);
	uint32_t req = rs_u32q_pop(&m->msgs[k]);
	m->waiting--;
	m->busy[k] = 1;
	m->serving[w] = k;
	if (direct)
		v->cnt.dispatch_direct++;
	else
		v->cnt.dispatch_queued++;
	rs_dispatch(s, req, w, 1, 0, m->msgs[k].len);
}

static void cs_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct cs *m = v->pol;
	int32_t k = rpc_conn_draw(&m->conns, &v->prng);
	if (rs_u32q_push(&m->msgs[k], req) < 0) {
		rs_fail(s, "out of memory (CS queues)");
		return;
	}
	m->waiting++;
	if (m->busy[k] || m->msgs[k].len > 1) { /* in service, or already ready and waiting */
		v->cnt.task_queued++;
		return;
	}
	int32_t w = rpc_idle_pop(&m->idle);
	if (w >= 0) {
		cs_serve(s, m, w, k, 1);
		return;
	}
	v->cnt.task_queued++;
	if (rs_u32q_push(&m->ready, (uint32_t)k) < 0)
		rs_fail(s, "out of memory (CS ready list)");
}

/* Core w asks for work: more of its connection, else the oldest ready connection. */
static void cs_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	struct cs *m = rs_view(s)->pol;
	int32_t k = m->serving[w];
	if (k >= 0) {
		m->serving[w] = -1;
		m->busy[k] = 0;
		if (m->msgs[k].len) {
			cs_serve(s, m, w, k, 0);
			return;
		}
	}
	if (m->ready.len) {
		cs_serve(s, m, w, (int32_t)rs_u32q_pop(&m->ready), 0);
		return;
	}
	rpc_idle_push(&m->idle, w);
}

static void cs_ask(struct rs_sim *s, int32_t w) { rs_send_token(s, w); }

static int64_t cs_balance(const struct rs_sim *s, int32_t slice)
{
	const struct cs *m = rs_cview(s)->pol;
	return slice == 0 ? (m->waiting ? -m->waiting : m->idle.len) : 0;
}

const struct rs_policy rs_policy_cs = {
	.name = "cs",
	.init = cs_init,
	.fini = cs_fini,
	.task_arrive = cs_task,
	.token_arrive = cs_token,
	.worker_start = cs_ask,
	.worker_done = cs_ask,
	.balance = cs_balance,
};
