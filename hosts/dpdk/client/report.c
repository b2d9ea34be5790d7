/* SPDX-License-Identifier: Apache-2.0
 *
 * After the run: merge the lcores' counters and histograms, write the interval
 * logs and summary.json (written to a temporary name and renamed, so a reader
 * never sees half a file).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ethdev.h>

#include "client.h"

static void add_counters(struct rc_counters *a, const struct rc_counters *b)
{
	a->offered += b->offered;
	a->sent += b->sent;
	a->sent_in_window += b->sent_in_window;
	a->received += b->received;
	a->failed += b->failed;
	a->timed_out += b->timed_out;
	a->rejected += b->rejected;
	a->resubmitted += b->resubmitted;
	a->late_reply += b->late_reply;
	a->lost += b->lost;
	a->not_sent += b->not_sent;
	a->waited += b->waited;
	a->late_sends += b->late_sends;
	if (b->max_lag_tsc > a->max_lag_tsc)
		a->max_lag_tsc = b->max_lag_tsc;
	a->large += b->large;
	a->service_ns_sum += b->service_ns_sum;
	a->service_n += b->service_n;
	a->keys_sum += b->keys_sum;
}

static void json_counters(FILE *f, const struct rc_counters *c, double dur)
{
	fprintf(f,
		"\"offered\": %llu, \"sent\": %llu, \"sent_in_window\": %llu, \"received\": %llu, \"failed\": %llu, "
		"\"timed_out\": %llu, \"rejected\": %llu, \"resubmitted\": %llu, \"late_reply\": %llu, \"lost\": %llu, "
		"\"not_sent\": %llu, \"waited_for_admission\": %llu, \"late_sends\": %llu, \"max_lag_ns\": %llu, "
		"\"large\": %llu, \"mean_service_ns\": %.1f, \"mean_keys\": %.3f, "
		"\"scheduled_rps\": %.3f, \"achieved_rps\": %.3f, \"received_rps\": %.3f",
		(unsigned long long)c->offered, (unsigned long long)c->sent, (unsigned long long)c->sent_in_window,
		(unsigned long long)c->received, (unsigned long long)c->failed, (unsigned long long)c->timed_out,
		(unsigned long long)c->rejected, (unsigned long long)c->resubmitted, (unsigned long long)c->late_reply,
		(unsigned long long)c->lost, (unsigned long long)c->not_sent, (unsigned long long)c->waited,
		(unsigned long long)c->late_sends, (unsigned long long)((double)c->max_lag_tsc * 1e9 / (double)rc.hz),
		(unsigned long long)c->large,
		c->service_n ? (double)c->service_ns_sum / (double)c->service_n : 0.0,
		c->offered ? (double)c->keys_sum / (double)c->offered : 0.0, (double)c->offered / dur,
		(double)c->sent_in_window / dur, (double)c->received / dur);
}

static void json_hist(FILE *f, const char *key, const struct hdr_hist *h, double scale)
{
	fprintf(f,
		"\"%s\": {\"count\": %llu, \"min\": %.3f, \"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, "
		"\"p99.9\": %.3f, \"max\": %.3f, \"clamped\": %llu}",
		key, (unsigned long long)h->total, (double)hdr_min(h) / scale, hdr_mean(h) / scale,
		(double)hdr_percentile(h, 50) / scale, (double)hdr_percentile(h, 90) / scale,
		(double)hdr_percentile(h, 99) / scale, (double)hdr_percentile(h, 99.9) / scale,
		(double)hdr_max(h) / scale, (unsigned long long)h->clamped);
}

static void json_service(FILE *f, const struct service *s)
{
	fprintf(f, "\"%s", s->ops->name);
	for (unsigned i = 0; i < s->ops->nparams; i++)
		fprintf(f, ":%.17g", s->p[i]);
	fprintf(f, "\"");
}

/* The schedule's mean rate over the measurement window. */
/* The port's own counters (rte_eth_stats): with the switch's count of what it sent to
 * this host's port and the kernel's of what the interface took, they say where frames
 * that never reached the load loop were lost. */
