/* A connected RC QP pair on the first verbs device: the loopback the tests drive. */
#ifndef LOOPBACK_H
#define LOOPBACK_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loopback {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
};

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

static inline void lb_connect(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("modify INIT failed");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_4096;
	at.dest_qp_num = dest;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.sgid_index = 1;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		DIE("modify RTR failed");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("modify RTS failed");
}

static inline struct ibv_qp *lb_qp(struct loopback *lb)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = lb->cq;
	ia.recv_cq = lb->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(lb->pd, &ia);
	if (qp == NULL)
		DIE("create_qp failed");
	return qp;
}

static inline void lb_open(struct loopback *lb)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list == NULL || n < 1)
		DIE("no verbs device");
	lb->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (lb->ctx == NULL)
		DIE("open_device failed");
	lb->pd = ibv_alloc_pd(lb->ctx);
	lb->cq = ibv_create_cq(lb->ctx, 256, NULL, NULL, 0);
	if (lb->pd == NULL || lb->cq == NULL)
		DIE("pd/cq failed");
	lb->a = lb_qp(lb);
	lb->b = lb_qp(lb);
	lb_connect(lb->a, lb->b->qp_num);
	lb_connect(lb->b, lb->a->qp_num);
}

/* One signalled RDMA op from QP a; returns the completion status. */
static inline enum ibv_wc_status lb_rdma(struct loopback *lb, enum ibv_wr_opcode op, struct ibv_mr *local,
					 void *laddr, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)laddr, .length = len, .lkey = local->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 42;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(lb->a, &wr, &bad))
		DIE("post_send refused");
	struct ibv_wc wc;
	int got = 0;
	for (int spins = 0; spins < 1000000 && got == 0; spins++)
		got = ibv_poll_cq(lb->cq, 1, &wc);
	if (got != 1)
		DIE("no completion");
	return wc.status;
}

#endif
