/* SPDX-License-Identifier: Apache-2.0
 *
 * One-server RPC scheduling (Rakaia, OSDI 2026): what the host-side policies share.
 * The server's cores are the engine's worker threads (one host); the "switch" is the
 * server's own receive path, reached over the ideal network (no delay, no per-packet
 * cost: the paper's simulation has zero system overheads). A core that is idle and
 * asks for work sends a token (rs_send_token); its arrival is the ask.
 *
 * Connections: each request belongs to one of params[0] client connections, drawn at
 * its arrival from the policy's stream: uniform (params[1] == 0), or Zipf with
 * exponent params[1] (connection k with weight 1 / (k + 1)^s). A connection is bound to
 * core k mod cores, as a TCP server's accept loop hands them out round-robin.
 */
#ifndef RS_RPC_H
#define RS_RPC_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

#define RPC_MAX_CONNECTIONS 1000000

struct rpc_conns {
	int32_t n;
	double *cdf; /* Zipf: cumulative weights, n of them; NULL: uniform */
};

static inline int rpc_conns_init(struct rpc_conns *c, const struct rs_sim_view *v, char *err, size_t errlen)
{
	double n = v->params[0], s = v->params[1];
	if (!(n >= 1 && n <= RPC_MAX_CONNECTIONS) || n != (double)(int32_t)n) {
		snprintf(err, errlen, "connections must be a whole number from 1 to %d, not %g", RPC_MAX_CONNECTIONS, n);
		return -1;
	}
	if (!(s >= 0 && s <= 10)) {
		snprintf(err, errlen, "the Zipf exponent of the connections' spread must be 0 (uniform) to 10, not %g", s);
		return -1;
	}
	c->n = (int32_t)n;
	c->cdf = NULL;
	if (s > 0) {
		c->cdf = malloc(sizeof *c->cdf * (size_t)c->n);
		if (!c->cdf) {
			snprintf(err, errlen, "out of memory (%d connections)", c->n);
			return -1;
		}
		double sum = 0;
		for (int32_t k = 0; k < c->n; k++)
			c->cdf[k] = sum += pow((double)k + 1.0, -s);
		for (int32_t k = 0; k < c->n; k++)
			c->cdf[k] /= sum;
	}
	return 0;
}

/* The connection of the next request: one draw of the policy's stream. */
static inline int32_t rpc_conn_draw(const struct rpc_conns *c, struct rs_rng *r)
{
	if (!c->cdf)
		return (int32_t)rs_below(r, (uint32_t)c->n);
	double u = rs_unit(r);
	int32_t lo = 0, hi = c->n - 1;
	while (lo < hi) { /* the first k with cdf[k] >= u */
		int32_t mid = lo + (hi - lo) / 2;
		if (c->cdf[mid] >= u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static inline void rpc_conns_fini(struct rpc_conns *c)
{
	free(c->cdf);
	c->cdf = NULL;
}

/* Idle cores, as a stack. */
struct rpc_idle {
	int32_t *v;
	int32_t len;
	uint8_t *is; /* per core */
};

static inline int rpc_idle_init(struct rpc_idle *d, int32_t cores)
{
	d->v = malloc(sizeof *d->v * (size_t)cores);
	d->is = calloc((size_t)cores, 1);
	d->len = 0;
	return d->v && d->is ? 0 : -1;
}

static inline void rpc_idle_push(struct rpc_idle *d, int32_t w)
{
	if (!d->is[w]) {
		d->is[w] = 1;
		d->v[d->len++] = w;
	}
}

/* An idle core (the one that went idle last), or -1. */
static inline int32_t rpc_idle_pop(struct rpc_idle *d)
{
	if (!d->len)
		return -1;
	int32_t w = d->v[--d->len];
	d->is[w] = 0;
	return w;
}

/* Take core w off the idle set (it got work another way). */
static inline void rpc_idle_take(struct rpc_idle *d, int32_t w)
{
	if (!d->is[w])
		return;
	d->is[w] = 0;
	for (int32_t i = 0; i < d->len; i++)
		if (d->v[i] == w) {
			d->v[i] = d->v[--d->len];
			return;
		}
}

static inline void rpc_idle_fini(struct rpc_idle *d)
{
	free(d->v);
	free(d->is);
}

#endif /* RS_RPC_H */
