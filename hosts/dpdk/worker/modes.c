/* SPDX-License-Identifier: Apache-2.0
 *
 * Scheduling behaviours (--mode). Each is what the worker must do for one switch
 * program: Rain issues tokens, push does nothing, report (R2P2/RackSched) tells the
 * switch its queue depth, pull (Draconis) asks for tasks when idle.
 */
#include <string.h>

#include "worker.h"

#define KIND_BIT(k) (1u << (k))

/* ---- rain: tokens under a quota (3.2.1, 3.3) ----------------------------------------
 *
 * outstanding = tokens in the switch + tasks held (FIFO + running) <= n_w.
 * Tokens in the switch = sent - consumed by DISPATCHes (counted by the RX loop when
 * they arrive) - forgotten. Tasks held = DISPATCHes received - answered. Both are
 * derived from single-writer counters, so no lock and no lost update.
 *
 * Topping up to the quota on every loop iteration covers all the rules at once: n_w
 * tokens at start, one per finished task while below quota, more when the quota is
 * raised, none while above it after a decrease, none when disabled.
 *
 * enabled 1 -> 0 is a deregistration (6.1): no more tokens. On 0 -> 1 the worker
 * re-registers: the controller has reset its switch state, so the tokens it still had
 * in the switch are forgotten and the QP's PSN starts again; if the QP cannot be
 * reset (ibverbs), the thread issues no tokens until the next re-registration.
 *
 * A move to another slice (Algorithm 1) is such a re-registration with a new slice:
 * the tokens left in the old slice's queue are forgotten, and a task that later meets
 * one of them still comes here and runs (counted as held, not as a new-slice token).
 */
static void rain_topup(struct rw_thread *t)
{
	struct rw_ctx *w = t->w;
	struct rain_ctl_knobs *k = &t->ctl->knobs;
	uint32_t enabled = RW_LOAD(k->enabled);
	/* other_slice first: the RX loop counts it before rx_dispatched, so consumed never
	 * lags it. A DISPATCH for a token the thread left in another slice is held, not
	 * the consumption of a current token. */
	uint64_t other = __atomic_load_n(&t->rx_other_slice, __ATOMIC_ACQUIRE);
	uint64_t dispatched = __atomic_load_n(&t->rx_dispatched, __ATOMIC_ACQUIRE);
	uint64_t consumed = dispatched + RW_LOAD(t->rx_lost) - other;

	if (enabled != t->last_enabled) {
		if (enabled) {
			t->tokens_forgotten = t->tokens_sent > consumed ? t->tokens_sent - consumed : 0;
			if (w->c.rdma->reset_qp) {
				RW_INC(t->qp_resets);
				RW_STORE(t->qp_failed, w->c.rdma->reset_qp(w, t->idx) < 0);
			}
		}
		t->last_enabled = enabled;
	}
	/* A DISPATCH for a forgotten token (it was still in flight) re-bases the count. */
	if (consumed + t->tokens_forgotten > t->tokens_sent)
		t->tokens_forgotten = t->tokens_sent > consumed ? t->tokens_sent - consumed : 0;
	uint64_t in_switch = t->tokens_sent - t->tokens_forgotten - consumed;
	uint64_t held = dispatched - t->finished;
	uint64_t out = in_switch + held;

	if (enabled && !t->qp_failed) { /* a dead QP would lose every pre-written task */
		uint32_t quota = RW_LOAD(k->quota);
		if (quota > w->quota_cap)
			quota = w->quota_cap;
		while (out < quota && rw_send_ctl(t, RAIN_TOKEN, (uint16_t)quota) == 0) {
			t->tokens_sent++;
			out++;
		}
		RW_STORE(t->ctl->stats.tokens_sent, t->tokens_sent);
	}
	RW_STORE(t->ctl->stats.outstanding, (uint32_t)out);
}

static void rain_done(struct rw_thread *t)
{
	rain_topup(t);
}

