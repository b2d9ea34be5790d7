/* SPDX-License-Identifier: Apache-2.0
 *
 * RDMA through the NIC (--rdma ibverbs, hardware): the ConnectX applies the switch's
 * RoCEv2 WRITE ONLY packets to the ring (rdma.c) itself, so rx = NULL and the frames
 * never reach DPDK (mlx5 is bifurcated: RoCE stays with the kernel's RDMA stack).
 *
 * Set-up, in the order of the man pages (ibv_get_device_list, ibv_open_device,
 * ibv_query_port, ibv_query_gid_ex, ibv_alloc_pd, ibv_reg_mr, ibv_create_cq,
 * ibv_create_qp, ibv_modify_qp):
 *   device  --rdma-dev, else the one on the DPDK port's PCI function (sysfs);
 *   GID     --gid-index, else the RoCE v2 entry whose address is ::ffff:<--src-ip>;
 *   one PD, one MR over the whole ring (LOCAL_WRITE | REMOTE_WRITE), one CQ (never
 *   gets a completion: a WRITE without immediate consumes no receive WQE), and one
 *   QP per thread taken RESET -> INIT -> RTR. A responder needs RTR only: RTS is for
 *   sending, and these QPs never send (RC ACKs are the responder's own doing).
 *
 * UC is the default (--qp-type): the switch has no ACK path (docs/tofino.md, RoCEv2), and
 * a UC responder that sees a PSN gap simply accepts the next WRITE ONLY. RC costs: the
 * NIC ACKs every WRITE (to --remote-qpn at the switch's IP; the switch must drop the
 * ACKs), and on a PSN gap it NAKs and discards every later WRITE until the missing
 * PSN arrives, which the switch never resends: the QP stays deaf until it is re-
 * registered. The emulated variant's resynchronisation does not exist in hardware.
 *
 * The peer: a connected QP names a remote QPN and GID, but the switch has no QP and
 * no RDMA stack. dest_qp_num is --remote-qpn, a number nobody owns (0 and 1 are the
 * special QPs, 0xFFFFFF the multicast QPN: refused); the dgid is ::ffff:<--switch-ip>.
 * The kernel resolves the dgid's MAC when a QP goes to RTR (ib_resolve_eth_dmac,
 * through the neighbour table), and the switch answers no ARP: the host needs a
 * permanent neighbour entry for the switch's IP (the roce role adds it).
 */
#ifdef RAIN_HAVE_IBVERBS

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_ethdev.h>

#include "rdma_sysfs.h"
#include "worker.h"

#define SYSFS "/sys"
#define RW_CQ_ENTRIES 16 /* nothing completes on it; providers want some */
#define RW_MIN_RNR_TIMER 12 /* 0.64 ms: RC only; nothing is ever posted to receive */
#define RW_HOP_LIMIT 64

struct verbs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp[RW_MAX_THREADS];
	union ibv_gid dgid;    /* ::ffff:<switch ip> */
	enum ibv_mtu mtu;
	char netdev[96];       /* for messages */
};

static enum ibv_mtu mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	default: return IBV_MTU_4096;
	}
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return 128u << m; /* IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
}

/* ::ffff:a.b.c.d, the GID of an IPv4 address (RoCE v2). */
static void gid_of_ipv4(union ibv_gid *g, rte_be32_t ip)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(&g->raw[12], &ip, 4);
}

static void gid_str(const union ibv_gid *g, char *buf, size_t n)
{
	if (inet_ntop(AF_INET6, g->raw, buf, (socklen_t)n) == NULL)
		snprintf(buf, n, "?");
}

static void ip_str(rte_be32_t ip, char *buf, size_t n)
{
	struct in_addr a = { .s_addr = ip };
	inet_ntop(AF_INET, &a, buf, (socklen_t)n);
}

static const char *gid_type_name(enum ibv_gid_type t)
{
	switch (t) {
	case IBV_GID_TYPE_IB: return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
	}
	return "?";
}

