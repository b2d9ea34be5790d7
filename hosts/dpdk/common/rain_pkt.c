/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <string.h>

#include "rain_pkt.h"

const char *const rain_drop_names[RAIN_DROP_MAX] = {
	[RAIN_DROP_NONE] = "none",
	[RAIN_DROP_NOT_IPV4] = "not_ipv4",
	[RAIN_DROP_NOT_UDP] = "not_udp",
	[RAIN_DROP_BAD_IP] = "bad_ip",
	[RAIN_DROP_NOT_OURS] = "not_ours",
	[RAIN_DROP_TRUNCATED] = "truncated",
	[RAIN_DROP_BAD_VERSION] = "bad_version",
	[RAIN_DROP_BAD_KIND] = "bad_kind",
	[RAIN_DROP_BAD_WORKER] = "bad_worker",
	[RAIN_DROP_BAD_PAYLOAD] = "bad_payload",
	[RAIN_DROP_ROCE_QPN] = "roce_qpn",
	[RAIN_DROP_ROCE_RKEY] = "roce_rkey",
	[RAIN_DROP_ROCE_BOUNDS] = "roce_bounds",
	[RAIN_DROP_ROCE_PSN] = "roce_psn",
	[RAIN_DROP_ROCE_OPCODE] = "roce_opcode",
	[RAIN_DROP_ROCE_OFFLOADED] = "roce_offloaded",
	[RAIN_DROP_ROCE_ICRC] = "roce_icrc",
	[RAIN_DROP_NO_ROOM] = "no_room",
};

enum rain_drop rain_parse(struct rte_mbuf *m, struct rain_view *v)
{
	uint32_t len = rte_pktmbuf_data_len(m); /* single-segment frames only (MTU-sized pools) */
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);

	memset(v, 0, sizeof(*v));
	if (m->nb_segs != 1 || len < sizeof(struct rte_ether_hdr))
		return RAIN_DROP_TRUNCATED;
	v->eth = (struct rte_ether_hdr *)p;
	if (v->eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4))
		return RAIN_DROP_NOT_IPV4;
	if (len < sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr))
		return RAIN_DROP_TRUNCATED;
	v->ip = (struct rte_ipv4_hdr *)(p + sizeof(struct rte_ether_hdr));
	uint32_t ihl = (v->ip->version_ihl & 0x0f) * 4u;
	if ((v->ip->version_ihl >> 4) != 4 || ihl < sizeof(struct rte_ipv4_hdr))
		return RAIN_DROP_BAD_IP;
	if (v->ip->next_proto_id != IPPROTO_UDP)
		return RAIN_DROP_NOT_UDP;
	if (rte_be_to_cpu_16(v->ip->fragment_offset) & (RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK))
		return RAIN_DROP_BAD_IP;
	uint32_t ip_len = rte_be_to_cpu_16(v->ip->total_length);
	if (ip_len < ihl + sizeof(struct rte_udp_hdr) || sizeof(struct rte_ether_hdr) + ip_len > len)
		return RAIN_DROP_TRUNCATED;
	v->udp = (struct rte_udp_hdr *)((uint8_t *)v->ip + ihl);
	uint32_t udp_len = rte_be_to_cpu_16(v->udp->dgram_len);
	if (udp_len < sizeof(struct rte_udp_hdr) || udp_len > ip_len - ihl)
		return RAIN_DROP_TRUNCATED;
	v->l4_payload = (uint8_t *)(v->udp + 1);
	v->l4_len = udp_len - sizeof(struct rte_udp_hdr);
	uint16_t dport = rte_be_to_cpu_16(v->udp->dst_port);
	if (dport == ROCE_UDP_PORT)
		return RAIN_DROP_NONE;
	if (dport != RAIN_UDP_PORT)
		return RAIN_DROP_NOT_OURS;
	if (v->l4_len < RAIN_HDR_LEN)
		return RAIN_DROP_TRUNCATED;
	v->rh = (struct rain_hdr *)v->l4_payload;
	if (v->rh->version != RAIN_VERSION)
		return RAIN_DROP_BAD_VERSION;
	if (v->rh->kind < 1 || v->rh->kind > RAIN_KIND_MAX)
		return RAIN_DROP_BAD_KIND;
	if (v->rh->flags & RAIN_F_LARGE) {
		/* Header only: a large task dispatched as its metadata (Draconis); its payload
		 * stayed with the client and the worker FETCHes it. */
		if (v->rh->kind == RAIN_DISPATCH && v->l4_len == RAIN_HDR_LEN)
			return RAIN_DROP_NONE;
		const struct rain_slot_hdr *s = (const struct rain_slot_hdr *)(v->l4_payload + RAIN_HDR_LEN);
		if (v->l4_len < RAIN_HDR_LEN + RAIN_SLOT_HDR_LEN)
			return RAIN_DROP_TRUNCATED;
		if (rte_be_to_cpu_32(s->magic) != RAIN_SLOT_MAGIC ||
		    rte_be_to_cpu_32(s->length) < RAIN_SLOT_HDR_LEN ||
		    rte_be_to_cpu_32(s->length) > v->l4_len - RAIN_HDR_LEN)
			return RAIN_DROP_BAD_PAYLOAD;
	}
	return RAIN_DROP_NONE;
}

