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
 * values (FNV-1a 64 by words over the values in order) and the request's service time: how
 * long the operation ran, times --kv-dilation k. With k > 1 (the emulated testbed)
 * the handler waits until k times the run time has passed, so service keeps its
 * ratio to the dilated arrivals, like `sleep`.
 *
 * A malformed request (unknown op, count 0 or above RAIN_KV_MAX_COUNT, a range past
 * the last key) is counted (kv_bad) and answered failed; it never reaches RocksDB.
 *
 * --kv-bench (rw_kv_bench) measures the handler alone, without a network: the same
 * database set-up and the same timed operation, run back to back from one thread, so
 * the service time of a GET or SCAN can be known before it is used as a workload.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>

#include "worker.h"

#ifdef RAIN_HAVE_ROCKSDB
#include <rocksdb/c.h>

static struct {
	rocksdb_t *db;
	rocksdb_readoptions_t *ro;
	rocksdb_cache_t *cache;
	rocksdb_block_based_table_options_t *table;
	uint32_t keys;
	uint32_t key_bytes;
	uint32_t item_bytes;
	double dilation;
	bool built;     /* this start built the database ... */
	double build_s; /* ... in this long */
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

/* The digest folds a value in by 8-byte words (rain_kv.h): byte by byte, FNV over a
 * 1-KB item costs more than RocksDB's read of it and would be what Figure 2 measures. */
static void fnv(uint64_t *h, const uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		*h = (*h ^ rte_be_to_cpu_64(w)) * RAIN_KV_FNV_PRIME;
	}
	if (i < n) {
		uint8_t last[8] = { 0 };
		memcpy(last, p + i, n - i);
		uint64_t w;
		memcpy(&w, last, 8);
		*h = (*h ^ rte_be_to_cpu_64(w)) * RAIN_KV_FNV_PRIME;
	}
}

/* The folder's parameters, as MANIFEST-rain holds them. */
static int manifest_line(char *buf, size_t cap, const struct rw_conf *c)
{
	return snprintf(buf, cap, "rain-kv 2 keys=%u key_bytes=%u item_bytes=%u seed=%llu\n", c->kv_keys,
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
		} else {
			rocksdb_compact_range(kv.db, NULL, 0, NULL, 0); /* one sorted run: a steady state to serve */
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
	/* The whole database in RocksDB's block cache (the paper's store serves from memory;
	 * the default 8 MB cache would make every SCAN of a large database a page-cache
	 * copy), and no compression: the values are random, compressing them only costs. */
	uint64_t db_bytes = (uint64_t)c->kv_keys * (c->kv_key_bytes + c->kv_item_bytes);
	uint64_t cache = db_bytes + db_bytes / 4 + (64u << 20);
	kv.cache = rocksdb_cache_create_lru(cache < (8ull << 30) ? cache : (8ull << 30));
	kv.table = rocksdb_block_based_options_create();
	rocksdb_block_based_options_set_block_cache(kv.table, kv.cache);
	rocksdb_options_set_block_based_table_factory(o, kv.table);
	rocksdb_options_set_compression(o, rocksdb_no_compression);
	/* Served read-only: after a build compacts it, no background compaction may compete
	 * with the requests for the worker's cores. */
	rocksdb_options_set_disable_auto_compactions(o, 1);
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
		kv.built = true;
		kv.build_s = (double)(now_ns() - t0) / 1e9;
		fprintf(stderr, "rain-worker: rocksdb: built in %.1f s\n", kv.build_s);
	}
	kv.ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_verify_checksums(kv.ro, 0);
	/* Read every item once, so that the first requests of a point find the cache as the
	 * last ones do (start-up, never measured). */
	uint64_t t0 = now_ns(), n = 0;
	rocksdb_iterator_t *it = rocksdb_create_iterator(kv.db, kv.ro);
	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it))
		n++;
	rocksdb_iter_destroy(it);
	if (n != c->kv_keys) {
		fprintf(stderr, "rain-worker: rocksdb: %s holds %llu items, not %u: remove the folder to rebuild it\n",
			c->kv_path, (unsigned long long)n, c->kv_keys);
		return -1;
	}
	fprintf(stderr, "rain-worker: rocksdb: %llu items in the cache in %.2f s\n", (unsigned long long)n,
		(double)(now_ns() - t0) / 1e9);
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

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A valid request, run and timed: what the handler serves and what --kv-bench measures
 * are this one function. r->service_ns is how long the operation ran: its wall time on
 * a worker's own core (hardware), or with --kv-dilation above 1 (the emulated testbed,
 * whose machine shares two cores among every host) the CPU time its thread used, which
 * a preemption in the middle of it does not stretch; k times that is then held. */
static int kv_timed(const struct rain_kv_req *q, struct rain_kv_result *r, uint64_t *t0, uint64_t *cpu_ns)
{
	uint8_t key[RAIN_KV_MAX_KEY_BYTES];
	uint64_t c0 = thread_cpu_ns();
	*t0 = now_ns();
	int rc = q->op == RAIN_KV_GET ? kv_get(q, r, key) : kv_scan(q, r, key);
	uint64_t wall = now_ns() - *t0;
	*cpu_ns = thread_cpu_ns() - c0;
	r->service_ns = kv.dilation > 1.0 ? *cpu_ns : wall;
	return rc;
}

static int kv_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	struct rain_kv_req q;
	rain_kv_req_decode(&q, task->service_ns);
	if (!rain_kv_req_valid(&q, kv.keys)) {
		RW_INC(t->kv_bad);
		return -1;
	}
	struct rain_kv_result r = { 0 };
	uint64_t t0, cpu;
	if (kv_timed(&q, &r, &t0, &cpu) < 0)
		return -1;
	if (kv.dilation > 1.0) {
		r.service_ns = (uint64_t)((double)r.service_ns * kv.dilation);
		sleep_until(t0 + r.service_ns);
	}
	rain_kv_result_encode(out->buf, &r);
	out->len = RAIN_KV_RESULT_LEN;
	return 0;
}

