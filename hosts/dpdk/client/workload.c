/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rain_kv.h"
#include "workload.h"

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) { /* splitmix64: any seed, even 0, gives a usable state */
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

struct zig_exp zig;

#define ZIG_R 7.69711747013104972    /* start of the tail */
#define ZIG_V 3.949659822581572e-3   /* area of each layer */
#define ZIG_M 9007199254740992.0     /* 2^53: the resolution of j */

__attribute__((constructor)) static void zig_init(void)
{
	double d = ZIG_R, t = d, q = ZIG_V / exp(-d);
	zig.k[0] = (uint64_t)((d / q) * ZIG_M);
	zig.k[1] = 0;
	zig.w[0] = q / ZIG_M;
	zig.w[ZIG_LAYERS - 1] = d / ZIG_M;
	zig.f[0] = 1.0;
	zig.f[ZIG_LAYERS - 1] = exp(-d);
	for (int i = ZIG_LAYERS - 2; i >= 1; i--) {
		d = -log(ZIG_V / d + exp(-d));
		zig.k[i + 1] = (uint64_t)((d / t) * ZIG_M);
		t = d;
		zig.f[i] = exp(-d);
		zig.w[i] = d / ZIG_M;
	}
}

double zig_exp_slow(struct rng *r, uint64_t j, unsigned i)
{
	for (;;) {
		if (i == 0) /* the tail beyond R is itself exponential */
			return ZIG_R - log(rng_unit(r));
		double x = (double)j * zig.w[i];
		if (zig.f[i] + rng_unit(r) * (zig.f[i - 1] - zig.f[i]) < exp(-x))
			return x;
		uint64_t u = rng_next(r);
		i = u & (ZIG_LAYERS - 1);
		j = u >> 11;
		if (j < zig.k[i])
			return (double)j * zig.w[i];
	}
}

/* --- arrivals ------------------------------------------------------------ */

static double poisson_next(struct rng *r, double mean, double phase, uint64_t k, double prev)
{
	(void)phase; /* memoryless: a rate change simply restarts the process */
	return (k ? prev : 0) + mean * rng_exp(r);
}

static double constant_next(struct rng *r, double mean, double phase, uint64_t k, double prev)
{
	(void)r;
	(void)prev; /* lcores interleave, so the merged stream is evenly spaced too */
	return ((double)k + phase) * mean;
}

static const struct arrival_ops arrivals[] = {
	{"poisson", poisson_next},
	{"constant", constant_next},
};

const struct arrival_ops *arrival_find(const char *name)
{
	for (size_t i = 0; i < sizeof(arrivals) / sizeof(arrivals[0]); i++)
		if (strcmp(arrivals[i].name, name) == 0)
			return &arrivals[i];
	return NULL;
}

/* --- service times ------------------------------------------------------- */

static uint64_t ns_round(double x)
{
	return x <= 0 ? 0 : x < 9e18 ? (uint64_t)(int64_t)(x + 0.5) : UINT64_MAX; /* signed: one instruction */
}

static int const_check(const struct service *s) { return s->p[0] >= 0 ? 0 : -1; }
static uint64_t const_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	(void)r;
	*keys = 0;
	return ns_round(s->p[0]);
}
static double const_mean(const struct service *s) { return s->p[0]; }

static int exp_check(const struct service *s) { return s->p[0] > 0 ? 0 : -1; }
static uint64_t exp_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	*keys = 0;
	return ns_round(s->p[0] * rng_exp(r));
}
static double exp_mean(const struct service *s) { return s->p[0]; }

static int bimodal_check(const struct service *s)
{
	return s->p[0] >= 0 && s->p[1] >= 0 && s->p[2] >= 0 && s->p[2] <= 1 ? 0 : -1;
}
static uint64_t bimodal_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	*keys = 0;
	return ns_round(rng_unit(r) <= s->p[2] ? s->p[0] : s->p[1]);
}
static double bimodal_mean(const struct service *s) { return s->p[2] * s->p[0] + (1 - s->p[2]) * s->p[1]; }

/* Key counts are geometric on {1, 2, ...} with mean MEAN_KEYS: the discrete
 * exponential, so a request never asks for zero keys. */
static int keys_check(const struct service *s) { return s->p[0] >= 1 && s->p[1] >= 0 ? 0 : -1; }
static uint64_t keys_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	double k = 1;
	if (s->p[0] > 1)
		k += floor(log(rng_unit(r)) / log(1 - 1 / s->p[0]));
	if (k > 4e9)
		k = 4e9;
	*keys = (uint32_t)k;
	return ns_round(k * s->p[1]);
}
static double keys_mean(const struct service *s) { return s->p[0] * s->p[1]; }