void rain_fill_headers(struct rte_mbuf *m, const struct rain_addr *src, const struct rain_addr *dst, uint32_t l4_len)
{
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)p;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);

	rte_ether_addr_copy(&dst->mac, &eth->dst_addr);
	rte_ether_addr_copy(&src->mac, &eth->src_addr);
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->type_of_service = 0;
	ip->total_length = rte_cpu_to_be_16(sizeof(*ip) + sizeof(*udp) + l4_len);
	ip->packet_id = 0;
	ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = src->ip;
	ip->dst_addr = dst->ip;
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	udp->src_port = src->port;
	udp->dst_port = dst->port;
	udp->dgram_len = rte_cpu_to_be_16(sizeof(*udp) + l4_len);
	udp->dgram_cksum = 0;
	m->data_len = m->pkt_len = RAIN_L2L3L4_LEN + l4_len;
}

struct rain_hdr *rain_alloc(struct rte_mempool *mp, struct rte_mbuf **out, uint32_t payload_len)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
	if (m == NULL)
		return NULL;
	if (rte_pktmbuf_tailroom(m) < RAIN_FRAME_MIN + payload_len) {
		rte_pktmbuf_free(m);
		return NULL;
	}
	*out = m;
	struct rain_hdr *rh = (struct rain_hdr *)(rte_pktmbuf_mtod(m, uint8_t *) + RAIN_L2L3L4_LEN);
	memset(rh, 0, RAIN_HDR_LEN);
	rh->version = RAIN_VERSION;
	return rh;
}

void rain_swap_reply(struct rain_view *v)
{
	struct rte_ether_addr tmac = v->eth->src_addr;
	v->eth->src_addr = v->eth->dst_addr;
	v->eth->dst_addr = tmac;
	rte_be32_t tip = v->ip->src_addr;
	v->ip->src_addr = v->ip->dst_addr;
	v->ip->dst_addr = tip;
	v->ip->time_to_live = 64;
	v->ip->hdr_checksum = 0;
	v->ip->hdr_checksum = rte_ipv4_cksum(v->ip);
	rte_be16_t tp = v->udp->src_port;
	v->udp->src_port = v->udp->dst_port;
	v->udp->dst_port = tp;
	v->udp->dgram_cksum = 0;
}

int rain_parse_mac(const char *s, struct rte_ether_addr *mac)
{
	return rte_ether_unformat_addr(s, mac);
}

int rain_parse_ipv4(const char *s, rte_be32_t *ip)
{
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*ip = a.s_addr;
	return 0;
}
