/* SPDX-License-Identifier: Apache-2.0
 *
 * The RocksDB handler (--handler rocksdb): the paper's real application (section 5.2.2).
 *
 * One database per worker server, opened once at start-up by every thread's process
 * and shared (RocksDB's DB handle is thread-safe). It holds --kv-keys items numbered
 * 0 .. n-1, made by rain_kv_key / rain_kv_value (rain_proto.h) from --kv-seed: keys
 * of --kv-key-bytes, values of --kv-item-bytes, in key order, so an iterator visits
 * them by number. A database folder whose MANIFEST-rain names the same four
 * parameters is opened as it is; otherwise it is built (and the build is not part of
 * any measurement: start-up waits for it, once per folder).
 *
 * A request is the task's 8 inline bytes (struct rain_kv_req): GET reads `count` keys
 * from `start` by point Gets, SCAN iterates over `count` items from `start`. The
 * result (struct rain_kv_result) says how many items were found, a digest of their
 * values (FNV-1a 64 over the values in order) and the request's service time: how
 * long the operation ran, times --kv-dilation k. With k > 1 (the emulated testbed)
 * the handler waits until k times the run time has passed, so service keeps its
 * ratio to the dilated arrivals, like `sleep`.
 *
 * A malformed request (unknown op, count 0 or above RAIN_KV_MAX_COUNT, a range past
 * the last key) is counted (kv_bad) and answered failed; it never reaches RocksDB.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <rte_cycles.h>

#include "worker.h"

#ifdef RAIN_HAVE_ROCKSDB
#include <rocksdb/c.h>

static struct {
	rocksdb_t *db;
	rocksdb_readoptions_t *ro;
	uint32_t keys;
	uint32_t key_bytes;
	uint32_t item_bytes;
	double dilation;
} kv;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000ull),
			       .tv_nsec = (long)(deadline_ns % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void fnv(uint64_t *h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		*h = (*h ^ p[i]) * 0x100000001b3ull;
}

/* The folder's parameters, as MANIFEST-rain holds them. */
static int manifest_line(char *buf, size_t cap, const struct rw_conf *c)
{
	return snprintf(buf, cap, "rain-kv 1 keys=%u key_bytes=%u item_bytes=%u seed=%llu\n", c->kv_keys,
			c->kv_key_bytes, c->kv_item_bytes, (unsigned long long)c->kv_seed);
}

static bool manifest_matches(const char *path, const char *want)
{
	char got[256] = { 0 };
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	size_t n = fread(got, 1, sizeof got - 1, f);
	fclose(f);
	return n == strlen(want) && memcmp(got, want, n) == 0;
}

static int build(const struct rw_conf *c)
{
	char *err = NULL;
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writeoptions_disable_WAL(wo, 1); /* a build is redone, never recovered */
	uint8_t *key = malloc(c->kv_key_bytes), *val = malloc(c->kv_item_bytes);
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	int rc = 0;
	if (key == NULL || val == NULL || b == NULL) {
		rc = -1;
		goto out;
	}
	for (uint32_t i = 0; i < c->kv_keys && rc == 0; i++) {
		rain_kv_key(key, c->kv_key_bytes, i);
		rain_kv_value(val, c->kv_item_bytes, c->kv_seed, i);
		rocksdb_writebatch_put(b, (const char *)key, c->kv_key_bytes, (const char *)val, c->kv_item_bytes);
		if (rocksdb_writebatch_count(b) >= 4096 || i + 1 == c->kv_keys) {
			rocksdb_write(kv.db, wo, b, &err);
			rocksdb_writebatch_clear(b);
			if (err != NULL) {
				fprintf(stderr, "rain-worker: rocksdb: writing item %u failed: %s\n", i, err);
				rocksdb_free(err);
				rc = -1;
			}
		}
		if (i && i % 1000000 == 0)
			fprintf(stderr, "rain-worker: rocksdb: %u of %u items written\n", i, c->kv_keys);
	}
	if (rc == 0) {
		rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
		rocksdb_flushoptions_set_wait(fo, 1);
		rocksdb_flush(kv.db, fo, &err);
		rocksdb_flushoptions_destroy(fo);
		if (err != NULL) {
			fprintf(stderr, "rain-worker: rocksdb: flush failed: %s\n", err);
			rocksdb_free(err);
			rc = -1;
		}
	}
out:
	if (b)
		rocksdb_writebatch_destroy(b);
	free(key);
	free(val);
	rocksdb_writeoptions_destroy(wo);
	return rc;
}

