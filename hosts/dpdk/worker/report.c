/* SPDX-License-Identifier: Apache-2.0
 *
 * Files for the agent: the registration (what the controller needs to program the
 * switch for this server: addresses, worker ids, RDMA ring, QPs) and the statistics.
 * Both are written to PATH.tmp and renamed, so a reader never sees half a file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "rdma_sysfs.h"
#include "worker.h"

static FILE *open_tmp(const char *path, char *tmp, size_t n)
{
	snprintf(tmp, n, "%s.tmp", path);
	return fopen(tmp, "w");
}

static int close_rename(FILE *f, const char *tmp, const char *path)
{
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		unlink(tmp);
		return -1;
	}
	return rename(tmp, path);
}

static void ip_str(rte_be32_t ip, char *buf, size_t n)
{
	struct in_addr a = { .s_addr = ip };
	inet_ntop(AF_INET, &a, buf, (socklen_t)n);
}

static void mac_str(const struct rte_ether_addr *a, char *buf, size_t n)
{
	const uint8_t *b = a->addr_bytes;
	snprintf(buf, n, "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

int rw_write_registration(const struct rw_ctx *w)
{
	char tmp[4096], mac[RTE_ETHER_ADDR_FMT_SIZE], smac[RTE_ETHER_ADDR_FMT_SIZE], ip[INET_ADDRSTRLEN], sip[INET_ADDRSTRLEN];
	const struct rw_ring *r = &w->ring;
	FILE *f = open_tmp(w->c.reg_path, tmp, sizeof(tmp));

	if (f == NULL)
		return -1;
	mac_str(&w->self.mac, mac, sizeof(mac));
	mac_str(&w->sw.mac, smac, sizeof(smac));
	ip_str(w->self.ip, ip, sizeof(ip));
	ip_str(w->sw.ip, sip, sizeof(sip));
	fprintf(f, "{\n  \"program\": \"rain-worker\",\n  \"pid\": %d,\n", (int)getpid());
	fprintf(f, "  \"mode\": \"%s\",\n  \"handler\": \"%s\",\n", w->c.mode->name, w->c.handler->name);
	fprintf(f, "  \"worker_base\": %u,\n  \"threads\": %u,\n  \"worker_ids\": [", w->c.worker_base, w->c.threads);
	for (uint32_t i = 0; i < w->c.threads; i++)
		fprintf(f, "%s%u", i ? ", " : "", w->c.worker_base + i);
	fprintf(f, "],\n  \"mac\": \"%s\",\n  \"ip\": \"%s\",\n  \"udp_port\": %u,\n", mac, ip, RAIN_UDP_PORT);
	fprintf(f, "  \"switch\": {\"mac\": \"%s\", \"ip\": \"%s\"},\n", smac, sip);
	fprintf(f, "  \"quota\": %u,\n  \"quota_cap\": %u,\n  \"slice\": %u,\n  \"enabled\": %s,\n", w->c.quota,
		w->quota_cap, w->c.slice, w->c.start_disabled ? "false" : "true");
	fprintf(f, "  \"ctl\": ");
	if (w->c.ctl_path)
		json_str(f, w->c.ctl_path);
	else
		fprintf(f, "null");
	fprintf(f, ",\n  \"tsc_hz\": %" PRIu64 ",\n", w->tsc_hz);
	fprintf(f, "  \"ring\": {\n    \"transport\": \"%s\",\n    \"qp_type\": \"%s\",\n    \"icrc_check\": %s,\n",
		w->c.rdma->name, rw_qp_type_name(w->c.qp_type), w->c.icrc_check ? "true" : "false");
	if (r->device[0]) { /* ibverbs: where the QPs are */
		fprintf(f, "    \"device\": ");
		json_str(f, r->device);
		fprintf(f, ",\n    \"port\": %u,\n    \"gid_index\": %d,\n    \"gid\": \"%s\",\n    \"mtu\": %u,\n",
			r->port, r->gid_index, r->gid, r->mtu);
	} else {
		fprintf(f, "    \"device\": null,\n    \"port\": null,\n    \"gid_index\": null,\n    \"gid\": null,\n"
			   "    \"mtu\": null,\n");
	}
	fprintf(f, "    \"va\": [");
	for (uint32_t i = 0; i < w->c.threads; i++)
		fprintf(f, "%s%" PRIu64, i ? ", " : "", (uint64_t)(uintptr_t)(r->base + (uint64_t)i * r->region_size));
	fprintf(f, "],\n    \"qpn\": [");
	for (uint32_t i = 0; i < w->c.threads; i++)
		fprintf(f, "%s%u", i ? ", " : "", r->qpn[i]);
	fprintf(f, "],\n    \"size\": %" PRIu64 ",\n    \"region_size\": %" PRIu64 ",\n", r->size, r->region_size);
	fprintf(f, "    \"slot_size\": %u,\n    \"slots\": %u,\n    \"rkey\": %u,\n    \"psn\": %u\n  },\n",
		r->slot_size, r->slots, r->rkey, r->psn);
	fprintf(f, "  \"dispatcher\": %s,\n", w->c.dispatcher ? "true" : "false");
	fprintf(f, "  \"placement\": {\"rx\": \"%s\", \"threads\": [", w->rx_where);
	for (uint32_t i = 0; i < w->c.threads; i++)
		fprintf(f, "%s\"%s\"", i ? ", " : "", w->th[i].where);
	fprintf(f, "]}\n}\n");
	return close_rename(f, tmp, w->c.reg_path);
}