static void json_port(FILE *f, uint16_t port)
{
	struct rte_eth_stats st;
	if (rte_eth_stats_get(port, &st) != 0) {
		fprintf(f, "  \"port\": null,\n");
		return;
	}
	fprintf(f, "  \"port\": {\"ipackets\": %" PRIu64 ", \"opackets\": %" PRIu64 ", \"imissed\": %" PRIu64
		", \"ierrors\": %" PRIu64 ", \"oerrors\": %" PRIu64 ", \"rx_nombuf\": %" PRIu64 "},\n",
		st.ipackets, st.opackets, st.imissed, st.ierrors, st.oerrors, st.rx_nombuf);
}

/* Whether the load lcores ran at their real-time priority, and how often a slice ran out. */
static void json_realtime(FILE *f, const struct rc_config *cfg)
{
	unsigned granted = 0;
	uint64_t rests = 0;
	int error = 0;
	for (unsigned i = 0; i < rc.nlcores; i++) {
		granted += rc.lc[i]->rt.error == 0;
		rests += rc.lc[i]->rt.rests;
		if (rc.lc[i]->rt.error)
			error = rc.lc[i]->rt.error;
	}
	fprintf(f, "  \"realtime\": {\"priority\": %d, \"lcores\": %u, \"rests\": %" PRIu64 ", \"error\": ",
		cfg->realtime, cfg->realtime ? granted : 0, rests);
	if (error)
		fprintf(f, "\"%s\"},\n", strerror(error));
	else
		fprintf(f, "null},\n");
}

static double offered_rps(const struct rc_config *cfg)
{
	double a = cfg->warmup_s, b = cfg->warmup_s + cfg->duration_s, n = 0;
	for (unsigned s = 0; s < cfg->nseg; s++) {
		double lo = fmax(a, cfg->seg[s].t_s);
		double hi = fmin(b, s + 1 < cfg->nseg ? cfg->seg[s + 1].t_s : INFINITY);
		if (hi > lo)
			n += (hi - lo) * cfg->seg[s].rps;
	}
	return n / cfg->duration_s;
}

static FILE *open_tmp(const char *dir, const char *name, char *tmp, char *final, size_t len)
{
	snprintf(final, len, "%s/%s", dir, name);
	snprintf(tmp, len, "%s/.%s.tmp", dir, name);
	FILE *f = fopen(tmp, "w");
	if (f == NULL)
		fprintf(stderr, "rain-client: cannot write %s: %s\n", tmp, strerror(errno));
	return f;
}

static int close_rename(FILE *f, const char *tmp, const char *final)
{
	if (fflush(f) != 0 || ferror(f) || fclose(f) != 0 || rename(tmp, final) != 0) {
		fprintf(stderr, "rain-client: cannot write %s: %s\n", final, strerror(errno));
		return -1;
	}
	return 0;
}

static int write_hlog(const struct rc_config *cfg, const char *name, const char *comment, double start_s,
		      double ratio, struct hdr_hist *merged)
{
	char tmp[4096], final[4096];
	const char *tags[RC_MAX_CLASSES];
	unsigned nint = rc.nint;
	struct hdr_hist **hp = calloc((size_t)cfg->ncls * nint, sizeof(*hp));
	if (hp == NULL)
		return -1;
	for (unsigned c = 0; c < cfg->ncls; c++) {
		tags[c] = cfg->cls[c].name;
		for (unsigned k = 0; k < nint; k++)
			hp[c * nint + k] = &merged[c * nint + k];
	}
	int ret = -1;
	FILE *f = open_tmp(cfg->out_dir, name, tmp, final, sizeof(tmp));
	if (f != NULL) {
		double last = cfg->duration_s - (double)(nint - 1);
		if (hdr_log_write(f, comment, start_s, ratio, cfg->ncls, tags, nint, 1.0, last, hp) == 0)
			ret = close_rename(f, tmp, final);
		else
			fclose(f);
	}
	free(hp);
	return ret;
}

