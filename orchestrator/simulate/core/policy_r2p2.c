/* SPDX-License-Identifier: Apache-2.0
 *
 * R2P2-SW (R2P2, USENIX ATC 2019, as the Rain paper evaluates it in section 5.2), as
 * switch/p4/r2p2.p4 implements it: JBSQ(n) by recirculation. The switch keeps a depth
 * per worker thread: +1 per dispatch, set by the worker's REPORT (its queue depth, sent
 * at start and after each task). Each pass of a task reads and advances one round-robin
 * cursor and looks at that worker only: below n it is dispatched (with its payload),
 * else the task goes round again (a recirculation, one pass time later) and looks at
 * the next worker then, unless this was its last pass allowed: REJECT. Tasks that
 * recirculate overtake one another: no FIFO order.
 *
 * params[0] n (>= 1), params[1] the time of one pass in ns (about 1 us on Tofino),
 * params[2] the passes a task may take (the P4 program's max_passes, 16 bits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

struct r2p2 {
	int64_t *depth;
	int64_t n, pass_ns, max_passes;
	int32_t cursor;
};

static int r2p2_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	double n = v->params[0], pass = v->params[1], passes = v->params[2];
	if (!(n >= 1 && n <= 65535) || !(pass >= 0 && pass <= 1e9) || !(passes >= 1 && passes <= 65535)) {
		snprintf(err, errlen, "r2p2: JBSQ bound %g (1..65535), pass time %g ns (0..1e9), max passes %g (1..65535)",
			 n, pass, passes);
		return -1;
	}
	struct r2p2 *r = calloc(1, sizeof *r);
	if (r)
		r->depth = calloc((size_t)v->n_workers, sizeof *r->depth);
	if (!r || !r->depth) {
		free(r);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	r->n = (int64_t)n;
	r->pass_ns = (int64_t)pass;
	r->max_passes = (int64_t)passes;
	v->pol = r;
	return 0;
}

static void r2p2_fini(struct rs_sim *s)
{
	struct r2p2 *r = rs_view(s)->pol;
	if (r)
		free(r->depth);
	free(r);
}

static void r2p2_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct r2p2 *r = v->pol;
	int32_t w = r->cursor;
	r->cursor = (r->cursor + 1) % v->n_workers;
	int32_t passes = rs_req_passes(s, req);
	if (r->depth[w] < r->n) {
		r->depth[w]++;
		v->cnt.dispatch_direct++;
		/* INT: the time the task spent going round, and its recirculations */
		rs_dispatch(s, req, w, 1, v->now - rs_req_at_switch(s, req), (uint32_t)passes);
	} else if (passes + 1 >= r->max_passes) {
		rs_reject(s, req);
	} else {
		rs_recirculate(s, req, r->pass_ns);
	}
}

static void r2p2_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	(void)s, (void)w, (void)slice; /* workers report, they send no tokens */
}

static void r2p2_report(struct rs_sim *s, int32_t w, int64_t depth)
{
	struct r2p2 *r = rs_view(s)->pol;
	r->depth[w] = depth;
}

/* rain-worker in report mode: its queue depth (the running task included) */
static void r2p2_worker(struct rs_sim *s, int32_t w)
{
	rs_send_report(s, w, rs_view(s)->workers[w].fifo_len);
}

const struct rs_policy rs_policy_r2p2 = {
	.name = "r2p2",
	.init = r2p2_init,
	.fini = r2p2_fini,
	.task_arrive = r2p2_task,
	.token_arrive = r2p2_token,
	.report_arrive = r2p2_report,
	.worker_start = r2p2_worker,
	.worker_done = r2p2_worker,
};