int rw_write_stats(const struct rw_ctx *w, bool final)
{
	char tmp[4096];
	const struct rw_rx_stats *s = &w->rx;
	FILE *f = open_tmp(w->c.stats_path, tmp, sizeof(tmp));

	if (f == NULL)
		return -1;
	double up = (double)(rte_rdtsc() - w->start_tsc) / (double)w->tsc_hz;
	fprintf(f, "{\n  \"program\": \"rain-worker\",\n  \"pid\": %d,\n  \"final\": %s,\n  \"uptime_s\": %.3f,\n",
		(int)getpid(), final ? "true" : "false", up);
	fprintf(f, "  \"mode\": \"%s\",\n  \"handler\": \"%s\",\n  \"tsc_hz\": %" PRIu64 ",\n", w->c.mode->name,
		w->c.handler->name, w->tsc_hz);
	fprintf(f, "  \"rx\": {\"packets\": %" PRIu64 ", \"bursts\": %" PRIu64 ", \"polls\": %" PRIu64
		", \"empty_polls\": %" PRIu64 ", \"busy_ns\": %" PRIu64 ", \"cpu_ns\": %" PRIu64 "},\n",
		RW_LOAD(s->rx_packets), RW_LOAD(s->rx_bursts), RW_LOAD(s->polls), RW_LOAD(s->empty_polls),
		rw_cycles_to_ns(w, RW_LOAD(s->busy_cycles)), RW_LOAD(s->cpu_ns));
	fprintf(f, "  \"tx\": {\"packets\": %" PRIu64 ", \"dropped\": %" PRIu64 "},\n", RW_LOAD(s->tx_packets),
		RW_LOAD(s->tx_dropped));
	fprintf(f, "  \"drops\": {");
	uint64_t total = 0;
	for (int d = 1; d < RAIN_DROP_MAX; d++) {
		uint64_t n = RW_LOAD(s->drops[d]);
		total += n;
		fprintf(f, "%s\"%s\": %" PRIu64, d > 1 ? ", " : "", rain_drop_names[d], n);
	}
	fprintf(f, "},\n  \"drops_total\": %" PRIu64 ",\n", total);
	fprintf(f, "  \"roce\": {\"applied\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"psn_gaps\": %" PRIu64
		", \"psn_skipped\": %" PRIu64 ", \"psn_stale\": %" PRIu64 ", \"icrc_check\": %s, \"icrc_bad\": %" PRIu64
		", \"nic_icrc_drops\": ",
		RW_LOAD(s->roce_applied), RW_LOAD(s->roce_bytes), RW_LOAD(s->roce_psn_gaps),
		RW_LOAD(s->roce_psn_skipped), RW_LOAD(s->drops[RAIN_DROP_ROCE_PSN]), w->c.icrc_check ? "true" : "false",
		RW_LOAD(s->drops[RAIN_DROP_ROCE_ICRC]));
	/* ibverbs: what the ConnectX dropped for a bad iCRC since start (null: not exposed) */
	uint64_t nic_icrc;
	if (w->ring.nic_icrc_counter &&
	    rw_sysfs_hw_counter("/sys", w->ring.device, w->ring.port, RW_NIC_ICRC_COUNTER, &nic_icrc) == 0)
		fprintf(f, "%" PRIu64 "},\n", nic_icrc - w->ring.nic_icrc_base);
	else
		fprintf(f, "null},\n");
	if (w->c.bench_s > 0)
		fprintf(f, "  \"bench\": {\"dispatches\": %" PRIu64 ", \"responses\": %" PRIu64 "},\n",
			RW_LOAD(s->bench_dispatches), RW_LOAD(s->bench_responses));
	if (w->shared_fifo)
		fprintf(f, "  \"dispatcher\": {\"dispatched\": %" PRIu64 ", \"fifo_full\": %" PRIu64 ", \"fifo_len\": %u, "
			"\"held\": %" PRIu64 "},\n",
			__atomic_load_n(&w->disp_dispatched, __ATOMIC_ACQUIRE), RW_LOAD(w->disp_lost),
			rte_ring_count(w->shared_fifo), rw_server_held(w));
	else
		fprintf(f, "  \"dispatcher\": null,\n");
	fprintf(f, "  \"workers\": [\n");
	for (uint32_t i = 0; i < w->c.threads; i++) {
		const struct rw_thread *t = &w->th[i];
		const struct rain_ctl_worker *cw = &w->ctl->workers[i];
		const struct rain_ctl_stats *st = &cw->stats;
		fprintf(f, "    {\"worker_id\": %u, \"where\": \"%s\", \"tasks_done\": %" PRIu64 ", \"tokens_sent\": %" PRIu64
			", \"polls\": %" PRIu64 ", \"empty_polls\": %" PRIu64 ", \"desc_mismatch\": %" PRIu64
			", \"failed\": %" PRIu64 ", \"fifo_len\": %u, \"outstanding\": %u, \"busy_ns\": %" PRIu64
			", \"samples\": %" PRIu64 ", \"dispatched\": %" PRIu64 ", \"fifo_full\": %" PRIu64
			", \"answered\": %" PRIu64 ", \"tokens_forgotten\": %" PRIu64 ", \"qp_resets\": %" PRIu64
			", \"qp_failed\": %u, \"reports_sent\": %" PRIu64
			", \"pulls_sent\": %" PRIu64 ", \"tx_dropped\": %" PRIu64 ", \"wakeups\": %" PRIu64 ", \"loop_busy_ns\": %" PRIu64
			", \"cpu_ns\": %" PRIu64 ", \"fetches\": %" PRIu64 ", \"fetch_replies\": %" PRIu64
			", \"fetch_timeouts\": %" PRIu64 ", \"fetch_stale\": %" PRIu64 ", \"fetch_bad\": %" PRIu64
			", \"fetch_refused\": %" PRIu64 ", \"other_slice\": %" PRIu64 ", \"desc_fetches\": %" PRIu64
			", \"kv_bad\": %" PRIu64 ", \"quota\": %u, \"enabled\": %u, \"registered\": %u, \"slice\": %u}%s\n",
			t->worker_id, t->where, RW_LOAD(st->tasks_done), RW_LOAD(st->tokens_sent), RW_LOAD(st->polls),
			RW_LOAD(st->empty_polls), RW_LOAD(st->desc_mismatch), RW_LOAD(st->failed), RW_LOAD(st->fifo_len),
			RW_LOAD(st->outstanding), RW_LOAD(st->busy_ns),
			__atomic_load_n(&cw->ring.head, __ATOMIC_ACQUIRE), RW_LOAD(t->rx_dispatched), RW_LOAD(t->rx_lost),
			RW_LOAD(t->finished), RW_LOAD(t->tokens_forgotten), RW_LOAD(t->qp_resets), RW_LOAD(t->qp_failed),
			RW_LOAD(t->reports_sent),
			RW_LOAD(t->pulls_sent), RW_LOAD(t->tx_dropped), RW_LOAD(t->wakeups), rw_cycles_to_ns(w, RW_LOAD(t->loop_busy_cycles)),
			RW_LOAD(t->cpu_ns), RW_LOAD(t->fetches_sent), RW_LOAD(t->fetch_replies), RW_LOAD(t->fetch_timeouts),
			RW_LOAD(t->fetch_stale), RW_LOAD(t->fetch_bad), RW_LOAD(t->fetch_refused),
			RW_LOAD(t->rx_other_slice), RW_LOAD(t->desc_fetches), RW_LOAD(t->kv_bad), RW_LOAD(cw->knobs.quota), RW_LOAD(cw->knobs.enabled), RW_LOAD(t->last_enabled), RW_LOAD(cw->knobs.slice),
			i + 1 < w->c.threads ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return close_rename(f, tmp, w->c.stats_path);
}
