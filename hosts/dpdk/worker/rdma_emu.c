/* SPDX-License-Identifier: Apache-2.0
 *
 * Emulated RoCEv2 (--rdma emulated): there is no RDMA NIC on the emulated testbed, so
 * the RX loop applies RDMA WRITE ONLY packets to the ring (rdma.c) itself, with the
 * checks a NIC would make. Both opcodes are taken (RC 0x0a, UC 0x2a), whatever
 * --qp-type says: the switch sends the one the registration's qp_type asks for.
 * QPN of thread i = qpn_base + i; one rkey per server (--rkey).
 *
 * PSN policy, per QP (24-bit serial arithmetic, d = (psn - expected) mod 2^24):
 *   d == 0          in order: apply, expected = psn + 1;
 *   d >= 2^23       older (a duplicate or a late retransmission): drop, counted as
 *                   roce_psn; the ring is not touched;
 *   0 < d < 2^23    a gap (WRITEs lost on the way): count roce_psn_gaps and the PSNs
 *                   skipped, apply this WRITE and resynchronise (expected = psn + 1).
 * The switch cannot retransmit (RC go-back-N would need a NAK path it does not have),
 * so stalling the QP on a gap, as an RC responder would, would lose every later
 * WRITE; a lost pre-write only costs that task, and the slot-header check refuses its
 * descriptor (desc_mismatch). Invalid WRITEs (QPN, rkey, bounds, length) are dropped
 * without consuming a PSN.
 *
 * iCRC: the switch cannot compute it and sends zeros (Rain (CoNEXT 2026), section
 * 3.2.2), so a ConnectX whose check is on drops every WRITE. With --icrc-check (the
 * inventory's roce.icrc_check: on) this NIC does the same, first as a NIC does, and
 * counts roce_icrc, so such a testbed fails visibly here too. The check costs one
 * CRC-32 pass over the datagram (roce_icrc.c). A re-registration (knobs.enabled 0 -> 1) resets the
 * expected PSN to --psn, as the controller does on the switch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rte_debug.h>
#include <rte_malloc.h>

#include "roce_icrc.h"
#include "worker.h"

static int emu_init(struct rw_ctx *w)
{
	struct rw_ring *r = &w->ring;

	/* Outside the EAL heap (small with --no-huge). */
	if (rw_ring_map(w) != 0)
		rte_exit(EXIT_FAILURE, "RDMA ring (%u x %u x %u B): mmap: %s\n", w->c.threads, w->c.ring_slots,
			 w->c.slot_size, strerror(errno));
	r->rkey = w->c.rkey;
	r->qpn_base = w->c.qpn_base;
	for (uint32_t i = 0; i < w->c.threads; i++)
		r->qpn[i] = r->qpn_base + i;
	w->qps = rte_zmalloc("rw_qps", sizeof(*w->qps) * w->c.threads, RTE_CACHE_LINE_SIZE);
	if (w->qps == NULL)
		rte_exit(EXIT_FAILURE, "cannot allocate the emulated QPs\n");
	for (uint32_t i = 0; i < w->c.threads; i++)
		w->qps[i].expected_psn = r->psn;
	return 0;
}

static inline uint32_t be24(const uint8_t b[3])
{
	return ((uint32_t)b[0] << 16) | ((uint32_t)b[1] << 8) | b[2];
}

static enum rain_drop emu_rx(struct rw_ctx *w, const struct rain_view *v)
{
	const struct rw_ring *r = &w->ring;

	if (v->l4_len < ROCE_BTH_LEN)
		return RAIN_DROP_TRUNCATED;
	const struct roce_bth *bth = (const struct roce_bth *)v->l4_payload;
	if (bth->opcode != ROCE_OP_RC_WRITE_ONLY && bth->opcode != ROCE_OP_UC_WRITE_ONLY)
		return RAIN_DROP_ROCE_OPCODE;
	if (v->l4_len < ROCE_BTH_LEN + ROCE_RETH_LEN + ROCE_ICRC_LEN)
		return RAIN_DROP_TRUNCATED;
	if (w->c.icrc_check) {
		size_t len = (size_t)(v->l4_payload + v->l4_len - (const uint8_t *)v->ip);
		if (rw_roce_icrc_ok((const uint8_t *)v->ip, len) != 1)
			return RAIN_DROP_ROCE_ICRC;
	}
	uint32_t qpn = be24(bth->dst_qp);
	if (qpn < r->qpn_base || qpn - r->qpn_base >= w->c.threads)
		return RAIN_DROP_ROCE_QPN;
	uint32_t i = qpn - r->qpn_base;
	const struct roce_reth *reth = (const struct roce_reth *)(v->l4_payload + ROCE_BTH_LEN);
	if (rte_be_to_cpu_32(reth->rkey) != r->rkey)
		return RAIN_DROP_ROCE_RKEY;
	/* Payload = UDP payload - BTH - RETH - pad - iCRC; a WRITE ONLY carries exactly dma_len. */
	uint32_t pad = (bth->se_m_pad_tver >> 4) & 3u;
	uint32_t len = v->l4_len - ROCE_BTH_LEN - ROCE_RETH_LEN - ROCE_ICRC_LEN;
	uint32_t dma_len = rte_be_to_cpu_32(reth->dma_len);
	if (pad > len || dma_len != len - pad)
		return RAIN_DROP_TRUNCATED;
	uint64_t va = rte_be_to_cpu_64(reth->va);
	uint64_t lo = (uint64_t)(uintptr_t)r->base + (uint64_t)i * r->region_size;
	if (va < lo || va - lo > r->region_size || dma_len > r->region_size - (va - lo))
		return RAIN_DROP_ROCE_BOUNDS;

	struct rw_qp *qp = &w->qps[i];
	uint32_t req = __atomic_load_n(&qp->reset_req, __ATOMIC_ACQUIRE);
	if (req != qp->reset_seen) {
		qp->reset_seen = req;
		qp->expected_psn = r->psn;
	}
	uint32_t psn = be24(bth->psn);
	uint32_t d = (psn - qp->expected_psn) & 0xffffffu;
	if (d >= (1u << 23))
		return RAIN_DROP_ROCE_PSN;
	if (d != 0) {
		RW_INC(w->rx.roce_psn_gaps);
		RW_ADD(w->rx.roce_psn_skipped, d);
	}
	memcpy((void *)(uintptr_t)va, v->l4_payload + ROCE_BTH_LEN + ROCE_RETH_LEN, dma_len);
	qp->expected_psn = (psn + 1) & 0xffffffu;
	RW_INC(w->rx.roce_applied);
	RW_ADD(w->rx.roce_bytes, dma_len);
	return RAIN_DROP_NONE;
}

static int emu_reset_qp(struct rw_ctx *w, uint32_t thread)
{
	__atomic_fetch_add(&w->qps[thread].reset_req, 1, __ATOMIC_RELEASE);
	return 0;
}

static void emu_fini(struct rw_ctx *w)
{
	rw_ring_unmap(w);
	rte_free(w->qps);
}

const struct rw_rdma_ops rw_rdma_emulated = {
	.name = "emulated", .init = emu_init, .rx = emu_rx, .reset_qp = emu_reset_qp, .fini = emu_fini,
};
