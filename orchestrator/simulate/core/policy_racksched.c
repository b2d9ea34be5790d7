/* SPDX-License-Identifier: Apache-2.0
 *
 * RackSched-SW ("RackSched: A Microsecond-Scale Scheduler for Rack-Scale Computers",
 * OSDI 2020, as the Rain paper evaluates it in section 5.2), as switch/p4/racksched.p4
 * implements it: power-of-2 choices. The switch keeps a load per worker thread, set by
 * the worker's REPORT (its queue depth, at start and after each task) and +1 per
 * dispatch until the next one. A task draws two distinct workers at random and is
 * pushed, with its payload, to the less loaded (a tie: the first draw); no queue in
 * the switch, no bound on a worker's queue.
 *
 * params[0] k, the choices: only 2, as the P4 program (each pass reads a load copy once).
 */
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

static int rs_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	if (v->params[0] != 2) {
		snprintf(err, errlen, "racksched: k = %g choices; the switch program does power-of-2 choices only (k = 2)",
			 v->params[0]);
		return -1;
	}
	v->pol = calloc((size_t)v->n_workers, sizeof(int64_t));
	if (!v->pol) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

static void rs_fini(struct rs_sim *s) { free(rs_view(s)->pol); }

static void rs_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	int64_t *load = v->pol;
	int32_t a = 0, b = 0;
	if (v->n_workers > 1) {
		a = (int32_t)rs_below(&v->prng, (uint32_t)v->n_workers);
		b = (int32_t)rs_below(&v->prng, (uint32_t)v->n_workers - 1);
		if (b >= a)
			b++;
	}
	int32_t w = load[b] >= load[a] ? a : b;
	load[w]++;
	v->cnt.dispatch_direct++;
	rs_dispatch(s, req, w, 1, 0, 0);
}

static void rs_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	(void)s, (void)w, (void)slice; /* workers report, they send no tokens */
}

static void rs_report(struct rs_sim *s, int32_t w, int64_t depth) { ((int64_t *)rs_view(s)->pol)[w] = depth; }

static void rs_worker_report(struct rs_sim *s, int32_t w)
{
	rs_send_report(s, w, rs_view(s)->workers[w].fifo_len);
}

const struct rs_policy rs_policy_racksched = {
	.name = "racksched",
	.init = rs_init,
	.fini = rs_fini,
	.task_arrive = rs_task,
	.token_arrive = rs_token,
	.report_arrive = rs_report,
	.worker_start = rs_worker_report,
	.worker_done = rs_worker_report,
};