/* The PCI address of the DPDK port, or rte_exit: a vdev has no RDMA device. */
static void port_pci(const struct rw_ctx *w, char *pci, size_t n)
{
	struct rte_eth_dev_info info;
	uint16_t port = w->c.port_id;

	if (rte_eth_dev_info_get(port, &info) != 0 || info.device == NULL)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: port %u: no device information\n", port);
	const struct rte_bus *bus = rte_dev_bus(info.device);
	const char *bus_name = bus ? rte_bus_name(bus) : "none";
	if (strcmp(bus_name, "pci") != 0)
		rte_exit(EXIT_FAILURE,
			 "--rdma ibverbs: port %u (%s) is not a PCI device (bus %s), so no RDMA device belongs to it; "
			 "fix: run on the ConnectX's PCI port (EAL -a 0000:3b:00.0), give --rdma-dev, or use --rdma emulated\n",
			 port, rte_dev_name(info.device), bus_name);
	snprintf(pci, n, "%s", rte_dev_name(info.device));
}

static struct ibv_context *open_device(struct rw_ctx *w, struct verbs *v)
{
	char pci[64] = "";
	if (w->c.rdma_dev == NULL)
		port_pci(w, pci, sizeof(pci));

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list == NULL)
		rte_exit(EXIT_FAILURE,
			 "--rdma ibverbs: ibv_get_device_list: %s: this host has no RDMA stack; fix: install rdma-core and "
			 "ibverbs-providers and load ib_uverbs and mlx5_ib, or use --rdma emulated\n", strerror(errno));
	if (n == 0) {
		ibv_free_device_list(list);
		rte_exit(EXIT_FAILURE,
			 "--rdma ibverbs: this host has no RDMA device (ibv_get_device_list found none; `rdma link` lists "
			 "them); fix: a ConnectX with mlx5_ib loaded and ibverbs-providers installed, or use --rdma emulated\n");
	}
	const char *names[64];
	char found[512] = "";
	int m = RTE_MIN(n, (int)RTE_DIM(names));
	for (int i = 0; i < m; i++) {
		names[i] = ibv_get_device_name(list[i]);
		size_t len = strlen(found);
		snprintf(found + len, sizeof(found) - len, "%s%s", i ? ", " : "", names[i]);
	}
	int pick = -1;
	if (w->c.rdma_dev != NULL) {
		for (int i = 0; i < m; i++)
			if (strcmp(names[i], w->c.rdma_dev) == 0)
				pick = i;
		if (pick < 0) {
			ibv_free_device_list(list);
			rte_exit(EXIT_FAILURE, "--rdma-dev %s: no such RDMA device (this host has: %s)\n", w->c.rdma_dev,
				 found);
		}
	} else {
		pick = rw_sysfs_match_pci(SYSFS, names, m, pci);
		if (pick < 0) {
			ibv_free_device_list(list);
			rte_exit(EXIT_FAILURE,
				 "--rdma ibverbs: no RDMA device is on port %u's PCI function %s (this host has: %s); fix: "
				 "load mlx5_ib for it, or give --rdma-dev\n", w->c.port_id, pci, found);
		}
	}
	struct ibv_context *ctx = ibv_open_device(list[pick]);
	int err = errno;
	snprintf(w->ring.device, sizeof(w->ring.device), "%s", names[pick]);
	/* Opened contexts outlive the list (ibv_get_device_list(3)). */
	ibv_free_device_list(list);
	if (ctx == NULL)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_open_device(%s): %s\n", w->ring.device, strerror(err));
	if (rw_sysfs_netdev(SYSFS, w->ring.device, v->netdev, sizeof(v->netdev)) != 0)
		snprintf(v->netdev, sizeof(v->netdev), "<netdev of %s>", w->ring.device);
	return ctx;
}