static int kv_init(struct rw_ctx *w)
{
	const struct rw_conf *c = &w->c;
	char want[256], mpath[4096];
	if (c->kv_path == NULL) {
		fprintf(stderr, "rain-worker: --handler rocksdb needs --kv-path DIR (the database folder)\n");
		return -1;
	}
	manifest_line(want, sizeof want, c);
	snprintf(mpath, sizeof mpath, "%s/MANIFEST-rain", c->kv_path);
	bool fresh = !manifest_matches(mpath, want);
	if (fresh) { /* another parameter set or a build that did not finish: start over */
		rocksdb_options_t *o = rocksdb_options_create();
		char *err = NULL;
		rocksdb_destroy_db(o, c->kv_path, &err);
		rocksdb_options_destroy(o);
		if (err != NULL)
			rocksdb_free(err); /* nothing there yet */
		remove(mpath);
	}
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(o, 1);
	rocksdb_options_increase_parallelism(o, 2);
	char *err = NULL;
	mkdir(c->kv_path, 0755);
	kv.db = rocksdb_open(o, c->kv_path, &err);
	rocksdb_options_destroy(o);
	if (err != NULL) {
		fprintf(stderr, "rain-worker: rocksdb: cannot open %s: %s\n", c->kv_path, err);
		rocksdb_free(err);
		return -1;
	}
	if (fresh) {
		uint64_t t0 = now_ns();
		fprintf(stderr, "rain-worker: rocksdb: building %s: %u items of %u + %u bytes, seed %llu\n", c->kv_path,
			c->kv_keys, c->kv_key_bytes, c->kv_item_bytes, (unsigned long long)c->kv_seed);
		if (build(c) < 0)
			return -1;
		FILE *f = fopen(mpath, "w");
		if (f == NULL || fputs(want, f) < 0 || fclose(f) != 0) {
			fprintf(stderr, "rain-worker: rocksdb: cannot write %s: %s\n", mpath, strerror(errno));
			return -1;
		}
		fprintf(stderr, "rain-worker: rocksdb: built in %.1f s\n", (double)(now_ns() - t0) / 1e9);
	}
	kv.ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_verify_checksums(kv.ro, 0);
	kv.keys = c->kv_keys;
	kv.key_bytes = c->kv_key_bytes;
	kv.item_bytes = c->kv_item_bytes;
	kv.dilation = c->kv_dilation;
	return 0;
}

static int kv_get(const struct rain_kv_req *q, struct rain_kv_result *r, uint8_t *key)
{
	uint64_t h = RAIN_KV_FNV_BASIS;
	uint32_t found = 0;
	for (uint32_t i = 0; i < q->count; i++) {
		char *err = NULL;
		size_t n = 0;
		rain_kv_key(key, kv.key_bytes, q->start + i);
		rocksdb_pinnableslice_t *v = rocksdb_get_pinned(kv.db, kv.ro, (const char *)key, kv.key_bytes, &err);
		if (err != NULL) {
			rocksdb_free(err);
			return -1;
		}
		if (v != NULL) {
			const char *p = rocksdb_pinnableslice_value(v, &n);
			fnv(&h, (const uint8_t *)p, n);
			found++;
			rocksdb_pinnableslice_destroy(v);
		}
	}
	r->found = found;
	r->digest = h;
	return 0;
}

static int kv_scan(const struct rain_kv_req *q, struct rain_kv_result *r, uint8_t *key)
{
	uint64_t h = RAIN_KV_FNV_BASIS;
	uint32_t found = 0;
	rocksdb_iterator_t *it = rocksdb_create_iterator(kv.db, kv.ro);
	rain_kv_key(key, kv.key_bytes, q->start);
	for (rocksdb_iter_seek(it, (const char *)key, kv.key_bytes); found < q->count && rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t n = 0;
		const char *p = rocksdb_iter_value(it, &n);
		fnv(&h, (const uint8_t *)p, n);
		found++;
	}
	char *err = NULL;
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err != NULL) {
		rocksdb_free(err);
		return -1;
	}
	r->found = found;
	r->digest = h;
	return 0;
}

static int kv_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	struct rain_kv_req q;
	uint8_t key[RAIN_KV_MAX_KEY_BYTES];
	rain_kv_req_decode(&q, task->service_ns);
	if (!rain_kv_req_valid(&q, kv.keys)) {
		RW_INC(t->kv_bad);
		return -1;
	}
	struct rain_kv_result r = { 0 };
	uint64_t t0 = now_ns();
	int rc = q.op == RAIN_KV_GET ? kv_get(&q, &r, key) : kv_scan(&q, &r, key);
	uint64_t ran = now_ns() - t0;
	if (rc < 0)
		return -1;
	r.service_ns = ran;
	if (kv.dilation > 1.0) {
		r.service_ns = (uint64_t)((double)ran * kv.dilation);
		sleep_until(t0 + r.service_ns);
	}
	rain_kv_result_encode(out->buf, &r);
	out->len = RAIN_KV_RESULT_LEN;
	return 0;
}

const struct rw_handler_ops rw_kv_handler = { .name = "rocksdb", .init = kv_init, .run = kv_run };

#else /* built without RocksDB */

static int kv_init(struct rw_ctx *w)
{
	fprintf(stderr, "rain-worker: built without RocksDB: install librocksdb-dev (make setup does) and "
			"rebuild (make -C hosts/dpdk)\n");
	return -1;
}

static int kv_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	return -1;
}

const struct rw_handler_ops rw_kv_handler = { .name = "rocksdb", .init = kv_init, .run = kv_run };

#endif