const struct rw_handler_ops rw_kv_handler = { .name = "rocksdb", .init = kv_init, .run = kv_run };

static const char *op_name(uint8_t op) { return op == RAIN_KV_GET ? "get" : "scan"; }

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least pct % of the sample at or below it. */
static uint64_t nearest_rank(const uint64_t *sorted, uint32_t n, uint32_t pct)
{
	uint64_t r = ((uint64_t)n * pct + 99) / 100;
	return sorted[r ? r - 1 : 0];
}

/* One request of point p from a start drawn uniformly over [0, keys - count]: splitmix64
 * from --kv-seed, one stream over all points in order, warm-ups included, so a run is
 * repeatable (the modulo's bias is below 2^-32 for any database size). */
static int bench_one(const struct rw_kv_point *p, uint64_t *rng, uint64_t *ns, uint64_t *cpu)
{
	struct rain_kv_req q = { .op = p->op, .count = p->count };
	q.start = (uint32_t)(rain_kv_splitmix64(rng) % ((uint64_t)kv.keys - p->count + 1));
	struct rain_kv_result r = { 0 };
	uint64_t t0;
	if (kv_timed(&q, &r, &t0, cpu) < 0) {
		fprintf(stderr, "rain-worker: --kv-bench %s:%u: RocksDB failed on the request from key %u\n",
			op_name(p->op), p->count, q.start);
		return -1;
	}
	if (r.found != p->count) { /* the folder is not the database its manifest names */
		fprintf(stderr, "rain-worker: --kv-bench %s:%u: found %u of %u items from key %u; fix: remove the "
				"database folder so it is built again\n", op_name(p->op), p->count, r.found, p->count, q.start);
		return -1;
	}
	*ns = r.service_ns;
	if (kv.dilation > 1.0)
		sleep_until(t0 + (uint64_t)((double)r.service_ns * kv.dilation));
	return 0;
}

int rw_kv_bench(struct rw_ctx *w)
{
	const struct rw_conf *c = &w->c;
	struct {
		double mean, cpu_mean;
		uint64_t p50, p99, min, max;
	} res[RW_KV_BENCH_POINTS];
	uint32_t n = c->kv_bench_requests, warm = n / 10 ? n / 10 : 1;
	uint64_t rng = c->kv_seed, skip, cpu;
	if (kv_init(w) < 0)
		return -1;
	/* --kv-dilation k > 1: each request is then held as the handler holds it on a dilated
	 * testbed (k x its run time, asleep), so the costs are those the emulated testbed's
	 * workers see: an operation after a long sleep runs on cold caches. */
	uint64_t *ns = malloc(sizeof(*ns) * n);
	if (ns == NULL) {
		fprintf(stderr, "rain-worker: --kv-bench-requests %u: out of memory\n", n);
		return -1;
	}
	for (uint32_t i = 0; i < c->kv_bench_points; i++) {
		const struct rw_kv_point *p = &c->kv_bench[i];
		for (uint32_t j = 0; j < warm; j++) /* caches, iterator set-up: not the steady state */
			if (bench_one(p, &rng, &skip, &cpu) < 0)
				goto fail;
		double sum = 0, cpu_sum = 0;
		for (uint32_t j = 0; j < n; j++) {
			if (bench_one(p, &rng, &ns[j], &cpu) < 0)
				goto fail;
			sum += (double)ns[j];
			cpu_sum += (double)cpu;
		}
		qsort(ns, n, sizeof(*ns), cmp_u64);
		res[i].mean = sum / n;
		res[i].cpu_mean = cpu_sum / n;
		res[i].p50 = nearest_rank(ns, n, 50);
		res[i].p99 = nearest_rank(ns, n, 99);
		res[i].min = ns[0];
		res[i].max = ns[n - 1];
		fprintf(stderr, "rain-worker: --kv-bench %s:%u: %u requests, mean %.2f us, p99 %.2f us\n",
			op_name(p->op), p->count, n, res[i].mean / 1e3, (double)res[i].p99 / 1e3);
	}
	free(ns);
	rocksdb_readoptions_destroy(kv.ro);
	rocksdb_close(kv.db);

	/* all or nothing on stdout: a failed point above printed no half object */
	printf("{\"bench\": \"rain-kv\", \"keys\": %u, \"key_bytes\": %u, \"item_bytes\": %u, \"seed\": %llu, "
	       "\"built\": %s, \"build_s\": %.3f, \"dilation\": %g, \"results\": [",
	       kv.keys, kv.key_bytes, kv.item_bytes, (unsigned long long)c->kv_seed, kv.built ? "true" : "false",
	       kv.build_s, kv.dilation);
	for (uint32_t i = 0; i < c->kv_bench_points; i++)
		printf("%s{\"op\": \"%s\", \"count\": %u, \"requests\": %u, \"mean_ns\": %.1f, \"p50_ns\": %" PRIu64
		       ", \"p99_ns\": %" PRIu64 ", \"min_ns\": %" PRIu64 ", \"max_ns\": %" PRIu64
		       ", \"cpu_mean_ns\": %.1f}",
		       i ? ", " : "", op_name(c->kv_bench[i].op), c->kv_bench[i].count, n, res[i].mean, res[i].p50,
		       res[i].p99, res[i].min, res[i].max, res[i].cpu_mean);
	printf("]}\n");
	fflush(stdout);
	return 0;
fail:
	free(ns);
	return -1;
}

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

int rw_kv_bench(struct rw_ctx *w)
{
	return kv_init(w); /* says so */
}

#endif