/* The port must be an active Ethernet port whose RDMA MTU carries --rdma-mtu. */
static void check_port(struct rw_ctx *w, struct verbs *v, struct ibv_port_attr *pa)
{
	const char *dev = w->ring.device;
	uint8_t port = w->c.rdma_port;

	int rc = ibv_query_port(v->ctx, port, pa);
	if (rc != 0)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_query_port(%s, %u): %s; fix: give the device's port with "
			 "--rdma-port (a ConnectX function has port 1)\n", dev, port, strerror(rc));
	if (pa->link_layer != IBV_LINK_LAYER_ETHERNET)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: port %u of %s is InfiniBand, not Ethernet; fix: RoCEv2 needs the "
			 "port in Ethernet mode (mlxconfig set LINK_TYPE_P%u=2, then reboot)\n", port, dev, port);
	if (pa->state != IBV_PORT_ACTIVE)
		fprintf(stderr, "rain-worker: warning: port %u of %s is %s, not active: no WRITE arrives until its link "
			"(%s) is up\n", port, dev, ibv_port_state_str(pa->state), v->netdev);
	if (v->mtu > pa->active_mtu)
		rte_exit(EXIT_FAILURE, "--rdma-mtu %u: port %u of %s carries RDMA MTU %u at most (the MTU of %s less 96 "
			 "bytes of RoCE headers); fix: set the MTU of %s to at least %u (the roce role does), or lower "
			 "roce.mtu\n", w->c.rdma_mtu, port, dev, mtu_bytes(pa->active_mtu), v->netdev, v->netdev,
			 w->c.rdma_mtu + 96);
}

static int find_gid(struct rw_ctx *w, struct verbs *v, const struct ibv_port_attr *pa)
{
	const char *dev = w->ring.device;
	uint8_t port = w->c.rdma_port;
	union ibv_gid want;
	char ip[INET_ADDRSTRLEN], g[INET6_ADDRSTRLEN];
	struct ibv_gid_entry e;

	gid_of_ipv4(&want, w->c.src_ip);
	ip_str(w->c.src_ip, ip, sizeof(ip));
	if (w->c.gid_index >= 0) {
		int i = w->c.gid_index;
		int rc = i < pa->gid_tbl_len ? ibv_query_gid_ex(v->ctx, port, (uint32_t)i, &e, 0) : EINVAL;
		if (rc != 0)
			rte_exit(EXIT_FAILURE, "--gid-index %d: %s port %u has no such GID (%s; table of %d); fix: leave "
				 "--gid-index out to find the RoCE v2 GID of %s\n", i, dev, port, strerror(rc),
				 pa->gid_tbl_len, ip);
		gid_str(&e.gid, g, sizeof(g));
		if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || memcmp(e.gid.raw, want.raw, sizeof(want.raw)) != 0)
			rte_exit(EXIT_FAILURE, "--gid-index %d: GID %d of %s port %u is %s %s, but the switch writes "
				 "RoCE v2 to ::ffff:%s (--src-ip); fix: give the index `show_gids` lists for %s (v2), or leave "
				 "--gid-index out\n", i, i, dev, port, gid_type_name(e.gid_type), g, ip, ip);
		return i;
	}
	char have[512] = "";
	for (int i = 0; i < pa->gid_tbl_len; i++) {
		if (ibv_query_gid_ex(v->ctx, port, (uint32_t)i, &e, 0) != 0)
			continue; /* ENODATA: an empty entry */
		if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (memcmp(e.gid.raw, want.raw, sizeof(want.raw)) == 0)
			return i;
		size_t len = strlen(have);
		gid_str(&e.gid, g, sizeof(g));
		snprintf(have + len, sizeof(have) - len, "%s%d %s", len ? ", " : "", i, g);
	}
	rte_exit(EXIT_FAILURE, "--rdma ibverbs: %s port %u has no RoCE v2 GID for %s (::ffff:%s; its RoCE v2 GIDs: %s); "
		 "fix: assign %s to %s (the roce role does this), or give --gid-index\n", dev, port, ip, ip,
		 have[0] ? have : "none", ip, v->netdev);
}

