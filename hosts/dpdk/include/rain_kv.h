/* SPDX-License-Identifier: Apache-2.0
 *
 * Key-value requests (the RocksDB application, section 5.2.2 of the paper), declared
 * once: what a task's 8 inline bytes mean to rain-worker --handler rocksdb, what its
 * response carries, and how the database's items are made. rain-client builds the
 * requests, rain-worker serves them, hosts/kv.py is the Python view;
 * tests/unit/test_proto_layout.py checks them against each other.
 *
 * Request (the task's inline bytes, big-endian like the rest of the header):
 *   byte 0    op       RAIN_KV_GET or RAIN_KV_SCAN
 *   byte 1    reserved 0
 *   bytes 2-3 count    keys to read, 1 .. RAIN_KV_MAX_COUNT
 *   bytes 4-7 start    the first key's number; start + count <= the database's keys
 * Response (after the response header, RAIN_KV_RESULT_LEN bytes, big-endian):
 *   service_ns u64  the request's service time: how long the operation ran on the
 *                   worker, times its --kv-dilation (the testbed's time dilation)
 *   found      u32  items read
 *   digest     u64  FNV-1a 64 over the values read, in key order, by 8-byte words:
 *                   h = (h ^ w) * prime for each big-endian word w of a value (the
 *                   last one zero-padded)
 *
 * Item i of a database with seed s: the key is i as 16 decimal digits, zero-padded,
 * then '.' up to the key size (so keys sort by number); the value is splitmix64's
 * stream from the state x = splitmix64(s ^ (i * golden)), each output big-endian, cut
 * to the item size. (Mixing the start state first keeps neighbours' streams apart: a
 * stream started at s ^ (i * golden) is item i+2's shifted by two words, which
 * RocksDB's block compression would find.)
 */
#ifndef RAIN_KV_H
#define RAIN_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RAIN_KV_GET            1u
#define RAIN_KV_SCAN           2u
#define RAIN_KV_MAX_COUNT      10000u /* a SCAN of 10,000 1-KB items is ~2 ms: the longest task */
#define RAIN_KV_MIN_KEY_BYTES  16u
#define RAIN_KV_MAX_KEY_BYTES  1024u
#define RAIN_KV_MAX_ITEM_BYTES 65536u
#define RAIN_KV_RESULT_LEN     20u
#define RAIN_KV_FNV_BASIS      0xcbf29ce484222325ull
#define RAIN_KV_FNV_PRIME      0x100000001b3ull
#define RAIN_KV_GOLDEN         0x9e3779b97f4a7c15ull

struct rain_kv_req {
	uint8_t op;
	uint8_t resv;
	uint16_t count;
	uint32_t start;
};

struct rain_kv_result {
	uint64_t service_ns;
	uint32_t found;
	uint64_t digest;
};

/* The inline bytes read as one big-endian u64 (as rain-worker reads a task's data). */
static inline uint64_t rain_kv_req_encode(const struct rain_kv_req *q)
{
	return (uint64_t)q->op << 56 | (uint64_t)q->resv << 48 | (uint64_t)q->count << 32 | q->start;
}

static inline void rain_kv_req_decode(struct rain_kv_req *q, uint64_t v)
{
	q->op = (uint8_t)(v >> 56);
	q->resv = (uint8_t)(v >> 48);
	q->count = (uint16_t)(v >> 32);
	q->start = (uint32_t)v;
}

static inline bool rain_kv_req_valid(const struct rain_kv_req *q, uint32_t keys)
{
	return (q->op == RAIN_KV_GET || q->op == RAIN_KV_SCAN) && q->resv == 0 && q->count >= 1 &&
	       q->count <= RAIN_KV_MAX_COUNT && (uint64_t)q->start + q->count <= keys;
}

static inline void rain_kv_put_be(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline void rain_kv_result_encode(uint8_t *p, const struct rain_kv_result *r)
{
	rain_kv_put_be(p, r->service_ns, 8);
	rain_kv_put_be(p + 8, r->found, 4);
	rain_kv_put_be(p + 12, r->digest, 8);
}

static inline uint64_t rain_kv_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += RAIN_KV_GOLDEN);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void rain_kv_key(uint8_t *key, uint32_t bytes, uint32_t i)
{
	uint64_t v = i;
	for (int d = 15; d >= 0; d--, v /= 10)
		key[d] = (uint8_t)('0' + v % 10);
	for (uint32_t j = 16; j < bytes; j++)
		key[j] = '.';
}

static inline void rain_kv_value(uint8_t *val, uint32_t bytes, uint64_t seed, uint32_t i)
{
	uint64_t s = seed ^ ((uint64_t)i * RAIN_KV_GOLDEN);
	uint64_t x = rain_kv_splitmix64(&s);
	uint8_t w[8];
	for (uint32_t j = 0; j < bytes; j += 8) {
		rain_kv_put_be(w, rain_kv_splitmix64(&x), 8);
		for (uint32_t b = 0; b < 8 && j + b < bytes; b++)
			val[j + b] = w[b];
	}
}

#endif
