/* SPDX-License-Identifier: Apache-2.0
 *
 * A small HdrHistogram: values 1 ns .. 100 s at 3 significant digits, the bucket
 * layout of the HdrHistogram family, and its V2 wire encoding (ZigZag LEB128
 * counts, zero runs as negative lengths, zlib-deflated, cookie-wrapped, base64) in
 * the standard interval-log format, so any HdrHistogram tool (Java, C, Python hdrh)
 * reads what rain-client writes. Written from the published format description.
 */
#ifndef RAIN_HDR_H
#define RAIN_HDR_H

#include <stdint.h>
#include <stdio.h>

#define HDR_LOWEST  1ull
#define HDR_HIGHEST 100000000000ull /* 100 s in ns */
#define HDR_SIGFIGS 3

struct hdr_layout {
	int unit_mag;              /* log2(lowest) */
	int half_mag;              /* log2(sub_bucket_count / 2) */
	uint64_t half_count;
	uint64_t sub_bucket_count;
	uint64_t sub_bucket_mask;
	int bucket_count;
	uint32_t counts_len;
};

extern struct hdr_layout hdr_L;

struct hdr_hist {
	uint64_t total;
	uint64_t clamped;          /* values above HDR_HIGHEST, recorded as HDR_HIGHEST */
	int32_t min_idx, max_idx;  /* -1 when empty: merge and encode touch only this range */
	uint64_t *counts;          /* hdr_L.counts_len; calloc'd, so untouched pages cost nothing */
};

int hdr_init(struct hdr_hist *h);  /* 0, or -1 if out of memory */
void hdr_free(struct hdr_hist *h);

static inline uint32_t hdr_index(uint64_t v)
{
	int pow2ceil = 64 - __builtin_clzll(v | hdr_L.sub_bucket_mask);
	int bucket = pow2ceil - hdr_L.unit_mag - (hdr_L.half_mag + 1);
	uint64_t sub = v >> (bucket + hdr_L.unit_mag);
	return ((uint32_t)(bucket + 1) << hdr_L.half_mag) + (uint32_t)(sub - hdr_L.half_count);
}

static inline void hdr_record(struct hdr_hist *h, uint64_t v)
{
	if (v > HDR_HIGHEST) {
		v = HDR_HIGHEST;
		h->clamped++;
	}
	int32_t i = (int32_t)hdr_index(v);
	h->counts[i]++;
	h->total++;
	if (i > h->max_idx)
		h->max_idx = i;
	if (h->min_idx < 0 || i < h->min_idx)
		h->min_idx = i;
}

void hdr_add(struct hdr_hist *dst, const struct hdr_hist *src);
uint64_t hdr_value_at_index(uint32_t i);
uint64_t hdr_lowest_equivalent(uint64_t v);
uint64_t hdr_highest_equivalent(uint64_t v);
uint64_t hdr_percentile(const struct hdr_hist *h, double pct); /* as HdrHistogram: highest equivalent value */
double hdr_mean(const struct hdr_hist *h);
uint64_t hdr_min(const struct hdr_hist *h);
uint64_t hdr_max(const struct hdr_hist *h);

/* The base64 text of the compressed V2 encoding; malloc'd, NULL if out of memory. */
char *hdr_encode_b64(const struct hdr_hist *h);

/* An interval log: header comments, the legend, then one line per interval and tag,
 * `Tag=<tag>,<start s>,<length s>,<max / max_ratio>,<histogram>`. Timestamps are
 * relative to start_unix_s (written as StartTime and BaseTime). hist[t * nint + k]
 * is tag t's histogram of interval k; intervals last interval_s, the last one last_s. */
int hdr_log_write(FILE *f, const char *comment, double start_unix_s, double max_ratio, unsigned ntags,
		  const char *const *tags, unsigned nint, double interval_s, double last_s, struct hdr_hist *const *hist);

/* `rain-client --selftest-hdr IN OUT`: record the values of IN (lines `TAG VALUE
 * [COUNT]`, `---` starts the next interval) into OUT as an interval log; print per-tag
 * totals and percentiles as JSON on stdout. Returns the exit status. */
int hdr_selftest(const char *in, const char *out);

#endif /* RAIN_HDR_H */