static int qp_to_init(const struct rw_ctx *w, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = w->c.rdma_port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE; /* the switch only writes */
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int qp_to_rtr(const struct rw_ctx *w, const struct verbs *v, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = v->mtu;
	a.dest_qp_num = w->c.remote_qpn;
	a.rq_psn = w->ring.psn;
	a.ah_attr.is_global = 1; /* RoCE: every packet has a GRH (the IP header) */
	a.ah_attr.grh.dgid = v->dgid;
	a.ah_attr.grh.sgid_index = (uint8_t)w->ring.gid_index;
	a.ah_attr.grh.hop_limit = RW_HOP_LIMIT;
	a.ah_attr.grh.traffic_class = (uint8_t)(w->c.dscp << 2); /* DSCP, ECN bits left to the NIC */
	a.ah_attr.sl = 0;        /* ignored on RoCE: the NIC trusts DSCP */
	a.ah_attr.port_num = w->c.rdma_port;
	if (w->c.qp_type == RW_QP_RC) {
		a.max_dest_rd_atomic = 0; /* no READs or atomics are accepted */
		a.min_rnr_timer = RW_MIN_RNR_TIMER;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static void rtr_failed(const struct rw_ctx *w, const struct verbs *v, uint32_t i, int rc)
{
	char sip[INET_ADDRSTRLEN];
	char smac[RTE_ETHER_ADDR_FMT_SIZE];
	const uint8_t *b = w->c.switch_mac.addr_bytes;

	ip_str(w->c.switch_ip, sip, sizeof(sip));
	snprintf(smac, sizeof(smac), "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
	rte_exit(EXIT_FAILURE, "--rdma ibverbs: QP %u of %s to RTR: %s; the kernel resolves the switch's MAC from %s "
		 "(ib_resolve_eth_dmac) and the switch answers no ARP; fix: `ip neigh replace %s lladdr %s dev %s nud "
		 "permanent` (the roce role does this)\n", i, w->ring.device, strerror(rc), sip, sip, smac, v->netdev);
}

static int verbs_init(struct rw_ctx *w)
{
	struct rw_ring *r = &w->ring;
	struct verbs *v = calloc(1, sizeof(*v));
	if (v == NULL)
		rte_exit(EXIT_FAILURE, "out of memory\n");
	w->rdma_priv = v;
	v->mtu = mtu_enum(w->c.rdma_mtu);
	gid_of_ipv4(&v->dgid, w->c.switch_ip);

	v->ctx = open_device(w, v);
	struct ibv_port_attr pa;
	check_port(w, v, &pa);
	r->port = w->c.rdma_port;
	r->gid_index = find_gid(w, v, &pa);
	union ibv_gid sgid;
	gid_of_ipv4(&sgid, w->c.src_ip);
	gid_str(&sgid, r->gid, sizeof(r->gid));
	r->mtu = w->c.rdma_mtu;
	/* The switch's WRITEs carry a zero iCRC: a NIC that checks it drops them all, and
	 * only this counter says so. Its growth goes into the statistics. */
	r->nic_icrc_counter = rw_sysfs_hw_counter(SYSFS, r->device, r->port, RW_NIC_ICRC_COUNTER, &r->nic_icrc_base) == 0;
	if (w->c.icrc_check)
		fprintf(stderr, "rain-worker: warning: --icrc-check: %s checks the RoCEv2 iCRC, and the switch sends its "
			"WRITEs with a zero one: every pre-written task will be dropped (%s); fix: turn the check off "
			"(roce.icrc_disable_command)\n", r->device,
			r->nic_icrc_counter ? "counted as nic_icrc_drops" : "this NIC exposes no count of them");

	if (rw_ring_map(w) != 0)
		rte_exit(EXIT_FAILURE, "RDMA ring (%u x %u x %u B): mmap: %s\n", w->c.threads, w->c.ring_slots,
			 w->c.slot_size, strerror(errno));
	if ((v->pd = ibv_alloc_pd(v->ctx)) == NULL)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_alloc_pd(%s): %s\n", r->device, strerror(errno));
	v->mr = ibv_reg_mr(v->pd, r->base, r->size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (v->mr == NULL) {
		int e = errno;
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_reg_mr(%s, %" PRIu64 " B): %s%s\n", r->device, r->size,
			 strerror(e), e == ENOMEM || e == EPERM || e == EAGAIN ?
			 "; fix: the locked-memory limit is too low (ulimit -l unlimited, or LimitMEMLOCK=infinity)" : "");
	}
	r->rkey = v->mr->rkey;
	if ((v->cq = ibv_create_cq(v->ctx, RW_CQ_ENTRIES, NULL, NULL, 0)) == NULL)
		rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_create_cq(%s): %s\n", r->device, strerror(errno));
	for (uint32_t i = 0; i < w->c.threads; i++) {
		struct ibv_qp_init_attr ia;
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = v->cq;
		ia.recv_cq = v->cq;
		ia.qp_type = w->c.qp_type == RW_QP_RC ? IBV_QPT_RC : IBV_QPT_UC;
		ia.cap.max_send_wr = 1; /* nothing is posted; providers refuse zero-sized queues */
		ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		if ((v->qp[i] = ibv_create_qp(v->pd, &ia)) == NULL)
			rte_exit(EXIT_FAILURE, "--rdma ibverbs: ibv_create_qp(%s, %s, thread %u): %s\n", r->device,
				 rw_qp_type_name(w->c.qp_type), i, strerror(errno));
		int rc = qp_to_init(w, v->qp[i]);
		if (rc != 0)
			rte_exit(EXIT_FAILURE, "--rdma ibverbs: QP %u of %s to INIT (port %u): %s\n", v->qp[i]->qp_num,
				 r->device, w->c.rdma_port, strerror(rc));
		if ((rc = qp_to_rtr(w, v, v->qp[i])) != 0)
			rtr_failed(w, v, v->qp[i]->qp_num, rc);
		r->qpn[i] = v->qp[i]->qp_num;
	}
	fprintf(stderr, "rain-worker: ibverbs: %s port %u (%s), GID %d %s, MR rkey %#x over %" PRIu64 " B, %u %s QP(s) "
		"from %#x, MTU %u\n", r->device, r->port, v->netdev, r->gid_index, r->gid, r->rkey, r->size,
		w->c.threads, rw_qp_type_name(w->c.qp_type), r->qpn[0], r->mtu);
	return 0;
}

/* Back to RESET (every PSN and in-flight message forgotten), then INIT and RTR with
 * the initial PSN, as the controller resets the switch's PSN. */
static int verbs_reset_qp(struct rw_ctx *w, uint32_t i)
{
	struct verbs *v = w->rdma_priv;
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	int rc = ibv_modify_qp(v->qp[i], &a, IBV_QP_STATE);
	if (rc == 0)
		rc = qp_to_init(w, v->qp[i]);
	if (rc == 0)
		rc = qp_to_rtr(w, v, v->qp[i]);
	if (rc != 0) {
		fprintf(stderr, "rain-worker: QP %u of %s (thread %u) did not come back to RTR: %s; the thread issues no "
			"tokens until the next re-registration\n", v->qp[i]->qp_num, w->ring.device, i, strerror(rc));
		return -1;
	}
	return 0;
}

/* Reverse order of creation: QPs hold the CQ and the PD, the MR holds the PD. */
static void verbs_fini(struct rw_ctx *w)
{
	struct verbs *v = w->rdma_priv;
	int rc;

	if (v == NULL)
		return;
	for (uint32_t i = 0; i < w->c.threads; i++)
		if (v->qp[i] && (rc = ibv_destroy_qp(v->qp[i])) != 0)
			fprintf(stderr, "rain-worker: ibv_destroy_qp: %s\n", strerror(rc));
	if (v->cq && (rc = ibv_destroy_cq(v->cq)) != 0)
		fprintf(stderr, "rain-worker: ibv_destroy_cq: %s\n", strerror(rc));
	if (v->mr && (rc = ibv_dereg_mr(v->mr)) != 0)
		fprintf(stderr, "rain-worker: ibv_dereg_mr: %s\n", strerror(rc));
	if (v->pd && (rc = ibv_dealloc_pd(v->pd)) != 0)
		fprintf(stderr, "rain-worker: ibv_dealloc_pd: %s\n", strerror(rc));
	if (v->ctx && ibv_close_device(v->ctx) != 0)
		fprintf(stderr, "rain-worker: ibv_close_device: %s\n", strerror(errno));
	free(v);
	w->rdma_priv = NULL;
	rw_ring_unmap(w); /* after the MR is gone: the NIC no longer writes it */
}

const struct rw_rdma_ops rw_rdma_ibverbs = {
	.name = "ibverbs", .init = verbs_init, .rx = NULL, .reset_qp = verbs_reset_qp, .fini = verbs_fini,
};

#endif /* RAIN_HAVE_IBVERBS */
