/* SPDX-License-Identifier: Apache-2.0
 *
 * The mock ConnectX refuses what a real one would (mock_ibverbs.c's header): each line
 * printed is "<case> <return value>", for test_worker_ibverbs.py to compare. Linked
 * against the real libibverbs and run with the mock in LD_PRELOAD, as rain-worker is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>

static struct ibv_qp *qp_of(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = t,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	return ibv_create_qp(pd, &ia);
}

static int to_init(struct ibv_qp *qp, int mask)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	return ibv_modify_qp(qp, &a, mask);
}

static int to_rtr(struct ibv_qp *qp, int mask, int sgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = 0xfffffe,
				 .rq_psn = 5, .min_rnr_timer = 12 };
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = (uint8_t)sgid;
	a.ah_attr.grh.hop_limit = 64;
	return ibv_modify_qp(qp, &a, mask);
}

int main(void)
{
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int uc_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	const int rc_rtr = uc_rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list == NULL || n < 1)
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);

	void *ring = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap((char *)ring + (1 << 15), 1 << 15); /* the second half is gone */
	struct ibv_mr *mr = ibv_reg_mr(pd, ring, 1 << 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	printf("mr_unmapped %d\n", mr ? 0 : errno);
	mr = ibv_reg_mr(pd, ring, 1 << 15, IBV_ACCESS_REMOTE_WRITE);
	printf("mr_remote_write_alone %d\n", mr ? 0 : errno);
	mr = ibv_reg_mr(pd, ring, 1 << 15, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	printf("mr_ok %d\n", mr ? 0 : errno);

	struct ibv_qp *uc = qp_of(pd, cq, IBV_QPT_UC), *rc = qp_of(pd, cq, IBV_QPT_RC);
	printf("ud_qp %d\n", qp_of(pd, cq, IBV_QPT_UD) ? 0 : errno);
	printf("reset_to_rtr %d\n", to_rtr(uc, uc_rtr, 1));
	printf("init_without_port %d\n", to_init(uc, init & ~IBV_QP_PORT));
	printf("init_ok %d\n", to_init(uc, init));
	printf("rtr_without_rq_psn %d\n", to_rtr(uc, uc_rtr & ~IBV_QP_RQ_PSN, 1));
	printf("uc_rtr_with_rc_attrs %d\n", to_rtr(uc, rc_rtr, 1));
	printf("rtr_empty_sgid %d\n", to_rtr(uc, uc_rtr, 3));
	printf("uc_rtr_ok %d\n", to_rtr(uc, uc_rtr, 1));
	printf("rc_init_ok %d\n", to_init(rc, init));
	printf("rc_rtr_without_rnr_timer %d\n", to_rtr(rc, rc_rtr & ~IBV_QP_MIN_RNR_TIMER, 1));
	printf("rc_rtr_ok %d\n", to_rtr(rc, rc_rtr, 1));
	printf("destroy_cq_in_use %d\n", ibv_destroy_cq(cq));
	printf("dealloc_pd_in_use %d\n", ibv_dealloc_pd(pd));
	ibv_destroy_qp(uc);
	ibv_destroy_qp(rc);
	printf("destroy_cq %d\n", ibv_destroy_cq(cq));
	printf("dealloc_pd_with_mr %d\n", ibv_dealloc_pd(pd));
	ibv_dereg_mr(mr);
	printf("dealloc_pd %d\n", ibv_dealloc_pd(pd));
	ibv_close_device(ctx);
	return 0;
}
