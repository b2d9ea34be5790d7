/* SPDX-License-Identifier: Apache-2.0
 *
 * Building and parsing Rain datagrams (Ethernet / IPv4 / UDP / rain_hdr) in mbufs.
 * Shared by rain-client and rain-worker. Parsing never trusts lengths: every
 * failure has a reason the caller counts (enum rain_drop), nothing aborts.
 */
#ifndef RAIN_PKT_H
#define RAIN_PKT_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include "rain_proto.h"

#define RAIN_L2L3L4_LEN (sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr) + sizeof(struct rte_udp_hdr))
#define RAIN_FRAME_MIN  (RAIN_L2L3L4_LEN + RAIN_HDR_LEN)

/* Why a received frame was not used; each has a counter. */
enum rain_drop {
	RAIN_DROP_NONE = 0,
	RAIN_DROP_NOT_IPV4,      /* ARP, IPv6, ... */
	RAIN_DROP_NOT_UDP,
	RAIN_DROP_BAD_IP,        /* header length, total length, fragment */
	RAIN_DROP_NOT_OURS,      /* a UDP port we do not serve */
	RAIN_DROP_TRUNCATED,     /* shorter than its headers say */
	RAIN_DROP_BAD_VERSION,
	RAIN_DROP_BAD_KIND,      /* unknown, or a kind this program does not take */
	RAIN_DROP_BAD_WORKER,    /* worker id out of range */
	RAIN_DROP_BAD_PAYLOAD,   /* large task with a bad slot header */
	RAIN_DROP_ROCE_QPN,      /* RoCE: unknown destination QP */
	RAIN_DROP_ROCE_RKEY,     /* RoCE: wrong rkey */
	RAIN_DROP_ROCE_BOUNDS,   /* RoCE: VA/length outside the ring */
	RAIN_DROP_ROCE_PSN,      /* RoCE: duplicate or out-of-order PSN */
	RAIN_DROP_ROCE_OPCODE,   /* RoCE: not an RDMA WRITE ONLY */
	RAIN_DROP_ROCE_OFFLOADED,/* RoCE reached DPDK though the NIC applies WRITEs (--rdma ibverbs) */
	RAIN_DROP_ROCE_ICRC,     /* RoCE: wrong iCRC, with the NIC's check on (--icrc-check) */
	RAIN_DROP_NO_ROOM,       /* a FIFO or ring was full */
	RAIN_DROP_MAX
};

extern const char *const rain_drop_names[RAIN_DROP_MAX];

/* Where a datagram goes: L2 and L3/L4 addresses, network byte order for IP/ports. */
struct rain_addr {
	struct rte_ether_addr mac;
	rte_be32_t ip;
	rte_be16_t port;
};

/* A parsed frame: pointers into the mbuf. */
struct rain_view {
	struct rte_ether_hdr *eth;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	uint8_t *l4_payload;   /* after the UDP header */
	uint32_t l4_len;       /* UDP payload bytes (per the UDP length, checked against the frame) */
	struct rain_hdr *rh;   /* NULL unless a Rain datagram */
};

/* Parse Ethernet/IPv4/UDP; for RAIN_UDP_PORT also validate the rain_hdr. RoCE (4791)
 * datagrams parse as UDP with rh == NULL. Returns RAIN_DROP_NONE on success. A
 * RAIN_F_LARGE message carries a valid rain_slot_hdr, except a header-only DISPATCH
 * (the payload stays with the client: rain_dispatch_needs_fetch). */
enum rain_drop rain_parse(struct rte_mbuf *m, struct rain_view *v);

/* Fill Ethernet/IPv4/UDP headers for a datagram of `l4_len` payload bytes whose
 * payload is already in place after them; sets mbuf lengths and the IP checksum
 * (the UDP checksum is 0: optional in IPv4, and what the switch sends too). */
void rain_fill_headers(struct rte_mbuf *m, const struct rain_addr *src, const struct rain_addr *dst, uint32_t l4_len);

/* Allocate an mbuf with room for the headers and `payload_len` bytes after a rain_hdr;
 * returns the rain_hdr to fill (payload follows it), or NULL if the pool is empty. */
struct rain_hdr *rain_alloc(struct rte_mempool *mp, struct rte_mbuf **out, uint32_t payload_len);

/* Turn a received Rain frame into a reply in place: swap MACs, IPs and ports. */
void rain_swap_reply(struct rain_view *v);

static inline bool rain_dispatch_needs_fetch(const struct rain_view *v)
{
	return v->rh->kind == RAIN_DISPATCH && (v->rh->flags & RAIN_F_LARGE) && v->l4_len == RAIN_HDR_LEN;
}

static inline uint64_t rain_get_u64(const uint8_t b[8])
{
	uint64_t x;
	memcpy(&x, b, 8);
	return rte_be_to_cpu_64(x);
}

static inline void rain_put_u64(uint8_t b[8], uint64_t v)
{
	uint64_t x = rte_cpu_to_be_64(v);
	memcpy(b, &x, 8);
}

int rain_parse_mac(const char *s, struct rte_ether_addr *mac);
int rain_parse_ipv4(const char *s, rte_be32_t *ip);

#endif /* RAIN_PKT_H */
