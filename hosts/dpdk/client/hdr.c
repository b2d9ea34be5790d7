/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "hdr.h"

/* V2 cookies; bits 4-7 carry the word size, and V2 encodings always say 0x10. */
#define HDR_V2_ENCODING_COOKIE    (0x1c849303u | 0x10u)
#define HDR_V2_COMPRESSION_COOKIE (0x1c849304u | 0x10u)
#define HDR_PAYLOAD_HDR_LEN 40u

struct hdr_layout hdr_L;

/* The bucket layout depends only on (lowest, highest, significant figures): every
 * value below 2 * 10^sigfigs has its own counter; above, each bucket doubles the
 * range and keeps the same number of sub-buckets, so the relative error stays
 * below 10^-sigfigs. */
__attribute__((constructor)) static void hdr_layout_init(void)
{
	double largest_single_unit = 2.0 * pow(10, HDR_SIGFIGS);
	int sub_bucket_count_mag = (int)ceil(log2(largest_single_unit));

	hdr_L.unit_mag = (int)floor(log2((double)HDR_LOWEST));
	hdr_L.half_mag = (sub_bucket_count_mag > 1 ? sub_bucket_count_mag : 1) - 1;
	hdr_L.sub_bucket_count = 1ull << (hdr_L.half_mag + 1);
	hdr_L.half_count = hdr_L.sub_bucket_count / 2;
	hdr_L.sub_bucket_mask = (hdr_L.sub_bucket_count - 1) << hdr_L.unit_mag;

	uint64_t smallest_untrackable = hdr_L.sub_bucket_count << hdr_L.unit_mag;
	int buckets = 1;
	while (smallest_untrackable <= HDR_HIGHEST) {
		smallest_untrackable <<= 1;
		buckets++;
	}
	hdr_L.bucket_count = buckets;
	hdr_L.counts_len = (uint32_t)((buckets + 1) * hdr_L.half_count);
}

int hdr_init(struct hdr_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min_idx = h->max_idx = -1;
	h->counts = calloc(hdr_L.counts_len, sizeof(uint64_t));
	return h->counts ? 0 : -1;
}

void hdr_free(struct hdr_hist *h)
{
	free(h->counts);
	h->counts = NULL;
}

void hdr_add(struct hdr_hist *dst, const struct hdr_hist *src)
{
	if (src->total == 0)
		return;
	for (int32_t i = src->min_idx; i <= src->max_idx; i++)
		dst->counts[i] += src->counts[i];
	dst->total += src->total;
	dst->clamped += src->clamped;
	if (dst->min_idx < 0 || src->min_idx < dst->min_idx)
		dst->min_idx = src->min_idx;
	if (src->max_idx > dst->max_idx)
		dst->max_idx = src->max_idx;
}

uint64_t hdr_value_at_index(uint32_t i)
{
	int bucket = (int)(i >> hdr_L.half_mag) - 1;
	uint64_t sub = (i & (hdr_L.half_count - 1)) + hdr_L.half_count;
	if (bucket < 0) {
		sub -= hdr_L.half_count;
		bucket = 0;
	}
	return sub << (bucket + hdr_L.unit_mag);
}

static uint64_t equivalent_range(uint64_t v)
{
	int pow2ceil = 64 - __builtin_clzll(v | hdr_L.sub_bucket_mask);
	int bucket = pow2ceil - hdr_L.unit_mag - (hdr_L.half_mag + 1);
	uint64_t sub = v >> (bucket + hdr_L.unit_mag);
	if (sub >= hdr_L.sub_bucket_count)
		bucket++;
	return 1ull << (hdr_L.unit_mag + bucket);
}

uint64_t hdr_lowest_equivalent(uint64_t v)
{
	return hdr_value_at_index(hdr_index(v));
}

uint64_t hdr_highest_equivalent(uint64_t v)
{
	return hdr_lowest_equivalent(v) + equivalent_range(v) - 1;
}

uint64_t hdr_percentile(const struct hdr_hist *h, double pct)
{
	if (h->total == 0)
		return 0;
	if (pct > 100.0)
		pct = 100.0;
	uint64_t target = (uint64_t)(pct * (double)h->total / 100.0 + 0.5);
	if (target < 1)
		target = 1;
	uint64_t run = 0;
	for (int32_t i = h->min_idx; i <= h->max_idx; i++) {
		run += h->counts[i];
		if (run >= target) {
			uint64_t v = hdr_value_at_index((uint32_t)i);
			return pct > 0 ? hdr_highest_equivalent(v) : hdr_lowest_equivalent(v);
		}
	}
	return 0;
}

