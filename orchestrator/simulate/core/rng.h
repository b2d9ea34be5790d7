/* SPDX-License-Identifier: Apache-2.0
 *
 * The simulator's random numbers: xoshiro256** (Blackman and Vigna), seeded by
 * splitmix64 as its authors recommend. Integer arithmetic only up to the final
 * conversion, so a seed gives the same draws on every machine.
 */
#ifndef RS_RNG_H
#define RS_RNG_H

#include <math.h>
#include <stdint.h>

struct rs_rng {
	uint64_t s[4];
};

static inline uint64_t rs_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Stream `stream` of `seed`: independent generators for the client and the policies,
 * so a policy's draws never shift the client's. */
static inline void rs_rng_seed(struct rs_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
	for (int i = 0; i < 4; i++)
		r->s[i] = rs_splitmix64(&x);
}

static inline uint64_t rs_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rs_next(struct rs_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rs_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rs_rotl(s[3], 45);
	return out;
}

/* Uniform on (0, 1]: never 0, so log() of it is finite. */
static inline double rs_unit(struct rs_rng *r)
{
	return (double)((rs_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Exp(1) by inversion. */
static inline double rs_exp1(struct rs_rng *r)
{
	return -log(rs_unit(r));
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; its bias is < n / 2^64). */
static inline uint32_t rs_below(struct rs_rng *r, uint32_t n)
{
	return (uint32_t)(((unsigned __int128)rs_next(r) * n) >> 64);
}

#endif /* RS_RNG_H */