static int write_trace(const struct rc_config *cfg)
{
	FILE *f = fopen(cfg->trace, "w");
	if (f == NULL) {
		fprintf(stderr, "rain-client: cannot write %s: %s\n", cfg->trace, strerror(errno));
		return -1;
	}
	double ns = 1e9 / (double)rc.hz;
	fprintf(f, "lcore,client_id,request_id,class,intended_ns,sent_ns,service_ns,latency_ns,large\n");
	for (unsigned i = 0; i < rc.nlcores; i++) {
		const struct rc_lcore *lc = rc.lc[i];
		for (uint32_t j = 0; j < lc->ntrace; j++) {
			const struct rc_trace *t = &lc->trace[j];
			fprintf(f, "%u,%u,%u,%s,%.0f,%.0f,%" PRIu64 ",%" PRId64 ",%u\n", i, lc->client_id,
				t->id, cfg->cls[t->cls].name, (double)(t->intended - rc.t0) * ns,
				(double)(t->sent - rc.t0) * ns, t->service_ns, t->latency_ns, t->large);
		}
	}
	return fclose(f) == 0 ? 0 : -1;
}

int rc_write_results(const struct rc_config *cfg, bool partial, uint64_t start_unix_ns, uint64_t window_unix_ns,
		     double elapsed_s)
{
	unsigned ncls = cfg->ncls, nint = rc.nint;
	struct rc_counters cls[RC_MAX_CLASSES], tot;
	struct rc_run run;
	int ret = 0;

	memset(cls, 0, sizeof(cls));
	memset(&tot, 0, sizeof(tot));
	memset(&run, 0, sizeof(run));
	for (unsigned i = 0; i < rc.nlcores; i++) {
		const struct rc_lcore *lc = rc.lc[i];
		for (unsigned c = 0; c < ncls; c++)
			add_counters(&cls[c], &lc->cnt[c]);
		run.tx_frames += lc->run.tx_frames;
		run.rx_frames += lc->run.rx_frames;
		run.tx_retries += lc->run.tx_retries;
		run.mbuf_failed += lc->run.mbuf_failed;
		run.handoff_out += lc->run.handoff_out;
		run.handoff_full += lc->run.handoff_full;
		run.unknown_reply += lc->run.unknown_reply;
		run.dup_reply += lc->run.dup_reply;
		run.warmup_late_reply += lc->run.warmup_late_reply;
		run.other_point += lc->run.other_point;
		run.kv_no_result += lc->run.kv_no_result;
		run.foreign += lc->run.foreign;
		run.unexpected_kind += lc->run.unexpected_kind;
		run.fetches += lc->run.fetches;
		run.fetch_unknown += lc->run.fetch_unknown;
		run.fetch_dropped += lc->run.fetch_dropped;
		run.max_outstanding_seen += lc->run.max_outstanding_seen;
		for (int d = 0; d < RAIN_DROP_MAX; d++)
			run.drops[d] += lc->run.drops[d];
	}
	for (unsigned c = 0; c < ncls; c++)
		add_counters(&tot, &cls[c]);

	/* Merge the histograms: per class and interval, and per class for the window. */
	struct hdr_hist *lat = NULL, *sd = NULL, lat_all[RC_MAX_CLASSES], sd_all[RC_MAX_CLASSES];
	bool hists = !cfg->tx_only;
	if (hists) {
		lat = calloc((size_t)ncls * nint, sizeof(*lat));
		sd = calloc((size_t)ncls * nint, sizeof(*sd));
		if (lat == NULL || sd == NULL)
			return -1;
		for (unsigned c = 0; c < ncls; c++) {
			if (hdr_init(&lat_all[c]) || hdr_init(&sd_all[c]))
				return -1;
			for (unsigned k = 0; k < nint; k++) {
				struct hdr_hist *l = &lat[c * nint + k], *s = &sd[c * nint + k];
				if (hdr_init(l) || hdr_init(s))
					return -1;
				for (unsigned i = 0; i < rc.nlcores; i++) {
					hdr_add(l, &rc.lc[i]->lat[c][k]);
					hdr_add(s, &rc.lc[i]->sd[c][k]);
				}
				hdr_add(&lat_all[c], l);
				hdr_add(&sd_all[c], s);
			}
		}
	}

	if (cfg->trace != NULL)
		ret |= write_trace(cfg);
	uint64_t trace_dropped = 0;
	for (unsigned i = 0; i < rc.nlcores; i++)
		trace_dropped += rc.lc[i]->trace_dropped;

	double window_s = (double)window_unix_ns / 1e9;
	if (cfg->out_dir != NULL && hists) {
		ret |= write_hlog(cfg, "latency.hlog", "rain-client latency in ns, from each request's intended send time to "
			"its reply; one interval per second of the measurement window holding the requests scheduled "
			"in it; Interval_Max in ms", window_s, 1e6, lat);
		ret |= write_hlog(cfg, "slowdown.hlog", "rain-client slowdown x1000 (latency / service time); intervals "
			"as in latency.hlog; Interval_Max is the slowdown itself", window_s, 1e3, sd);
	}

	char tmp[4096], final[4096];
	FILE *f = stdout;
	if (cfg->out_dir != NULL && (f = open_tmp(cfg->out_dir, "summary.json", tmp, final, sizeof(tmp))) == NULL)
		return -1;
	double dur = cfg->duration_s, off = offered_rps(cfg);
	double achieved = (double)tot.sent_in_window / dur;
	struct rte_eth_dev_info info;
	const char *driver = rte_eth_dev_info_get(cfg->port_id, &info) == 0 ? info.driver_name : "?";
	char sip[INET_ADDRSTRLEN], dip[INET_ADDRSTRLEN], dmac[RTE_ETHER_ADDR_FMT_SIZE];
	inet_ntop(AF_INET, &cfg->src.ip, sip, sizeof(sip));
	inet_ntop(AF_INET, &cfg->dst.ip, dip, sizeof(dip));
	rte_ether_format_addr(dmac, sizeof(dmac), &cfg->dst.mac);

	fprintf(f, "{\n  \"tool\": \"rain-client\", \"format\": 1, \"partial\": %s,\n", partial ? "true" : "false");
	fprintf(f, "  \"client_host\": %u, \"lcores\": %u, \"driver\": \"%s\", \"src_ip\": \"%s\", "
		"\"dst_ip\": \"%s\", \"dst_mac\": \"%s\",\n", cfg->client_host, rc.nlcores, driver, sip, dip, dmac);
	fprintf(f, "  \"arrival\": \"%s\", \"schedule\": [", cfg->arrival->name);
	for (unsigned s = 0; s < cfg->nseg; s++) {
		fprintf(f, "%s[%.6f, %.6f, [", s ? ", " : "", cfg->seg[s].t_s, cfg->seg[s].rps);
		for (unsigned c = 0, first = 1; c < cfg->ncls; c++)
			if (cfg->seg[s].cls_mask >> c & 1) {
				fprintf(f, "%s\"%s\"", first ? "" : ", ", cfg->cls[c].name);
				first = 0;
			}
		fprintf(f, "]]");
	}
	fprintf(f, "],\n  \"dilation\": %.6g, \"warmup_s\": %.6f, \"duration_s\": %.6f, \"timeout_us\": %llu, "
		"\"resubmit\": %s, \"max_outstanding\": %u, \"large_fraction\": %.6f, \"large_bytes\": %u, "
		"\"seed\": %llu, \"tx_only\": %s, \"epoch\": %u,\n",
		cfg->dilation, cfg->warmup_s, cfg->duration_s, (unsigned long long)cfg->timeout_us,
		cfg->resubmit ? "true" : "false", cfg->max_outstanding, cfg->large_fraction, cfg->large_bytes,
		(unsigned long long)cfg->seed, cfg->tx_only ? "true" : "false", cfg->epoch);
	fprintf(f, "  \"start_unix_ns\": %llu, \"window_start_unix_ns\": %llu, \"elapsed_s\": %.6f, "
		"\"tsc_hz\": %llu, \"intervals\": %u,\n",
		(unsigned long long)start_unix_ns, (unsigned long long)window_unix_ns, elapsed_s,
		(unsigned long long)rc.hz, nint);
	fprintf(f, "  \"offered_rps\": %.3f, \"achieved_rps\": %.3f, \"schedule_error\": %.6f, "
		"\"late_threshold_ns\": [", off, achieved, off > 0 ? fabs(achieved - off) / off : 0.0);
	for (unsigned s = 0; s < cfg->nseg; s++)
		fprintf(f, "%s%.0f", s ? ", " : "",
			(double)rc.lc[0]->late_thresh[s] * 1e9 / (double)rc.hz);
	fprintf(f, "],\n  \"totals\": {");
	json_counters(f, &tot, dur);
	fprintf(f, "},\n  \"classes\": {\n");
	for (unsigned c = 0; c < ncls; c++) {
		const struct rc_class *k = &cfg->cls[c];
		fprintf(f, "    \"%s\": {\"task_type\": %u, \"weight\": %.6g, \"payload\": %u, \"service\": ", k->name,
			k->task_type, k->weight, k->payload);
		json_service(f, &k->svc);
		fprintf(f, ", \"mean_service_ns_expected\": %.1f,\n      ", k->svc.ops->mean(&k->svc));
		json_counters(f, &cls[c], dur);
		if (hists) {
			fprintf(f, ",\n      ");
			json_hist(f, "latency_ns", &lat_all[c], 1.0);
			fprintf(f, ",\n      ");
			json_hist(f, "slowdown", &sd_all[c], 1000.0);
		}
		fprintf(f, "}%s\n", c + 1 < ncls ? "," : "");
	}
	fprintf(f, "  },\n  \"run\": {\"tx_frames\": %llu, \"rx_frames\": %llu, \"tx_retries\": %llu, "
		"\"mbuf_failed\": %llu, \"handoff\": %llu, \"handoff_full\": %llu, \"unknown_reply\": %llu, "
		"\"foreign\": %llu, \"unexpected_kind\": %llu, \"fetches\": %llu, \"fetch_unknown\": %llu, "
		"\"fetch_dropped\": %llu, \"max_outstanding_seen\": %llu, \"trace_dropped\": %llu, \"kv_no_result\": %llu, "
		"\"other_point\": %llu, \"dup_reply\": %llu, \"warmup_late_reply\": %llu},\n",
		(unsigned long long)run.tx_frames, (unsigned long long)run.rx_frames,
		(unsigned long long)run.tx_retries, (unsigned long long)run.mbuf_failed,
		(unsigned long long)run.handoff_out, (unsigned long long)run.handoff_full,
		(unsigned long long)run.unknown_reply, (unsigned long long)run.foreign,
		(unsigned long long)run.unexpected_kind, (unsigned long long)run.fetches,
		(unsigned long long)run.fetch_unknown, (unsigned long long)run.fetch_dropped,
		(unsigned long long)run.max_outstanding_seen,
		(unsigned long long)trace_dropped, (unsigned long long)run.kv_no_result,
		(unsigned long long)run.other_point, (unsigned long long)run.dup_reply,
		(unsigned long long)run.warmup_late_reply);
	json_port(f, cfg->port_id);
	json_realtime(f, cfg);
	fprintf(f, "  \"drops\": {");
	for (int d = 1; d < RAIN_DROP_MAX; d++)
		fprintf(f, "%s\"%s\": %llu", d > 1 ? ", " : "", rain_drop_names[d], (unsigned long long)run.drops[d]);
	fprintf(f, "},\n  \"per_lcore\": [");
	for (unsigned i = 0; i < rc.nlcores; i++) {
		const struct rc_lcore *lc = rc.lc[i];
		struct rc_counters t;
		memset(&t, 0, sizeof(t));
		for (unsigned c = 0; c < ncls; c++)
			add_counters(&t, &lc->cnt[c]);
		fprintf(f, "%s{\"lcore\": %u, \"client_id\": %u, \"offered\": %llu, \"sent\": %llu, \"sent_in_window\": %llu, "
			"\"received\": %llu, \"late_sends\": %llu, \"max_lag_ns\": %llu, \"tx_frames\": %llu}",
			i ? ", " : "", lc->lcore_id, lc->client_id, (unsigned long long)t.offered,
			(unsigned long long)t.sent, (unsigned long long)t.sent_in_window, (unsigned long long)t.received,
			(unsigned long long)t.late_sends, (unsigned long long)((double)t.max_lag_tsc * 1e9 / (double)rc.hz),
			(unsigned long long)lc->run.tx_frames);
	}
	fprintf(f, "]\n}\n");
	if (f != stdout)
		ret |= close_rename(f, tmp, final);
	else
		fflush(f);

	if (hists) {
		for (unsigned c = 0; c < ncls; c++) {
			hdr_free(&lat_all[c]);
			hdr_free(&sd_all[c]);
			for (unsigned k = 0; k < nint; k++) {
				hdr_free(&lat[c * nint + k]);
				hdr_free(&sd[c * nint + k]);
			}
		}
		free(lat);
		free(sd);
	}
	return ret;
}