/* ---- push: no tokens; the switch pushes (Pallas-SW, direct tests) ------------------ */
static void push_poll(struct rw_thread *t)
{
	RW_STORE(t->ctl->stats.outstanding, (uint32_t)rw_held(t));
}

/* ---- report: queue depth to the switch (R2P2-SW feedback, RackSched-SW load) ------- */
/* With --dispatcher the server is one target: its REPORTs carry worker_base and the
 * server's total (shared FIFO + running), from whichever thread just finished. */
static void report_start(struct rw_thread *t)
{
	if (t->w->c.dispatcher && t->idx != 0)
		return;
	if (rw_send_ctl(t, RAIN_REPORT, 0) == 0)
		t->reports_sent++;
}

static void report_done(struct rw_thread *t)
{
	uint64_t load = rw_report_load(t);
	if (rw_send_ctl(t, RAIN_REPORT, load > 0xffff ? 0xffff : (uint16_t)load) == 0)
		t->reports_sent++;
	RW_STORE(t->ctl->stats.outstanding, (uint32_t)rw_held(t));
}

/* ---- pull: an idle worker asks for a task (Draconis-SW) -----------------------------
 * One pull outstanding at a time; it is answered by a DISPATCH or by RAIN_EMPTY, after
 * which the next idle poll pulls again (rate bounded by the round trip). Respects
 * knobs.enabled like tokens do. A large task's DISPATCH is its header only: the thread
 * FETCHes the payload from the client first (thread.c); it holds the task meanwhile,
 * so it does not pull. */
static void pull_poll(struct rw_thread *t)
{
	if (t->pull_pending || !RW_LOAD(t->ctl->knobs.enabled) || rw_held(t) != 0)
		return;
	if (rw_send_ctl(t, RAIN_PULL, 1) == 0) {
		t->pulls_sent++;
		t->pull_pending = 1;
		rw_tx_flush(t);
	}
}

static void pull_done(struct rw_thread *t)
{
	t->pull_pending = 0;
}

static void pull_msg(struct rw_thread *t, struct rte_mbuf *m, const struct rain_hdr *rh)
{
	if (rh->kind == RAIN_EMPTY)
		t->pull_pending = 0;
	rte_pktmbuf_free(m);
}

static void nop(struct rw_thread *t) { (void)t; }

static void free_msg(struct rw_thread *t, struct rte_mbuf *m, const struct rain_hdr *rh)
{
	rte_pktmbuf_free(m);
}

static const struct rw_mode_ops modes[] = {
	/* rain takes FETCH_REPLYs for descriptors of slots it never received (thread.c) */
	{ .name = "rain", .rx_kinds = KIND_BIT(RAIN_DISPATCH) | KIND_BIT(RAIN_FETCH_REPLY),
	  .start = rain_topup, .poll = rain_topup, .done = rain_done, .msg = free_msg },
	{ .name = "push", .rx_kinds = KIND_BIT(RAIN_DISPATCH),
	  .start = nop, .poll = push_poll, .done = nop, .msg = free_msg },
	{ .name = "report", .rx_kinds = KIND_BIT(RAIN_DISPATCH),
	  .start = report_start, .poll = push_poll, .done = report_done, .msg = free_msg },
	{ .name = "pull", .rx_kinds = KIND_BIT(RAIN_DISPATCH) | KIND_BIT(RAIN_EMPTY) | KIND_BIT(RAIN_FETCH_REPLY),
	  .fetch = true, .start = nop, .poll = pull_poll, .done = pull_done, .msg = pull_msg },
};

const struct rw_mode_ops *rw_mode_find(const char *name)
{
	for (size_t i = 0; i < RTE_DIM(modes); i++)
		if (strcmp(modes[i].name, name) == 0)
			return &modes[i];
	return NULL;
}

const char *rw_mode_names(void)
{
	return "rain|push|report|pull";
}