/* Key-value requests for rain-worker --handler rocksdb: COUNT keys (constant, or
 * geometric with that mean like keys-exp, at most RAIN_KV_MAX_COUNT and KEYS) from a
 * first key uniform over the KEYS the database holds. */
static int kv_check(const struct service *s)
{
	return s->p[0] >= 1 && s->p[0] <= RAIN_KV_MAX_COUNT && s->p[1] >= s->p[0] && s->p[1] <= 2147483648.0 ? 0 : -1;
}
static uint64_t kv_draw(const struct service *s, struct rng *r, uint32_t *keys, uint8_t op, bool geometric)
{
	double k = s->p[0];
	if (geometric) {
		k = 1;
		if (s->p[0] > 1)
			k += floor(log(rng_unit(r)) / log(1 - 1 / s->p[0]));
	}
	uint32_t n = (uint32_t)s->p[1];
	uint32_t count = k > RAIN_KV_MAX_COUNT ? RAIN_KV_MAX_COUNT : (uint32_t)k;
	if (count > n)
		count = n;
	uint32_t start = (uint32_t)(rng_next(r) % ((uint64_t)n - count + 1));
	*keys = count;
	return rain_kv_req_encode(&(struct rain_kv_req){ .op = op, .count = (uint16_t)count, .start = start });
}
static uint64_t kv_get_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	return kv_draw(s, r, keys, RAIN_KV_GET, false);
}
static uint64_t kv_get_exp_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	return kv_draw(s, r, keys, RAIN_KV_GET, true);
}
static uint64_t kv_scan_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	return kv_draw(s, r, keys, RAIN_KV_SCAN, false);
}
static uint64_t kv_scan_exp_draw(const struct service *s, struct rng *r, uint32_t *keys)
{
	return kv_draw(s, r, keys, RAIN_KV_SCAN, true);
}
static double kv_mean(const struct service *s) { return 0.0; } /* the worker measures it */

static const struct service_ops services[] = {
	{"const", 1, "NS", const_check, const_draw, const_mean, false},
	{"exp", 1, "MEAN_NS", exp_check, exp_draw, exp_mean, false},
	{"bimodal", 3, "NS1:NS2:P1", bimodal_check, bimodal_draw, bimodal_mean, false},
	{"keys-exp", 2, "MEAN_KEYS:NS_PER_KEY", keys_check, keys_draw, keys_mean, false},
	{"kv-get", 2, "COUNT:KEYS", kv_check, kv_get_draw, kv_mean, true},
	{"kv-get-exp", 2, "MEAN_COUNT:KEYS", kv_check, kv_get_exp_draw, kv_mean, true},
	{"kv-scan", 2, "COUNT:KEYS", kv_check, kv_scan_draw, kv_mean, true},
	{"kv-scan-exp", 2, "MEAN_COUNT:KEYS", kv_check, kv_scan_exp_draw, kv_mean, true},
};

const struct service_ops *service_find(const char *name)
{
	for (size_t i = 0; i < sizeof(services) / sizeof(services[0]); i++)
		if (strcmp(services[i].name, name) == 0)
			return &services[i];
	return NULL;
}

int service_parse(char *const *tok, unsigned ntok, struct service *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (ntok == 0) {
		snprintf(err, errlen, "missing service distribution");
		return -1;
	}
	s->ops = service_find(tok[0]);
	if (s->ops == NULL) {
		snprintf(err, errlen, "unknown service distribution '%s' (const, exp, bimodal, keys-exp, kv-get, kv-get-exp, kv-scan, kv-scan-exp)", tok[0]);
		return -1;
	}
	if (ntok - 1 != s->ops->nparams) {
		snprintf(err, errlen, "service '%s' takes %s", s->ops->name, s->ops->params);
		return -1;
	}
	for (unsigned i = 0; i < s->ops->nparams; i++) {
		char *end;
		s->p[i] = strtod(tok[i + 1], &end);
		if (*tok[i + 1] == '\0' || *end != '\0' || !isfinite(s->p[i])) {
			snprintf(err, errlen, "service '%s': '%s' is not a number (%s)", s->ops->name, tok[i + 1],
				 s->ops->params);
			return -1;
		}
	}
	if (s->ops->check(s) != 0) {
		snprintf(err, errlen, "service '%s:%s': parameters out of range", s->ops->name, s->ops->params);
		return -1;
	}
	return 0;
}