double hdr_mean(const struct hdr_hist *h)
{
	if (h->total == 0)
		return 0;
	double sum = 0; /* each counter stands for the middle of its range */
	for (int32_t i = h->min_idx; i <= h->max_idx; i++)
		if (h->counts[i]) {
			uint64_t v = hdr_value_at_index((uint32_t)i);
			sum += (double)h->counts[i] * (double)(hdr_lowest_equivalent(v) + (equivalent_range(v) >> 1));
		}
	return sum / (double)h->total;
}

uint64_t hdr_min(const struct hdr_hist *h)
{
	return h->total ? hdr_lowest_equivalent(hdr_value_at_index((uint32_t)h->min_idx)) : 0;
}

uint64_t hdr_max(const struct hdr_hist *h)
{
	return h->total ? hdr_highest_equivalent(hdr_value_at_index((uint32_t)h->max_idx)) : 0;
}

/* --- V2 encoding --------------------------------------------------------- */

/* ZigZag, then LEB128 with at most 9 bytes: the 9th carries the last 8 bits whole. */
static size_t put_zigzag(uint8_t *p, int64_t v)
{
	uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
	size_t n = 0;
	for (int i = 0; i < 8; i++) {
		if (z < 0x80) {
			p[n++] = (uint8_t)z;
			return n;
		}
		p[n++] = (uint8_t)((z & 0x7f) | 0x80);
		z >>= 7;
	}
	p[n++] = (uint8_t)z;
	return n;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static char *base64(const uint8_t *in, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
	if (out == NULL)
		return NULL;
	size_t i = 0;
	for (; i + 2 < n; i += 3) {
		uint32_t x = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		*o++ = tab[x >> 18];
		*o++ = tab[(x >> 12) & 63];
		*o++ = tab[(x >> 6) & 63];
		*o++ = tab[x & 63];
	}
	if (i < n) {
		uint32_t x = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
		*o++ = tab[x >> 18];
		*o++ = tab[(x >> 12) & 63];
		*o++ = i + 1 < n ? tab[(x >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

char *hdr_encode_b64(const struct hdr_hist *h)
{
	size_t ncounts = h->total ? (size_t)h->max_idx + 1 : 0;
	uint8_t *raw = malloc(HDR_PAYLOAD_HDR_LEN + 9 * ncounts);
	if (raw == NULL)
		return NULL;
	uint8_t *p = raw + HDR_PAYLOAD_HDR_LEN;
	for (size_t i = 0; i < ncounts;) {
		if (h->counts[i] == 0) { /* a run of zeros is one negative number */
			size_t run = 1;
			while (i + run < ncounts && h->counts[i + run] == 0)
				run++;
			p += put_zigzag(p, run > 1 ? -(int64_t)run : 0);
			i += run;
		} else {
			p += put_zigzag(p, (int64_t)h->counts[i]);
			i++;
		}
	}
	size_t raw_len = (size_t)(p - raw);
	double ratio = 1.0; /* integer-to-double conversion ratio */
	uint64_t ratio_bits;
	memcpy(&ratio_bits, &ratio, 8);
	put_be32(raw, HDR_V2_ENCODING_COOKIE);
	put_be32(raw + 4, (uint32_t)(raw_len - HDR_PAYLOAD_HDR_LEN));
	put_be32(raw + 8, 0); /* normalizing index offset */
	put_be32(raw + 12, HDR_SIGFIGS);
	put_be64(raw + 16, HDR_LOWEST);
	put_be64(raw + 24, HDR_HIGHEST);
	put_be64(raw + 32, ratio_bits);

	uLongf zlen = compressBound(raw_len);
	uint8_t *z = malloc(8 + zlen);
	char *out = NULL;
	if (z != NULL && compress2(z + 8, &zlen, raw, raw_len, Z_DEFAULT_COMPRESSION) == Z_OK) {
		put_be32(z, HDR_V2_COMPRESSION_COOKIE);
		put_be32(z + 4, (uint32_t)zlen);
		out = base64(z, 8 + zlen);
	}
	free(z);
	free(raw);
	return out;
}

int hdr_log_write(FILE *f, const char *comment, double start_unix_s, double max_ratio, unsigned ntags,
		  const char *const *tags, unsigned nint, double interval_s, double last_s, struct hdr_hist *const *hist)
{
	char when[64];
	time_t secs = (time_t)start_unix_s;
	struct tm tm;
	gmtime_r(&secs, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);

	if (comment != NULL)
		fprintf(f, "#[%s]\n", comment);
	fprintf(f, "#[Histogram log format version 1.3]\n");
	fprintf(f, "#[StartTime: %.3f (seconds since epoch), %s]\n", start_unix_s, when);
	fprintf(f, "#[BaseTime: %.3f (seconds since epoch)]\n", start_unix_s);
	fprintf(f, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n");
	for (unsigned k = 0; k < nint; k++)
		for (unsigned t = 0; t < ntags; t++) {
			const struct hdr_hist *h = hist[t * nint + k];
			char *b64 = hdr_encode_b64(h);
			if (b64 == NULL)
				return -1;
			fprintf(f, "Tag=%s,%.3f,%.3f,%.3f,%s\n", tags[t], k * interval_s,
				k + 1 == nint ? last_s : interval_s, (double)hdr_max(h) / max_ratio, b64);
			free(b64);
		}
	return ferror(f) ? -1 : 0;
}

/* --- self-test ----------------------------------------------------------- */

#define ST_TAGS 8
#define ST_INTERVALS 16

static void st_json(const char *tag, const struct hdr_hist *h, int first)
{
	printf("%s\"%s\": {\"total\": %llu, \"clamped\": %llu, \"min\": %llu, \"max\": %llu, \"mean\": %.6f, "
	       "\"p0\": %llu, \"p50\": %llu, \"p90\": %llu, \"p99\": %llu, \"p99.9\": %llu, \"p100\": %llu}",
	       first ? "" : ", ", tag, (unsigned long long)h->total, (unsigned long long)h->clamped,
	       (unsigned long long)hdr_min(h), (unsigned long long)hdr_max(h), hdr_mean(h),
	       (unsigned long long)hdr_percentile(h, 0), (unsigned long long)hdr_percentile(h, 50),
	       (unsigned long long)hdr_percentile(h, 90), (unsigned long long)hdr_percentile(h, 99),
	       (unsigned long long)hdr_percentile(h, 99.9), (unsigned long long)hdr_percentile(h, 100));
}

int hdr_selftest(const char *in, const char *out)
{
	static struct hdr_hist hs[ST_TAGS * ST_INTERVALS];
	static struct hdr_hist *hp[ST_TAGS * ST_INTERVALS];
	char tags[ST_TAGS][32];
	const char *tagp[ST_TAGS];
	unsigned ntags = 0, k = 0;
	char line[256];

	FILE *fi = fopen(in, "r");
	if (fi == NULL) {
		fprintf(stderr, "selftest-hdr: %s: %s\n", in, strerror(errno));
		return 1;
	}
	for (unsigned i = 0; i < ST_TAGS * ST_INTERVALS; i++) {
		if (hdr_init(&hs[i]) != 0) {
			fprintf(stderr, "selftest-hdr: out of memory\n");
			return 1;
		}
	}
	while (fgets(line, sizeof(line), fi)) {
		char tag[32];
		unsigned long long v, c = 1;
		if (strncmp(line, "---", 3) == 0) {
			if (++k == ST_INTERVALS) {
				fprintf(stderr, "selftest-hdr: more than %u intervals\n", ST_INTERVALS);
				return 1;
			}
			continue;
		}
		int n = sscanf(line, "%31s %llu %llu", tag, &v, &c);
		if (n < 2) {
			if (n <= 0)
				continue;
			fprintf(stderr, "selftest-hdr: bad line: %s", line);
			return 1;
		}
		unsigned t = 0;
		while (t < ntags && strcmp(tags[t], tag) != 0)
			t++;
		if (t == ntags) {
			if (ntags == ST_TAGS) {
				fprintf(stderr, "selftest-hdr: more than %u tags\n", ST_TAGS);
				return 1;
			}
			snprintf(tags[ntags], sizeof(tags[0]), "%s", tag);
			tagp[ntags] = tags[ntags];
			ntags++;
		}
		for (unsigned long long j = 0; j < c; j++)
			hdr_record(&hs[t * ST_INTERVALS + k], v);
	}
	fclose(fi);
	unsigned nint = k + 1;
	for (unsigned t = 0; t < ntags; t++)
		for (k = 0; k < nint; k++)
			hp[t * nint + k] = &hs[t * ST_INTERVALS + k];
	FILE *fo = fopen(out, "w");
	if (fo == NULL || hdr_log_write(fo, "rain-client selftest", 1700000000.0, 1.0, ntags, tagp, nint, 1.0, 1.0, hp) ||
	    fclose(fo) != 0) {
		fprintf(stderr, "selftest-hdr: cannot write %s\n", out);
		return 1;
	}
	printf("{");
	for (unsigned t = 0; t < ntags; t++) {
		struct hdr_hist all;
		if (hdr_init(&all) != 0)
			return 1;
		for (k = 0; k < nint; k++)
			hdr_add(&all, &hs[t * ST_INTERVALS + k]);
		st_json(tags[t], &all, t == 0);
		hdr_free(&all);
	}
	printf("}\n");
	return 0;
}
