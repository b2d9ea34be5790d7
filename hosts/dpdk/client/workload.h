/* SPDX-License-Identifier: Apache-2.0
 *
 * What rain-client generates: arrival processes and service-time distributions,
 * each a small table of function pointers chosen at parse time, and the per-lcore
 * random generator they draw from (xoshiro256**, seeded by splitmix64).
 */
#ifndef RAIN_WORKLOAD_H
#define RAIN_WORKLOAD_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t x = s[1] * 5;
	uint64_t out = ((x << 7) | (x >> 57)) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = (s[3] << 45) | (s[3] >> 19);
	return out;
}

/* Uniform in (0, 1]: never 0, so -log(u) is finite. */
static inline double rng_unit(struct rng *r)
{
	return (double)((rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Exp(1) by the ziggurat method (Marsaglia & Tsang, 2000): 256 layers, so ~99% of
 * draws cost one random number, one compare and one multiply, not a log(). The
 * layer index comes from the low 8 bits, the value from the top 53: independent. */
#define ZIG_LAYERS 256
struct zig_exp {
	uint64_t k[ZIG_LAYERS];  /* accept j < k[i] at once */
	double w[ZIG_LAYERS];    /* value = j * w[i] */
	double f[ZIG_LAYERS];    /* exp(-x) at the layer edges */
};
extern struct zig_exp zig;
double zig_exp_slow(struct rng *r, uint64_t j, unsigned i);

static inline double rng_exp(struct rng *r)
{
	uint64_t u = rng_next(r);
	unsigned i = u & (ZIG_LAYERS - 1);
	uint64_t j = u >> 11;
	if (j < zig.k[i])
		return (double)j * zig.w[i];
	return zig_exp_slow(r, j, i);
}

/* Arrival times within a piece of constant rate, as offsets from its start (in
 * whatever unit `mean` is in): arrival k (0, 1, ...) given arrival k-1 at `prev`.
 * `phase` in [0,1) staggers the lcores. Offsets, not gaps, so that a deterministic
 * process is computed as (phase + k) * mean and never accumulates rounding. */
struct arrival_ops {
	const char *name;
	double (*next)(struct rng *r, double mean, double phase, uint64_t k, double prev);
};

const struct arrival_ops *arrival_find(const char *name);

/* A service-time distribution (ns). */
struct service;
struct service_ops {
	const char *name;
	unsigned nparams;
	const char *params;                       /* for messages: "NS", "MEAN_NS", ... */
	int (*check)(const struct service *s);    /* 0 if the parameters make sense */
	uint64_t (*draw)(const struct service *s, struct rng *r, uint32_t *keys);
	double (*mean)(const struct service *s);
	/* key-value requests (rain_kv.h): draw() returns the request's inline bytes, not
	 * a service time; the worker's response says how long it ran */
	bool kv;
};

struct service {
	const struct service_ops *ops;
	double p[3];
};

const struct service_ops *service_find(const char *name);
/* "const:NS", "exp:MEAN_NS", "bimodal:NS1:NS2:P1", "keys-exp:MEAN_KEYS:NS_PER_KEY",
 * "kv-get:COUNT:KEYS", "kv-get-exp:MEAN_COUNT:KEYS", "kv-scan:…", "kv-scan-exp:…" as
 * tokens; 0 on success, else -1 with a message in err. */
int service_parse(char *const *tok, unsigned ntok, struct service *s, char *err, size_t errlen);

#endif /* RAIN_WORKLOAD_H */
